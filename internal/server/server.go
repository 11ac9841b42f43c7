// Package server wires keyway together: it opens the store (loading what the
// disk holds before any port opens), builds the engine and the memcache door,
// listens, and stops gracefully so every acknowledged write reaches the disk.
//
// Invariants:
//   - No listener accepts a connection before the store has finished loading.
//   - Stop closes the doors first, then the store, so nothing is written to a
//     closed store.
package server

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"runtime/debug"
	"time"

	"github.com/keywaydb/keyway/internal/admin"
	"github.com/keywaydb/keyway/internal/config"
	"github.com/keywaydb/keyway/internal/engine"
	"github.com/keywaydb/keyway/internal/memcache"
	"github.com/keywaydb/keyway/internal/sqlproxy"
	"github.com/keywaydb/keyway/internal/stats"
	"github.com/keywaydb/keyway/internal/store"
)

// Server is a running keyway.
type Server struct {
	cfg      config.Config
	log      *slog.Logger
	store    *store.Store
	engine   *engine.Engine
	memcache *memcache.Server
	mcLn     net.Listener
	sql      *sqlproxy.Server // nil when the SQL door is off
	sqlLn    net.Listener
	admin    *admin.Server // nil when the admin listener is off
	tables   []*engine.Table
	tableDBs []*sql.DB
	adminLn  net.Listener
	errc     chan error
}

// Start opens the store, then the memcache listener, and serves in the background.
func Start(cfg config.Config, log *slog.Logger) (*Server, error) {
	if log == nil {
		log = slog.Default()
	}
	setMemoryLimit(cfg.Memcache.MemoryLimit)
	dur, err := durability(cfg.Store.Durability)
	if err != nil {
		return nil, err
	}
	if cfg.Store.DataDir == "" {
		dur = store.DurabilityNone
	}
	began := time.Now()
	st, err := store.Open(store.Options{
		MemoryLimit:   cfg.Memcache.MemoryLimit,
		DataDir:       cfg.Store.DataDir,
		Durability:    dur,
		FlushInterval: cfg.Store.FlushInterval,
		Logger:        log,
	})
	if err != nil {
		return nil, err
	}
	eng := engine.New(st, engine.Options{MaxItemSize: cfg.Memcache.MaxItemSize})
	openCtx, cancelOpen := context.WithTimeout(context.Background(), 30*time.Second)
	tables, tableDBs, err := openTables(openCtx, cfg, eng, log)
	cancelOpen()
	if err != nil {
		st.Close()
		return nil, err
	}
	eng.SetTables(tables)
	if left := st.TakeJournal("@@"); len(left) > 0 {
		// Kept on disk: configuring the container again writes them.
		log.Warn("the store's journal holds acknowledged writes for containers that are not configured (or not async) now; they stay until such a container is configured", "rows", len(left))
	}
	ln, err := net.Listen("tcp", cfg.Memcache.Listen)
	if err != nil {
		closeTables(tables, tableDBs)
		st.Close()
		return nil, fmt.Errorf("memcache.listen %q: %w (is another memcached or keyway on that port? change -p or [memcache] listen)", cfg.Memcache.Listen, err)
	}
	mc := memcache.NewServer(eng, memcache.Options{MaxConnections: cfg.Memcache.MaxConnections, Logger: log})
	s := &Server{cfg: cfg, log: log, store: st, engine: eng, memcache: mc, mcLn: ln, errc: make(chan error, 3),
		tables: tables, tableDBs: tableDBs}
	if err := s.startSQLAndAdmin(); err != nil {
		ln.Close()
		closeTables(tables, tableDBs)
		st.Close()
		return nil, err
	}
	go func() { s.errc <- mc.Serve(ln) }()
	stats := st.Stats()
	log.Info("keyway serving",
		"memcache", ln.Addr().String(),
		"memory_limit", cfg.Memcache.MemoryLimit,
		"data_dir", cfg.Store.DataDir,
		"durability", durabilityName(dur),
		"items_loaded", stats.CurrItems,
		"startup", time.Since(began).Round(time.Millisecond).String())
	if cfg.Store.DataDir == "" {
		log.Info("persistence off: the store starts empty after a restart (set [store] data_dir or --data-dir to keep it)")
	}
	if s.sql == nil {
		log.Info("SQL door off: no [sql] listen in the config")
	}
	return s, nil
}

