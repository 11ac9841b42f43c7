// Package server wires keyway together: it fills each component's Options from the validated config, opens the
// store (loading what the disk holds before any port opens), builds the backend topology, the validity registry,
// the engine and its containers, the binlog followers and the SQL result cache (restoring the warm-restart
// snapshot, warm.go), the memcache door, the SQL door and the admin listener, and stops them gracefully so every
// acknowledged write reaches the disk. It is the only package that reads config.Config. Check (check.go) tries a
// configuration against its backends without serving; Reload (reload.go) applies what of a re-read configuration
// can change while serving.
//
// Invariants:
//   - No listener accepts a connection before the store has finished loading.
//   - One backend.Topology serves the SQL door, the containers, their write-behind queues and the binlog
//     followers: there is one road to MySQL, and one view of which server is up. One validity.Registry serves
//     every cache and every follower.
//   - The containers open before the followers start (they register the tables and keys the followers watch),
//     and the warm snapshot's stamps are taken before the followers replay from its checkpoints.
//   - Stop closes the doors first, saves the warm snapshot, then closes the followers, the containers (writing
//     what their queues hold), the topology and the store, in that order, so nothing is written to anything
//     closed.
package server

import (
	"cmp"
	"context"
	"crypto/tls"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/keywaydb/keyway/internal/admin"
	"github.com/keywaydb/keyway/internal/backend"
	"github.com/keywaydb/keyway/internal/binlog"
	"github.com/keywaydb/keyway/internal/config"
	"github.com/keywaydb/keyway/internal/container"
	"github.com/keywaydb/keyway/internal/digests"
	"github.com/keywaydb/keyway/internal/engine"
	"github.com/keywaydb/keyway/internal/memcache"
	"github.com/keywaydb/keyway/internal/mysqlwire"
	"github.com/keywaydb/keyway/internal/qcache"
	"github.com/keywaydb/keyway/internal/shard"
	"github.com/keywaydb/keyway/internal/sqlproxy"
	"github.com/keywaydb/keyway/internal/stats"
	"github.com/keywaydb/keyway/internal/store"
	"github.com/keywaydb/keyway/internal/validity"
)

// Server is a running keyway.
type Server struct {
	cfg    config.Config
	log    *slog.Logger
	store  *store.Store
	engine *engine.Engine
	heap   heapRoom          // Go's heap limit, as its parts grow
	topo   *backend.Topology // the backend groups; empty without [[groups]]
	// containerDBs are the containers' pools by group, for followedPrimary (which a group's watcher may call
	// before they are open).
	containerDBs atomic.Pointer[map[string]*sql.DB]
	validity     *validity.Registry
	followers    []*binlog.Follower // one per group that follows its binlog
	// followerOf is the followers by group, for followedPrimary (which a group's watcher may call before they
	// start).
	followerOf atomic.Pointer[map[string]*binlog.Follower]
	sqlCache   *qcache.Cache // the SQL door's result cache; nil when off
	containers *containerSet
	memcache   *memcache.Server
	mcLn       net.Listener
	sql        *sqlproxy.Server // nil when the SQL door is off
	sqlLn      net.Listener
	admin      *admin.Server // nil when the admin listener is off
	metrics    *stats.Metrics
	adminLn    net.Listener
	shards     *shardState // the shard map; nil without sharding (shards.go)
	errc       chan error
}

// Options are what Start needs beside the config.
type Options struct {
	Logger  *slog.Logger // nil = slog.Default()
	Version string       // keyway's own version, shown by the memcache door's `version` and stats
}

