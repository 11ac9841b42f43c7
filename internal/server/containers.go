package server

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/keywaydb/keyway/internal/backend"
	"github.com/keywaydb/keyway/internal/config"
	"github.com/keywaydb/keyway/internal/container"
	"github.com/keywaydb/keyway/internal/engine"
	"github.com/keywaydb/keyway/internal/shard"
	"github.com/keywaydb/keyway/internal/validity"
	"github.com/keywaydb/keyway/internal/writebehind"
)

// containerSet is the containers keyway serves and the database/sql pools (one per backend group) they share.
type containerSet struct {
	tables  []*engine.Table
	dbs     []*sql.DB
	byGroup map[string]*sql.DB // the same pools by group name
	// replicas are the groups' that read replicas (container.Replicas: the replicas' pools and the positions of the
	// containers' writes), one per such group.
	replicas []*container.Replicas
	// defaultName is the container keys without "@@" go to: "default" when one is named so, else (as the InnoDB
	// plugin does) the first container of an imported innodb_memcache schema; "" for none (the local store).
	defaultName string
}

// openContainers opens every configured container (and, with [migrate] innodb_memcache, every container of that
// group's plugin schema) through its backend group, checking each against the real table, and binds them to the
// engine with their policies. A container whose group cannot be reached does not fail the start: it answers its
// keys with an error naming the group until its table is checked (see container.Open), while plain keys and other
// containers serve, and its write-behind journal waits. A table that does not fit its definition fails the start.
// On a group that reads replicas, containers read from replicas that have every write keyway knows of to their
// table, and note each write's GTID on the group's gate in reg before acknowledging it (see container.Replicas).
// On an error nothing stays open.
func openContainers(ctx context.Context, cfg config.Config, eng *engine.Engine, topo *backend.Topology, reg *validity.Registry, log *slog.Logger) (_ *containerSet, err error) {
	return openShardedContainers(ctx, cfg, eng, topo, reg, nil, log)
}

