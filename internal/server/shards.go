package server

// The shard map's life in the server: loaded at start from the config ([[shard_maps]]) or from the keyway_shards
// tables on the global group ([sharding] source = "table"), swapped whole into one shard.Holder that the SQL door
// routes by, and reloaded on SIGHUP (config form) or when the binlog follower sees the tables change (table form;
// the follower invalidates them in the validity registry, and a watcher reloads when their stamp moves, with a
// periodic reload as a net for a global group without a follower). A map that does not load or validate is
// logged and the running map stays.

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/keywaydb/keyway/internal/config"
	"github.com/keywaydb/keyway/internal/shard"
	"github.com/keywaydb/keyway/internal/validity"
)

// shardTablesPoll is how often the watcher looks at the keyway_shards tables' stamps; shardReloadEvery is the
// periodic reload.
const (
	shardTablesPoll  = 200 * time.Millisecond
	shardReloadEvery = 30 * time.Second
)

// shardState is the server's shard map and, for the table form, the connection and watcher that reload it.
type shardState struct {
	holder shard.Holder
	db     *sql.DB // the global group, for source = "table"
	stop   context.CancelFunc
	done   chan struct{}
}

// startShards loads the map when sharding is configured (s.shards stays nil otherwise). The table form's tables
// are registered with the validity registry first, so that the binlog follower, started after, invalidates them.
func (s *Server) startShards(ctx context.Context) error {
	if !s.cfg.ShardingInUse() {
		return nil
	}
	st := &shardState{}
	if s.cfg.Sharding.Source == config.ShardSourceTable {
		g := s.topo.Group(s.cfg.Sharding.Global)
		if g == nil {
			return fmt.Errorf("sharding.global %q: no such group", s.cfg.Sharding.Global)
		}
		conn, err := mysql.NewConnector(g.SQLConfig())
		if err != nil {
			return fmt.Errorf("sharding: the global group %q: %w", g.Name(), err)
		}
		st.db = sql.OpenDB(conn)
		st.db.SetMaxOpenConns(1)
	}
	m, err := s.loadShardMap(ctx, st, s.cfg)
	if err != nil {
		if st.db != nil {
			st.db.Close()
		}
		return err
	}
	if _, err := st.holder.Store(m); err != nil {
		return err
	}
	s.shards = st
	s.log.Info("shard map loaded", "version", st.holder.Load().Version, "mappings", len(m.Mappings()), "source", s.cfg.Sharding.Source)
	if st.db != nil {
		wctx, cancel := context.WithCancel(context.Background())
		st.stop, st.done = cancel, make(chan struct{})
		go s.watchShardTables(wctx, st)
	}
	return nil
}

// loadShardMap builds the map cfg describes.
func (s *Server) loadShardMap(ctx context.Context, st *shardState, cfg config.Config) (*shard.Map, error) {
	sc := cfg.ShardConfig()
	if cfg.Sharding.Source != config.ShardSourceTable {
		m, err := shard.FromConfig(sc)
		if err != nil {
			return nil, fmt.Errorf("shard_maps: %w", err)
		}
		return m, nil
	}
	lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return shard.Load(lctx, st.db, cfg.Sharding.Schema, sc.Global, sc.Groups)
}

// watchShardTables reloads the table form's map when the follower saw its tables change, and every
// shardReloadEvery.
func (s *Server) watchShardTables(ctx context.Context, st *shardState) {
	defer close(st.done)
	schema := s.cfg.Sharding.Schema
	if schema == "" {
		schema = shard.DefaultSchema
	}
	var tables []*validity.Table
	for _, name := range []string{"map_version", "mappings", "shards", "tables"} {
		tables = append(tables, s.validity.Table(validity.TableID{Schema: schema, Name: name}))
	}
	stamp := func() (sum uint64) {
		for _, t := range tables {
			sum += t.Stamp()
		}
		return sum
	}
	seen, last := stamp(), time.Now()
	tick := time.NewTicker(shardTablesPoll)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if now := stamp(); now != seen || time.Since(last) >= shardReloadEvery {
			seen, last = now, time.Now()
			s.reloadShards(ctx, st, s.cfg)
		}
	}
}

// reloadShards loads the map again and swaps it in; a failure is logged and the running map stays.
func (s *Server) reloadShards(ctx context.Context, st *shardState, cfg config.Config) {
	m, err := s.loadShardMap(ctx, st, cfg)
	if err == nil {
		var swapped bool
		if swapped, err = st.holder.Store(m); err == nil && swapped {
			s.log.Info("shard map reloaded", "version", st.holder.Load().Version)
		}
	}
	if err != nil && ctx.Err() == nil {
		s.log.Error("the shard map did not reload; the running map stays", "version", st.holder.Load().Version, "err", err)
	}
}

// ShardMapVersion is the running shard map's version, 0 without sharding.
func (s *Server) ShardMapVersion() uint64 {
	if s.shards == nil {
		return 0
	}
	return s.shards.holder.Load().Version
}

// closeShards stops the watcher and its connection.
func (s *Server) closeShards() {
	if s.shards == nil || s.shards.db == nil {
		return
	}
	s.shards.stop()
	<-s.shards.done
	s.shards.db.Close()
}