// Start opens the store, the backends and containers, then the listeners, and serves in the background.
func Start(cfg config.Config, o Options) (*Server, error) {
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	durName := cfg.Store.Durability
	if cfg.Store.DataDir == "" {
		durName = config.DurabilityNone
	}
	// The store's items, and the SQL result cache's entries (a store of its own, within [cache] memory_limit),
	// live in arenas, outside Go's heap (store.Stats.Arena); what the store keeps on the heap is its changes on
	// their way to the disk, store.HeapMemory at most.
	allowance := int64(heapAllowance)
	if durName != config.DurabilityNone {
		allowance = diskHeapAllowance + store.HeapMemory
	}
	setMemoryLimit(allowance)
	dur := durabilities[durName]
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
	s := &Server{cfg: cfg, log: log, store: st, errc: make(chan error, 3), metrics: stats.NewMetrics()}
	s.heap.allowance = allowance
	fail := func(err error) (*Server, error) {
		if s.sql != nil {
			s.sql.Shutdown(context.Background())
		}
		s.close()
		return nil, err
	}
	// One registry of table validity: container rows, the SQL door, the result cache and the followers use it.
	s.validity = validity.NewRegistry()
	s.validity.OnSlotsGrown(func(slots int64) { s.heap.set(&s.heap.slots, slots) })
	s.engine = engine.New(st, engine.Options{MaxItemSize: cfg.Memcache.MaxItemSize, Validity: s.validity})
	gopts := groupOptions(cfg, log)
	for i := range gopts {
		gopts[i].OnNewPrimary = s.followedPrimary
	}
	if s.topo, err = backend.NewTopology(gopts); err != nil {
		return fail(err)
	}
	// Before the containers (a container on a sharded table routes by the map) and the followers: see startShards.
	if err := s.startShards(context.Background()); err != nil {
		return fail(err)
	}
	var shards *shard.Holder
	if s.shards != nil {
		shards = &s.shards.holder
	}
	openCtx, cancelOpen := context.WithTimeout(context.Background(), 30*time.Second)
	s.containers, err = openShardedContainers(openCtx, cfg, s.engine, s.topo, s.validity, shards, log)
	cancelOpen()
	if err != nil {
		return fail(err)
	}
	s.containerDBs.Store(&s.containers.byGroup)
	s.engine.SetContainers(s.containers.tables, s.containers.defaultName)
	if n := s.containers.defaultName; n != "" && n != "default" {
		log.Info("keys without @@ go to the innodb_memcache schema's first container, as the InnoDB plugin sends them", "container", n)
	}
	// After the containers: they register the tables and key columns the followers watch. The warm-restart
	// snapshot is stamped before the followers replay from its checkpoints, and restored after (package warm).
	snap := s.loadWarm()
	if s.followers, err = startFollowers(cfg, s.topo, s.validity, snap.Resume, log); err != nil {
		return fail(err)
	}
	followerOf := map[string]*binlog.Follower{}
	for _, f := range s.followers {
		followerOf[f.Status().Group] = f
	}
	s.followerOf.Store(&followerOf)
	s.sqlCache = newSQLCache(cfg, s.followers, s.validity, log)
	s.restoreWarm(snap)
	if left := st.TakeJournal(engine.JournalPrefix); len(left) > 0 {
		// Kept on disk: configuring the container again writes them.
		log.Warn("the store's journal holds acknowledged writes for containers that are not configured (or not async) now; they stay until such a container is configured", "rows", len(left))
	}
	if cfg.Memcache.Listen != "" { // listen = "" in the file: the memcache door is off
		mcUsers, mcTLS, err := memcacheSecurity(cfg.Memcache)
		if err != nil {
			return fail(err)
		}
		if s.mcLn, err = net.Listen("tcp", cfg.Memcache.Listen); err != nil {
			return fail(fmt.Errorf("memcache.listen %q: %w (is another memcached or keyway on that port? change -p or [memcache] listen)", cfg.Memcache.Listen, err))
		}
		var observe func(time.Duration) // only /metrics and the dashboard show it
		if cfg.Admin.Listen != "" {
			observe = s.metrics.ObserveMemcache
		}
		mcOpts := memcache.Options{
			Observe:          observe,
			MaxConnections:   cfg.Memcache.MaxConnections,
			Version:          memcache.ProtocolVersion + "-keyway-" + o.Version,
			WriteTimeout:     cfg.Memcache.WriteTimeout,
			MaxInflightBytes: cfg.Memcache.MaxInflightBytes,
			Logger:           log,
			Users:            mcUsers,
			TLS:              mcTLS,
		}
		if runtime.GOOS == "linux" && cfg.SQL.Listen == "" && mcTLS == nil && !st.WaitsForDisk() { // loops' terms
			mcOpts.EventLoops, mcOpts.OnLoopThread = loopThreads()
			mcOpts.LoopThreads, mcOpts.LoopSpin = true, loopSpin
		}
		s.memcache = memcache.NewServer(s.engine, mcOpts)
	}
	if err := s.startSQLAndAdmin(); err != nil {
		return fail(err)
	}
	mcAddr := "off"
	if s.memcache != nil {
		go func() { s.errc <- s.memcache.Serve(s.mcLn) }()
		mcAddr = s.mcLn.Addr().String()
	}
	stats := st.Stats()
	log.Info("keyway serving",
		"memcache", mcAddr,
		"memory_limit", cfg.Memcache.MemoryLimit,
		"data_dir", cfg.Store.DataDir,
		"durability", durName,
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

// memcacheSecurity loads the memcache door's users (memcache.auth_file) and TLS pair (memcache.tls_cert and
// tls_key). The config checked that they load; they are loaded again here, where they are used. Errors name the
// file, never its contents.
func memcacheSecurity(cfg config.Memcache) ([]memcache.User, *tls.Config, error) {
	var users []memcache.User
	if cfg.AuthFile != "" {
		list, err := config.ReadAuthFile(cfg.AuthFile)
		if err != nil {
			return nil, nil, fmt.Errorf("memcache.auth_file %q: %w", cfg.AuthFile, err)
		}
		for _, u := range list {
			users = append(users, memcache.User{Name: u.Name, Password: u.Password})
		}
	}
	var tc *tls.Config
	if cfg.TLSCert != "" {
		cert, err := tls.LoadX509KeyPair(cfg.TLSCert, cfg.TLSKey)
		if err != nil {
			return nil, nil, fmt.Errorf("memcache.tls_cert %q / memcache.tls_key %q: %w", cfg.TLSCert, cfg.TLSKey, err)
		}
		tc = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	}
	return users, tc, nil
}

// groupOptions are the backend groups of cfg, in order (the first is the default group).
func groupOptions(cfg config.Config, log *slog.Logger) []backend.GroupOptions {
	out := make([]backend.GroupOptions, 0, len(cfg.Groups))
	for _, g := range cfg.Groups {
		out = append(out, backend.GroupOptions{
			Name:           g.Name,
			Primary:        backend.Member{Network: g.PrimaryNetwork(), Address: g.Primary},
			User:           g.User,
			Password:       g.Password,
			MinIdle:        g.MinIdle,
			MaxOpen:        g.MaxOpen,
			MaxConnections: g.MaxConnections,
			IdleTimeout:    g.IdleTimeout,
			HealthInterval: g.HealthInterval,
			ConnectTimeout: g.ConnectTimeout,
			PoolWait:       g.PoolWait,
			TLS:            g.TLS, // config.TLS* and backend.TLS* share their values
			TLSCA:          g.TLSCA,
			TLSServerName:  g.TLSServerName,
			Replicas:       replicas(g.Replicas),
			ReadFrom:       g.ReadFrom, // config.Read* are backend.Read*
			MaxReplicaLag:  g.MaxReplicaLag,
			// A former primary replicates from the new one after a switchover with the binlog follower's account.
			ReplicationUser:     cmp.Or(g.BinlogUser, g.User),
			ReplicationPassword: cmp.Or(g.BinlogPassword, g.Password),
			Logger:              log,
		})
	}
	return out
}

// followedPrimary is told when a group followed a new primary (backend.GroupOptions.OnNewPrimary). The group's
// binlog follower moves to the new primary (binlog.Follower.PrimaryChanged: by GTID from what it applied, so a
// switchover's copies stay valid). After a failover the former primary may have acknowledged commits the new one
// never got: every cached copy goes, and the commits keyway knows were acknowledged (through its doors, or seen by
// its binlog follower) that the new primary lacks are logged, by GTID domain, for an operator to act on.
func (s *Server) followedPrimary(c backend.NewPrimary) {
	if dbs := s.containerDBs.Load(); dbs != nil {
		if db := (*dbs)[c.Group]; db != nil {
			container.DropIdle(db) // containers' next statements dial the new primary
		}
	}
	if fs := s.followerOf.Load(); fs != nil {
		if f := (*fs)[c.Group]; f != nil {
			f.PrimaryChanged()
		}
	}
	if !c.Failover {
		s.log.Info("the group's primary changed (switchover): the cached copies stay valid", "group", c.Group, "new", c.New, "former", c.Old)
		return
	}
	s.validity.InvalidateAll()
	s.log.Warn("failover: every cached copy dropped, since the former primary may have acknowledged commits the new one never got",
		"group", c.Group, "new", c.New, "former", c.Old, "new_position", c.Position.String())
	known := s.validity.Gate(c.Group).Newest()
	for _, g := range known.GTIDs() {
		if have := c.Position.Seq(g.Domain); have < g.Seq {
			s.log.Error("failover: acknowledged commits the new primary does not have (asynchronous replication loses them; with semi-synchronous replication, AFTER_SYNC, this does not happen)",
				"group", c.Group, "domain", g.Domain, "new_primary_has_up_to", have, "acknowledged_up_to", g.Seq)
		}
	}
}

// promote runs keyway failover / keyway switchover on a group (admin's POST /groups/{group}/{op}).
func (s *Server) promote(ctx context.Context, group, op, to string, hold time.Duration) (any, error) {
	g := s.topo.Group(group)
	if g == nil {
		return nil, fmt.Errorf("no group %q", group)
	}
	if !g.HasReplicas() {
		return nil, fmt.Errorf("group %q has no replicas to promote ([[groups]] replicas)", group)
	}
	if op == "failover" {
		return g.Failover(ctx)
	}
	return g.Switchover(ctx, to, hold)
}

// replicas are a group's [[groups]] replicas as backend members.
func replicas(rs []config.Replica) []backend.Replica {
	var out []backend.Replica
	for _, r := range rs {
		out = append(out, backend.Replica{Member: backend.Member{Network: r.Network(), Address: r.Address}, Weight: r.Weight})
	}
	return out
}

// sqlOptions are the SQL door's Options from cfg, on the server's topology.
func (s *Server) sqlOptions() (sqlproxy.Options, error) {
	cfg := s.cfg.SQL
	o := sqlproxy.Options{
		Topology:         s.topo,
		MaxConnections:   cfg.MaxConnections,
		OnClientsGrown:   func(clients int64) { s.heap.set(&s.heap.clients, clients*clientHeap) },
		AllowLocalInfile: cfg.AllowLocalInfile,
		RequireTLS:       cfg.RequireTLS,
		MaxHandshakes:    cfg.MaxHandshakes,
		HandshakeTimeout: cfg.HandshakeTimeout,
		MaxAuthFailures:  cfg.MaxAuthFailures,
		Logger:           s.log,
		// One truth across doors: SQL writes drop the memcache door's cached rows, and SQL statements see, and
		// act after, every memcache write acknowledged before them, even one still queued for the table.
		Validity: s.validity,
		Cache:    s.sqlCache,
		// SHOW KEYWAY CACHE: the same figures as /metrics.
		CacheReport: s.cacheReport,
		CacheRules:  cacheRules(s.cfg.Cache),
		TTLOnly:     ttlOnly(s.cfg),
	}
	if s.shards != nil {
		o.Shards = &s.shards.holder
	}
	if runtime.GOOS == "linux" {
		o.Spin = loopSpin // the memcache door's base: a lone sequential client's next packet, within microseconds
	}
	o.Users = s.sqlUsers(cfg.Users)
	if cfg.TLSCert != "" {
		// The config checked that the pair loads; it is loaded again here, where it is used.
		cert, err := tls.LoadX509KeyPair(cfg.TLSCert, cfg.TLSKey)
		if err != nil {
			return o, fmt.Errorf("sql.tls_cert %q / sql.tls_key %q: %w", cfg.TLSCert, cfg.TLSKey, err)
		}
		o.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	}
	return o, nil
}

// sqlUsers are the SQL door's users from [[sql.users]].
func (s *Server) sqlUsers(users []config.SQLUser) []sqlproxy.User {
	out := make([]sqlproxy.User, 0, len(users))
	for _, u := range users {
		out = append(out, sqlproxy.User{Name: u.Name, Password: u.Password, AuthPlugin: u.AuthPlugin,
			BackendUser: u.BackendUser, BackendPassword: u.BackendPassword, Group: u.Group})
	}
	return out
}

// startSQLAndAdmin opens the SQL door and the admin listener when configured.
func (s *Server) startSQLAndAdmin() error {
	cfg := s.cfg
	metrics := s.metrics
	if s.memcache != nil {
		metrics.SetMemcacheStatsFunc(s.memcache.Stats)
	}
	metrics.SetSamplesFunc(s.adminSamples)
	digestTable := digests.New(digestCapacity)
	if cfg.SQL.Listen != "" {
		opts, err := s.sqlOptions()
		if err != nil {
			return err
		}
		opts.Plans, opts.Digests, opts.Metrics = sqlproxy.NewPlanCache(sqlproxy.DefaultPlanCapacity), digestTable, metrics
		proxy, err := sqlproxy.New(opts)
		if err != nil {
			return err
		}
		// Keepalive as MariaDB sets it, SO_KEEPALIVE with the system's timings: Go's default adds three more
		// setsockopt calls to every accepted connection, a cost clients that connect per request feel.
		lc := net.ListenConfig{KeepAliveConfig: net.KeepAliveConfig{Enable: true, Idle: -1, Interval: -1, Count: -1}}
		ln, err := lc.Listen(context.Background(), "tcp", cfg.SQL.Listen)
		if err != nil {
			return fmt.Errorf("sql.listen %q: %w (is MySQL or another keyway on that port? change [sql] listen or --sql-listen)", cfg.SQL.Listen, err)
		}
		s.sql, s.sqlLn = proxy, ln
		go func() { s.errc <- proxy.Serve(ln) }()
		s.log.Info("SQL door serving", "sql", ln.Addr().String(), "groups", len(cfg.Groups), "users", len(cfg.SQL.Users))
	}
	if cfg.Admin.Listen != "" {
		ln, err := net.Listen("tcp", adminBind(cfg.Admin.Listen))
		if err != nil {
			return fmt.Errorf("admin.listen %q: %w (change [admin] listen or --admin-listen)", cfg.Admin.Listen, err)
		}
		s.admin = admin.New(admin.Options{Listen: cfg.Admin.Listen, Digests: digestTable, Metrics: metrics, Status: s.status,
			Candidates: s.candidates, Ready: s.readiness, Promote: s.promote, Token: cfg.Admin.Token, MetricsPublic: cfg.Admin.MetricsPublic,
			Logger: s.log})
		s.adminLn = ln
		go func() {
			if err := s.admin.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				s.errc <- err
			}
		}()
		s.log.Info("admin serving", "admin", ln.Addr().String())
		warnOpenAdmin(s.log, ln.Addr(), cfg.Admin.Token != "")
	}
	return nil
}

// Sizes of the per-digest tables: enough for an application's statements,
// bounded against generated SQL with literals the lexer cannot fold.
const (
	digestCapacity = 10000
)

// Status is what /status shows: a snapshot from each component. Every name in it is lower_snake_case, and every
// value a number, a string, a boolean or a list of names (never a bit mask); docs/operations.md's "/status" table
// lists them. A section is absent when its component is off.
type Status struct {
	Memcache   MemcacheStatus                    `json:"memcache"`
	Store      StoreStatus                       `json:"store"`
	Groups     []GroupStatus                     `json:"groups,omitempty"`
	SQL        *SQLStatus                        `json:"sql,omitempty"`
	Containers map[string]engine.ContainerStatus `json:"containers,omitempty"`
	Binlog     []binlog.Status                   `json:"binlog,omitempty"`
	SQLCache   *qcache.Stats                     `json:"sql_cache,omitempty"`
	Shards     *ShardsStatus                     `json:"shards,omitempty"`
}

// ShardsStatus is the shard map statements and keys are routed by: its version, where it comes from, and one row
// per shard (then the global group) as SHOW KEYWAY SHARDS lists them.
type ShardsStatus struct {
	Version uint64     `json:"version"`
	Source  string     `json:"source"`
	Columns []string   `json:"columns"`
	Map     [][]string `json:"map"`
}

// MemcacheStatus is the memcache door's listener and its `stats`.
type MemcacheStatus struct {
	Listen string           `json:"listen"`
	Stats  map[string]int64 `json:"stats"`
}

// StoreStatus is the local store's persistence.
type StoreStatus struct {
	DataDir    string `json:"data_dir"`
	Durability string `json:"durability"`
}

// GroupStatus is a backend group as its health check last saw it.
type GroupStatus struct {
	Name      string `json:"name"`
	Primary   string `json:"primary"`
	Up        bool   `json:"up"`                   // the last health check or dial succeeded
	LastError string `json:"last_error,omitempty"` // why it is down
	// The group's cached copies (validity.Gate): how they are kept valid ("binlog", "ttl", "none", or "off": no
	// usable binlog, reads go to MySQL), whether a follower vouches for them now, whether they are served, and
	// why they are not fresh.
	CacheMode    string `json:"cache_mode"`
	CacheFresh   bool   `json:"cache_fresh"`
	CacheServing bool   `json:"cache_serving"`
	CacheReason  string `json:"cache_reason,omitempty"`
}

// SQLStatus is the SQL door's listener and its backend pools.
type SQLStatus struct {
	Listen string       `json:"listen"`
	Pools  []PoolStatus `json:"pools"`
}

// PoolStatus is one pool of backend connections: one per group, backend user and protocol capabilities.
type PoolStatus struct {
	Group   string `json:"group"`
	Address string `json:"address"`
	User    string `json:"user"`
	// Capabilities are the protocol-changing capability flags its connections negotiated (the pool's key), by
	// their MySQL names, and MariaDB's extended ones by MariaDB's.
	Capabilities []string `json:"capabilities"`
	Collation    int      `json:"collation_id"` // the character set and collation its clients asked for (the pool's key too)
	Open         int      `json:"open"`         // connections, idle or in use
	Idle         int      `json:"idle"`         // waiting in the pool
	InUse        int      `json:"in_use"`       // held by sessions
	Waits        int64    `json:"waits"`        // checkouts that waited for a connection
	Errors       int64    `json:"errors"`       // failed dials and broken connections
}

// capabilityNames name the flags of mysqlwire.ProtocolCaps and mysqlwire.ExtProtocolCaps (ext), the ones a pool's
// key holds.
var capabilityNames = []struct {
	flag uint32
	ext  bool
	name string
}{
	{mysqlwire.ClientFoundRows, false, "CLIENT_FOUND_ROWS"},
	{mysqlwire.ClientLocalFiles, false, "CLIENT_LOCAL_FILES"},
	{mysqlwire.ClientIgnoreSpace, false, "CLIENT_IGNORE_SPACE"},
	{mysqlwire.ClientInteractive, false, "CLIENT_INTERACTIVE"},
	{mysqlwire.ClientMultiStatements, false, "CLIENT_MULTI_STATEMENTS"},
	{mysqlwire.ClientMultiResults, false, "CLIENT_MULTI_RESULTS"},
	{mysqlwire.ClientPSMultiResults, false, "CLIENT_PS_MULTI_RESULTS"},
	{mysqlwire.ClientSessionTrack, false, "CLIENT_SESSION_TRACK"},
	{mysqlwire.ClientDeprecateEOF, false, "CLIENT_DEPRECATE_EOF"},
	{mysqlwire.MariaCacheMetadata, true, "MARIADB_CLIENT_CACHE_METADATA"},
}

// poolStatus is p as /status shows it.
func poolStatus(p backend.PoolStats) PoolStatus {
	caps := []string{}
	for _, c := range capabilityNames {
		set := p.Caps
		if c.ext {
			set = p.ExtCaps
		}
		if set&c.flag != 0 {
			caps = append(caps, c.name)
		}
	}
	return PoolStatus{Group: p.Group, Address: p.Address, User: p.User, Capabilities: caps, Collation: int(p.Collation), Open: p.Open, Idle: p.Idle,
		InUse: p.InUse, Waits: p.Waits, Errors: p.Errors}
}

// status is what /status shows.
func (s *Server) status() any {
	st := Status{
		Store: StoreStatus{DataDir: s.cfg.Store.DataDir, Durability: s.cfg.Store.Durability},
	}
	if s.memcache != nil { // else the door is off: listen "" and no stats
		st.Memcache = MemcacheStatus{Listen: s.mcLn.Addr().String(), Stats: s.memcache.Stats()}
	}
	for _, g := range s.topo.Groups() {
		up, err := g.Healthy()
		gs := GroupStatus{Name: g.Name(), Primary: g.Addr(), Up: up}
		gate := s.validity.Gate(g.Name()).Status()
		gs.CacheMode, gs.CacheFresh, gs.CacheServing, gs.CacheReason = gate.Mode, gate.Fresh, gate.Serving, gate.Reason
		if !up && err != nil {
			gs.LastError = err.Error()
		}
		st.Groups = append(st.Groups, gs)
	}
	if s.sql != nil {
		st.SQL = &SQLStatus{Listen: s.sqlLn.Addr().String(), Pools: []PoolStatus{}}
		for _, p := range s.topo.Stats() {
			st.SQL.Pools = append(st.SQL.Pools, poolStatus(p))
		}
	}
	if len(s.containers.tables) > 0 {
		st.Containers = make(map[string]engine.ContainerStatus, len(s.containers.tables))
		for _, t := range s.containers.tables {
			st.Containers[t.Name] = t.Status()
		}
	}
	for _, f := range s.followers {
		st.Binlog = append(st.Binlog, f.Status())
	}
	if s.sqlCache != nil {
		cs := s.sqlCache.Stats()
		st.SQLCache = &cs
	}
	if s.shards != nil {
		m := s.shards.holder.Load()
		st.Shards = &ShardsStatus{Version: m.Version, Source: cmp.Or(s.cfg.Sharding.Source, config.ShardSourceConfig),
			Columns: shard.DescribeColumns, Map: m.Describe()}
	}
	return st
}

// candidates is what /candidates shows: SHOW KEYWAY CANDIDATES's list, or nil without the SQL door.
func (s *Server) candidates() any {
	if s.sql == nil {
		return []sqlproxy.Candidate{}
	}
	return s.sql.Candidates()
}

// SQLAddr is where the SQL door listens, or nil when it is off.
func (s *Server) SQLAddr() net.Addr {
	if s.sqlLn == nil {
		return nil
	}
	return s.sqlLn.Addr()
}

// MemcacheAddr is where the memcache door listens, or nil when it is off.
func (s *Server) MemcacheAddr() net.Addr {
	if s.mcLn == nil {
		return nil
	}
	return s.mcLn.Addr()
}

// Err reports a listener that failed while serving.
func (s *Server) Err() <-chan error { return s.errc }

// Stop closes the doors, waits for clients up to ctx, then closes the containers, the backends and the store,
// writing what is pending. Its last act is the log's last line: "stopped" and what was flushed (the write-behind
// rows written to their tables while stopping, those left in the journal, the items kept in data_dir), or
// "stopped with errors" and the errors.
func (s *Server) Stop(ctx context.Context) error {
	began := time.Now()
	var errs []error
	var writtenBefore, writtenAfter uint64
	left := 0
	behind := 0
	for _, t := range s.containerTables() {
		if t.Behind != nil {
			behind++
			writtenBefore += t.Behind.Stats().Written
		}
	}
	if s.memcache != nil {
		errs = append(errs, s.memcache.Shutdown(ctx))
	}
	if s.sql != nil {
		errs = append(errs, s.sql.Shutdown(ctx))
	}
	if s.admin != nil {
		errs = append(errs, s.admin.Shutdown(ctx))
	}
	s.saveWarm()
	items := s.store.Stats().CurrItems
	errs = append(errs, s.close())
	for _, t := range s.containerTables() {
		if t.Behind != nil {
			st := t.Behind.Stats()
			writtenAfter += st.Written
			left += st.Pending
		}
	}
	attrs := []any{"took", time.Since(began).Round(time.Millisecond).String()}
	if behind > 0 {
		attrs = append(attrs, "write_behind_rows_written", writtenAfter-writtenBefore, "write_behind_rows_left_in_journal", left)
	}
	if s.store.Persistent() {
		attrs = append(attrs, "store_items_kept", items, "data_dir", s.cfg.Store.DataDir, "durability", s.cfg.Store.Durability)
	} else {
		attrs = append(attrs, "store_items_dropped", items, "data_dir", "")
	}
	err := errors.Join(errs...)
	if err != nil {
		s.log.Error("stopped with errors", append(attrs, "err", err)...)
	} else {
		s.log.Info("stopped", attrs...)
	}
	return err
}

// containerTables are the containers served (none before they opened).
func (s *Server) containerTables() []*engine.Table {
	if s.containers == nil {
		return nil
	}
	return s.containers.tables
}

// close closes what Start opened behind the doors, in order; it serves Stop and a failed Start.
func (s *Server) close() error {
	var errs []error
	for _, ln := range []net.Listener{s.mcLn, s.sqlLn, s.adminLn} {
		if ln != nil {
			ln.Close() // already closed by a door's Shutdown after a successful Start
		}
	}
	closeFollowers(s.followers)
	s.closeShards()
	if s.containers != nil {
		errs = append(errs, s.containers.close())
	}
	if s.topo != nil {
		s.topo.Close()
	}
	errs = append(errs, s.store.Close())
	if s.sqlCache != nil {
		errs = append(errs, s.sqlCache.Close())
	}
	return errors.Join(errs...)
}

// durabilities maps the config's durability names to the store's.
var durabilities = map[string]store.Durability{
	config.DurabilityNone:  store.DurabilityNone,
	config.DurabilityAsync: store.DurabilityAsync,
	config.DurabilitySync:  store.DurabilitySync,
}

// heapRoom is the bound Go's heap is given (see setMemoryLimit): an allowance, heapAllowance or diskHeapAllowance,
// for what lives there (the memcache door's connections, the disk's work and garbage between cycles; no items,
// since the store's and the SQL result cache's are in arenas, off the heap), and two parts that grow with use and
// never shrink:
//   - the validity slots that containers' copies widen (validity.Registry.OnSlotsGrown): up to an eighth of the
//     items' limit per table, they are not items' overhead, and a limit that left them out kept a full cache
//     collecting back to back (see docs/benchmarks.md);
//   - the SQL door's clients, clientHeap each, for the most it has held at once (sqlproxy.Options.OnClientsGrown).
type heapRoom struct {
	mu                        sync.Mutex
	allowance, slots, clients int64
}

// set makes *part v and gives the runtime the new sum, one change at a time.
func (h *heapRoom) set(part *int64, v int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	*part = v
	debug.SetMemoryLimit(h.allowance + h.slots + h.clients)
}

const (
	// clientHeap is the heap's room for an SQL door client while it is connected: its connection's two 16 KiB
	// buffers (mysqlwire), its goroutine's stack and its session. Without it, 2,000 clients (bench sql's
	// many_clients, one select a second each) kept more live than the allowance and the heap collected back to
	// back: keyway spent 334 µs of CPU a select with the result cache off (p99 7.6 ms) and, once the cache's
	// entries left the heap and its room with them, 811 µs with it on; with room for the clients, 130 µs either
	// way (p99 1.0-1.5 ms; docs/benchmarks.md).
	clientHeap = 48 << 10
	// heapAllowance is the heap's room beside the items when the store has no disk.
	heapAllowance = 48 << 20
	// diskHeapAllowance is the heap's room beside the items when the store has a disk; the store's changes on
	// their way to it (store.HeapMemory) come on top, and Pebble's memory (its cache and memtables) is outside the
	// heap, beside it. Every change passes through the heap on its way to Pebble, and under a write load the heap grows
	// with that garbage to whatever bound it has (GOGC=400, see setMemoryLimit): its bound is what the process
	// holds. What is live then is some 8-11 MiB (the pending changes, Pebble's batch, WAL blocks and index block),
	// so 16 MiB and the pending 4.25 keep the heap at about 13 MiB, where 24 let it sit at 20: 7 MiB less RSS for
	// about four times the collections during a load (26-29 against 6 for the mix), with loads and memcaslap on
	// par (docs/benchmarks.md).
	diskHeapAllowance = 16 << 20
)

// setMemoryLimit tells the Go runtime to collect before the heap outgrows limit (an allowance; see above) by much. Without it
// the default GOGC lets the heap reach twice the live items.
//
// Under that bound the heap may grow gcPercent% over what is live before a
// collection (GOGC=gcPercent), unless GOGC is set: the limit, not GOGC, is what
// bounds memory, and collecting at every doubling of a small live heap costs
// CPU for nothing (see docs/benchmarks.md).
func setMemoryLimit(limit int64) {
	debug.SetMemoryLimit(limit)
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(gcPercent)
	}
}