// openShardedContainers is openContainers where a container on a table the shard map (shards; nil without
// sharding) shards routes each key to its shard's group (container.OpenSharded; see shards_containers.go).
func openShardedContainers(ctx context.Context, cfg config.Config, eng *engine.Engine, topo *backend.Topology, reg *validity.Registry, shards *shard.Holder, log *slog.Logger) (_ *containerSet, err error) {
	ts := &containerSet{byGroup: map[string]*sql.DB{}}
	defer func() {
		if err != nil {
			ts.close()
		}
	}()
	dbs := map[*backend.Group]*sql.DB{}
	dbFor := func(g *backend.Group) *sql.DB {
		if dbs[g] == nil {
			dbs[g] = container.OpenDB(g.SQLConfig())
			ts.dbs = append(ts.dbs, dbs[g])
			ts.byGroup[g.Name()] = dbs[g]
		}
		return dbs[g]
	}
	reps := map[*backend.Group]*container.Replicas{}
	replicasOf := func(g *backend.Group) *container.Replicas {
		if !g.ReadsReplicas() || reg == nil {
			return nil
		}
		if reps[g] == nil {
			reps[g] = container.NewReplicas(g, reg.Gate(g.Name()))
			ts.replicas = append(ts.replicas, reps[g])
		}
		return reps[g]
	}
	type planned struct {
		def      container.Def
		policies container.Policies
		group    *backend.Group
		behind   *writebehind.Options // nil: write = "sync"
	}
	var plan []planned
	if name := cfg.Migrate.InnodbMemcache; name != "" {
		g := topo.Group(name)
		imported, err := container.ImportInnodbMemcache(ctx, dbFor(g))
		if err != nil {
			return nil, fmt.Errorf("migrate.innodb_memcache = %q (%s): %w", name, g.Addr(), err)
		}
		for _, c := range imported {
			plan = append(plan, planned{def: c.Def, policies: c.Policies, group: g})
		}
		ts.defaultName = imported[0].Def.Name // unless one is named "default", below
	}
	for _, c := range cfg.Containers {
		p := planned{def: containerDef(c), policies: containerPolicies(c), group: topo.Group(c.Group)}
		if c.Write == config.WriteAsync {
			p.behind = &writebehind.Options{Window: c.WriteWindow, MaxPending: c.WriteMaxPending, Logger: log}
		}
		plan = append(plan, p)
	}
	seen := map[string]bool{}
	for _, p := range plan {
		if p.def.Name == "default" {
			ts.defaultName = "default"
		}
		if seen[p.def.Name] {
			return nil, fmt.Errorf("container %q is defined twice (in [[containers]] and the innodb_memcache schema?)", p.def.Name)
		}
		seen[p.def.Name] = true
	}
	optionsFor := func(g *backend.Group, p container.Policies) container.Options {
		return container.Options{
			Backend: fmt.Sprintf("group %s (%s)", g.Name(), g.Addr()), Logger: log,
			PoolDeadline: container.StatementTimeout,
			ReadOnly:     !p.WritesTable(),
			Replicas:     replicasOf(g)}
	}
	var openSharded func(context.Context, container.Def, container.Policies) (*container.Container, error)
	for _, p := range plan {
		if container.IsSharded(shards, p.def) {
			openSharded = shardedOpener(topo, shards, dbFor, optionsFor)
			break
		}
	}
	for _, p := range plan {
		group := p.group.Name()
		var ct *container.Container
		var err error
		// On a group with invalidate = "ttl" no follower sees direct writes: copies live for the group's ttl.
		copyTTL := ttlOnly(cfg)[group]
		if container.IsSharded(shards, p.def) {
			// Each key's shard's group (see shardedOpener); each row's copy is served while its group's gate
			// vouches (see engine.NewContainer). Copies have one life: the shortest ttl of a group a map may name.
			group, copyTTL = "", shardCopyTTL(cfg)
			ct, err = openSharded(ctx, p.def, p.policies)
			if err != nil {
				return nil, err
			}
		} else {
			// An unreachable group does not stop the start: the container serves once its table is checked.
			ct, err = container.Open(ctx, dbFor(p.group), p.def, optionsFor(p.group, p.policies))
		}
		if err != nil {
			// Said as keyway check says it: the container once, and the fix.
			return nil, fmt.Errorf("group %q: %s", p.group.Name(), containerProblem(p.group.Addr(), p.group.SQLConfig().User, p.def, err))
		}
		if p.behind != nil && !eng.Persistent() {
			log.Warn("container writes behind without a persistent store: sets acknowledged but not yet in the table are lost if keyway dies (set [store] data_dir and durability)", "container", p.def.Name)
		}
		ts.tables = append(ts.tables, eng.NewContainer(engine.ContainerOptions{Container: ct, Policies: p.policies,
			WriteBehind: p.behind, CopyTTL: copyTTL, Group: group}))
	}
	return ts, nil
}

// shardCopyTTL is the copy life of a container on a sharded table (rowcache.Options.CopyTTL): the shortest ttl
// of a group with invalidate = "ttl" (a reloaded map may send keys to any configured group), 0 when none has one.
// A copy of a followed shard's row that expires early is only a miss.
func shardCopyTTL(cfg config.Config) time.Duration {
	var d time.Duration
	for _, ttl := range ttlOnly(cfg) {
		if d == 0 || ttl < d {
			d = ttl
		}
	}
	return d
}

// close stops the containers' write-behind queues (writing what they can; the rest stays in the store's journal)
// and group committers (answering queued writes), and closes their pools.
func (ts *containerSet) close() error {
	var errs []error
	for _, t := range ts.tables {
		if t.Behind != nil {
			// Before the container: the queue's last writes go through it.
			if err := t.Behind.Close(); err != nil {
				errs = append(errs, err)
			}
		}
		if err := t.C.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	for _, r := range ts.replicas {
		r.Close()
	}
	for _, db := range ts.dbs {
		db.Close()
	}
	return errors.Join(errs...)
}

// containerPolicies are a [[containers]] entry's policies. The config has validated the names; parsing cannot fail.
func containerPolicies(c config.Container) container.Policies {
	var p container.Policies
	p.Get, _ = container.ParsePolicy(c.Get)
	p.Set, _ = container.ParsePolicy(c.Set)
	p.Delete, _ = container.ParsePolicy(c.Delete)
	p.Flush, _ = container.ParsePolicy(c.Flush)
	return p
}
