package server

// Containers on sharded tables (issue 42, the memcache door): a container whose table the shard map shards is
// opened with container.OpenSharded, one part per shard group, each on that group's pool and with that group's
// options (replicas, backend name), so each key's operations run on its shard's group. With get = "caching" the
// engine keeps one cache of the table's rows, each row's copy served while its shard's group's gate vouches (see
// engine.Engine.NewContainer): one lagging shard's follower stops only that shard's copies.

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/keywaydb/keyway/internal/backend"
	"github.com/keywaydb/keyway/internal/container"
	"github.com/keywaydb/keyway/internal/shard"
)

// partOpenTimeout bounds the check of a part opened after start (a group a reloaded map names first).
const partOpenTimeout = 10 * time.Second

// shardedOpener returns how openContainers opens a container on a sharded table. It makes the pools (and replica
// sets) of every configured group first: a reloaded map may send keys to any of them, and a part is then opened on
// first use, when dbFor and optionsFor (which are not safe for concurrent use) must only read what exists.
func shardedOpener(topo *backend.Topology, shards *shard.Holder, dbFor func(*backend.Group) *sql.DB,
	optionsFor func(*backend.Group, container.Policies) container.Options) func(context.Context, container.Def, container.Policies) (*container.Container, error) {
	dbs := map[string]*sql.DB{}
	for _, g := range topo.Groups() {
		dbs[g.Name()] = dbFor(g)
		optionsFor(g, container.Policies{}) // makes the group's replica set, if it reads replicas
	}
	return func(ctx context.Context, def container.Def, pol container.Policies) (*container.Container, error) {
		m := shards.Load()
		t := m.Table(def.Schema, def.Table)
		open := func(ctx context.Context, def container.Def, group string) (*container.Container, error) {
			g := topo.Group(group)
			if g == nil {
				return nil, fmt.Errorf("the shard map names group %q, which is not configured", group)
			}
			octx, cancel := context.WithTimeout(ctx, partOpenTimeout)
			defer cancel()
			ct, err := container.Open(octx, dbs[group], def, optionsFor(g, pol))
			if err != nil {
				return nil, fmt.Errorf("%s", containerProblem(g.Addr(), g.SQLConfig().User, def, err))
			}
			return ct, nil
		}
		return container.OpenSharded(ctx, def, container.Options{Backend: "shards of mapping " + t.Mapping.Name,
			Logger: optionsFor(topo.Groups()[0], pol).Logger}, container.ShardOptions{Holder: shards, Open: open})
	}
}