// gcPercent is keyway's GOGC (see setMemoryLimit).
const gcPercent = 400

// loopThreads gives the memcache door's event loops threads of their own (memcache.Options.LoopThreads): as many
// loops as GOMAXPROCS was, and one P more while any loop keeps its thread (procs), so that while every loop waits in
// its system call the runtime still has an idle P and leaves the loops' Ps alone. Only where the SQL door is off:
// its goroutines would then run on more Ps than there are CPUs, which costs the SQL door throughput, for a gain
// the memcache door shows alone (sequential clients' sets; figures in docs/benchmarks.md). The runtime's setting
// is the process's, so its base is read once however many servers a process starts; set by hand, it no longer
// follows a container's CPU limit as it changes (Go 1.25's default).
func loopThreads() (loops int, onLoopThread func(keeps bool)) {
	procs.once.Do(func() { procs.base, procs.set = runtime.GOMAXPROCS(0), setProcs })
	return procs.base, procs.loopThread
}

// loopSpin is memcache.Options.LoopSpin for loops with threads of their own: the spin's length at first. 20 µs
// served a sequential client's sets better than a longer spin, which took CPU time from the client on 2 vCPUs (see
// docs/benchmarks.md); the loop lengthens it while its client's requests come just after (see memcache's
// readyWait.spinWait).
const loopSpin = 20 * time.Microsecond