// startSQLAndAdmin opens the SQL door and the admin listener when configured.
func (s *Server) startSQLAndAdmin() error {
	cfg := s.cfg
	metrics := stats.NewMetrics()
	metrics.SetMemcacheStatsFunc(s.memcache.Stats)
	digests := stats.NewDigests(digestCapacity)
	if cfg.SQL.Listen != "" {
		opts := sqlproxy.Options{
			Config:  cfg,
			Plans:   sqlproxy.NewPlanCache(planCapacity),
			Digests: digests,
			Metrics: metrics,
			Logger:  s.log,
			// One truth across doors: SQL writes drop the memcache door's cached rows.
			Invalidate: s.engine.InvalidateTables,
		}
		if s.engine.WritesBehind() {
			// ... and SQL statements see, and act after, every memcache write
			// acknowledged before them, even one still queued for the table.
			opts.Settle = s.engine.SyncTables
		}
		proxy, err := sqlproxy.New(opts)
		if err != nil {
			return err
		}
		ln, err := net.Listen("tcp", cfg.SQL.Listen)
		if err != nil {
			return fmt.Errorf("sql.listen %q: %w (is MySQL or another keyway on that port? change [sql] listen or --sql-listen)", cfg.SQL.Listen, err)
		}
		s.sql, s.sqlLn = proxy, ln
		go func() { s.errc <- proxy.Serve(ln) }()
		s.log.Info("SQL door serving", "sql", ln.Addr().String(), "groups", len(cfg.Groups), "users", len(cfg.SQL.Users))
	}
	if cfg.Admin.Listen != "" {
		ln, err := net.Listen("tcp", cfg.Admin.Listen)
		if err != nil {
			s.stopSQL(context.Background())
			return fmt.Errorf("admin.listen %q: %w (change [admin] listen or --admin-listen)", cfg.Admin.Listen, err)
		}
		s.admin = admin.New(admin.Options{Listen: cfg.Admin.Listen, Digests: digests, Metrics: metrics, Status: s.status, Logger: s.log})
		s.adminLn = ln
		go func() {
			if err := s.admin.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				s.errc <- err
			}
		}()
		s.log.Info("admin serving", "admin", ln.Addr().String())
	}
	return nil
}

// Sizes of the per-digest tables: enough for an application's statements,
// bounded against generated SQL with literals the lexer cannot fold.
const (
	planCapacity   = 10000
	digestCapacity = 10000
)

func (s *Server) stopSQL(ctx context.Context) error {
	if s.sql == nil {
		return nil
	}
	return s.sql.Shutdown(ctx)
}

// status is what /status shows.
func (s *Server) status() any {
	st := map[string]any{
		"memcache": map[string]any{"listen": s.mcLn.Addr().String(), "stats": s.memcache.Stats()},
		"store":    map[string]any{"data_dir": s.cfg.Store.DataDir, "durability": s.cfg.Store.Durability},
	}
	if s.sql != nil {
		st["sql"] = map[string]any{"listen": s.sqlLn.Addr().String(), "pools": s.sql.PoolStats()}
	}
	if len(s.tables) > 0 {
		containers := map[string]any{}
		for _, t := range s.tables {
			c := map[string]any{"table": t.Source, "get": t.Get, "set": t.Set, "delete": t.Delete, "flush": t.Flush,
				"write": "sync", "group_commit": t.C.Stats()}
			if t.Behind != nil {
				c["write"], c["write_behind"] = "async", t.Behind.Stats()
			}
			containers[t.Name] = c
		}
		st["containers"] = containers
	}
	return st
}

// SQLAddr is where the SQL door listens, or nil when it is off.
func (s *Server) SQLAddr() net.Addr {
	if s.sqlLn == nil {
		return nil
	}
	return s.sqlLn.Addr()
}

// MemcacheAddr is where the memcache door listens.
func (s *Server) MemcacheAddr() net.Addr { return s.mcLn.Addr() }

// Err reports a listener that failed while serving.
func (s *Server) Err() <-chan error { return s.errc }

// Stop closes the door, waits for clients up to ctx, then closes the store,
// writing what is pending.
func (s *Server) Stop(ctx context.Context) error {
	err := s.memcache.Shutdown(ctx)
	if serr := s.stopSQL(ctx); serr != nil {
		err = errors.Join(err, serr)
	}
	if s.admin != nil {
		if aerr := s.admin.Shutdown(ctx); aerr != nil {
			err = errors.Join(err, aerr)
		}
	}
	if cerr := closeTables(s.tables, s.tableDBs); cerr != nil {
		err = errors.Join(err, cerr)
	}
	if cerr := s.store.Close(); cerr != nil {
		err = errors.Join(err, cerr)
	}
	return err
}

func durability(name string) (store.Durability, error) {
	switch name {
	case config.DurabilityNone, "":
		return store.DurabilityNone, nil
	case config.DurabilityAsync:
		return store.DurabilityAsync, nil
	case config.DurabilitySync:
		return store.DurabilitySync, nil
	}
	return 0, fmt.Errorf("store.durability %q: want none, async or sync", name)
}

func durabilityName(d store.Durability) string {
	switch d {
	case store.DurabilityAsync:
		return config.DurabilityAsync
	case store.DurabilitySync:
		return config.DurabilitySync
	}
	return config.DurabilityNone
}

// setMemoryLimit tells the Go runtime to collect before the heap outgrows the
// item limit by much: items are charged with overhead already, and the rest
// covers connections, Pebble's caches and garbage between cycles. Without it
// the default GOGC lets the heap reach twice the live items.
func setMemoryLimit(items int64) {
	debug.SetMemoryLimit(items + items/4 + 48<<20)
}