// procs is the process's GOMAXPROCS while memcache event loops keep threads of their own.
var procs procsGovernor

func setProcs(n int) { runtime.GOMAXPROCS(n) }

// procsGovernor raises GOMAXPROCS to base+1 as soon as an event loop keeps a thread, and lowers it back to base once
// none has for lowerProcsAfter. A loop keeps none while it has no connection: every client's commands may wait on
// MySQL (sync containers), so each has left its loop for a goroutine, or there is no client. The P more then only
// runs those goroutines on more Ps than there are CPUs, which costs them CPU time per command (see
// docs/benchmarks.md). The delay keeps a client that connects for each request (PHP without persistent
// connections) from changing it, which stops the world, twice a request.
type procsGovernor struct {
	once    sync.Once
	mu      sync.Mutex
	base    int    // GOMAXPROCS when loops were first asked for
	keeping int    // loops that keep a thread now
	raised  bool   // GOMAXPROCS is base+1
	idle    uint64 // counts the times keeping fell to 0: a lowering timer acts only if it is still the last
	set     func(procs int)
}

const lowerProcsAfter = 250 * time.Millisecond

// loopThread is memcache.Options.OnLoopThread.
func (g *procsGovernor) loopThread(keeps bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if keeps {
		g.keeping++
		if !g.raised {
			g.raised = true
			g.set(g.base + 1)
		}
		return
	}
	g.keeping--
	if g.keeping > 0 || !g.raised {
		return
	}
	g.idle++
	idle := g.idle
	time.AfterFunc(lowerProcsAfter, func() {
		g.mu.Lock()
		defer g.mu.Unlock()
		if g.keeping == 0 && g.raised && g.idle == idle {
			g.raised = false
			g.set(g.base)
		}
	})
}
