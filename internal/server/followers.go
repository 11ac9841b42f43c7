package server

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/keywaydb/keyway/internal/backend"
	"github.com/keywaydb/keyway/internal/binlog"
	"github.com/keywaydb/keyway/internal/config"
	"github.com/keywaydb/keyway/internal/qcache"
	"github.com/keywaydb/keyway/internal/sqlproxy"
	"github.com/keywaydb/keyway/internal/stats"
	"github.com/keywaydb/keyway/internal/validity"
)

// startFollowers starts a binlog follower for each group whose invalidate mode asks for one (see
// config.Group.Invalidate) and sets every group's freshness gate (validity.Gate): "binlog" must get a follower or
// startup fails; the default gets one when the server's binlog is usable, and otherwise its caching containers
// read MySQL every time (the gate stays shut) and the start-up line says why and how to turn the cache on; "ttl"
// and "none" get none, said at startup.
func startFollowers(cfg config.Config, topo *backend.Topology, reg *validity.Registry, resume func(group string) *binlog.Checkpoint, log *slog.Logger) ([]*binlog.Follower, error) {
	var out []*binlog.Follower
	serverID := cfg.Cache.BinlogServerID
	if serverID == 0 {
		serverID = derivedServerID(cfg)
	}
	ttls := ttlOnly(cfg)
	for _, g := range cfg.Groups {
		gate := reg.Gate(g.Name)
		switch g.Invalidate {
		case config.InvalidateTTL:
			gate.SetMode(validity.TTLBounded, fmt.Sprintf("invalidate = \"ttl\": copies live up to %s; a direct write in MySQL is seen when its copy expires", ttls[g.Name]))
			log.Warn("TTL-only caching: cached copies of this group's tables do not learn of writes made directly in MySQL; each lives up to its ttl (invalidate = \"ttl\")",
				"group", g.Name, "ttl", ttls[g.Name].String())
			continue
		case config.InvalidateNone:
			gate.SetMode(validity.OwnWritesOnly, "invalidate = \"none\": only keyway's own writes refresh cached copies; a direct write in MySQL is never seen")
			log.Warn("no binlog invalidation: cached copies of this group's tables do not learn of writes made directly in MySQL, ever (invalidate = \"none\")", "group", g.Name)
			continue
		}
		grp := topo.Group(g.Name)
		user, password, dial, tc := grp.ReplicaLogin()
		if g.BinlogUser != "" {
			user, password = g.BinlogUser, g.BinlogPassword
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		f, err := binlog.Start(ctx, binlog.Options{
			Group: g.Name, User: user, Password: password, Dial: dial, TLS: tc,
			ServerID:     serverID,
			MaxStaleness: cfg.Cache.MaxStaleness,
			Registry:     reg,
			Logger:       log,
			Resume:       resume(g.Name),
		})
		cancel()
		if err != nil {
			if g.Invalidate == config.InvalidateBinlog {
				closeFollowers(out)
				return nil, fmt.Errorf("groups %q: invalidate = \"binlog\": %w", g.Name, err)
			}
			var unusable *binlog.UnusableError
			if !errors.As(err, &unusable) {
				// The server did not answer the follower (down, unreachable, refusing the account): its binlog may
				// be fine. The follower is not started again while keyway runs, so the gate stays shut.
				gate.SetMode(validity.Unfollowed, "the binlog follower could not start ("+err.Error()+"): caching containers read MySQL every time until keyway is restarted with the primary reachable")
				log.Warn("the binlog follower could not start: this group's caching containers read MySQL every time (as db_only) and the SQL result cache is off for its users, so that nothing stale is served, until keyway is restarted with the primary reachable",
					"group", g.Name, "reason", err)
				continue
			}
			gate.SetMode(validity.Unfollowed, "no usable binlog ("+err.Error()+"): caching containers read MySQL every time; "+turnCacheOn)
			log.Warn("no usable binlog: this group's caching containers read MySQL every time (as db_only) and the SQL result cache is off for its users, so that nothing stale is served; "+turnCacheOn,
				"group", g.Name, "reason", err)
			continue
		}
		out = append(out, f)
	}
	if len(out) > 0 {
		// Copies that rely on invalidation are kept only of tables whose writes a follower sees (views are not).
		reg.SetKindLookup(func(id validity.TableID) (bool, error) {
			for _, f := range out {
				if trusted, found, err := f.TableKind(id); err != nil || found {
					return trusted, err
				}
			}
			return false, nil
		})
	}
	return out, nil
}

// turnCacheOn is the fix a group without a usable binlog is told: the ways to let keyway serve its copies.
const turnCacheOn = "to cache, turn the binlog on (log_bin, binlog_format = ROW, and REPLICATION SLAVE, REPLICATION CLIENT granted to the group's user) or set invalidate = \"ttl\" on the group (copies live up to cache.default_ttl)"

// derivedServerID is a replica server_id for this keyway: a hash of the host name, the listeners and the process
// id, in the upper half of the range (servers are usually numbered from 1), so that two keyways, on one host or
// two, do not collide (a primary drops the older of two replicas with one id). The process id is in it because
// listeners may be given as port 0.
func derivedServerID(cfg config.Config) uint32 {
	h := fnv.New32a()
	host, _ := os.Hostname()
	fmt.Fprintf(h, "%s|%s|%s|%s|%s|%d", host, cfg.Memcache.Listen, cfg.SQL.Listen, cfg.Admin.Listen, cfg.Store.DataDir, os.Getpid())
	return 1<<31 | h.Sum32()&(1<<31-1)
}

func closeFollowers(fs []*binlog.Follower) {
	for _, f := range fs {
		f.Close()
	}
}

// newSQLCache is the SQL door's result cache, or nil: it needs the SQL door, [cache] enabled (the default), and a
// group whose replies keyway can vouch for (a binlog follower, or invalidate = "ttl"). A session of another
// group's user is never answered from it (validity.Gate.Vouches), so nothing that no follower watches is served.
func newSQLCache(cfg config.Config, followers []*binlog.Follower, reg *validity.Registry, log *slog.Logger) *qcache.Cache {
	switch {
	case cfg.SQL.Listen == "" || len(cfg.Groups) == 0:
		return nil
	case cfg.Cache.Disabled:
		log.Info("SQL result cache off ([cache] enabled = false)")
		return nil
	case len(followers)+len(ttlOnly(cfg)) == 0:
		log.Warn("SQL result cache off: no group has a binlog follower or invalidate = \"ttl\", so keyway could not vouch for cached results (see the warnings above)")
		return nil
	}
	for _, g := range reg.Gates() {
		if m := g.Mode(); m != validity.Followed && m != validity.TTLBounded {
			log.Warn("SQL result cache off for this group's users: keyway cannot vouch for its results (see the warnings above)", "group", g.Group(), "mode", m.String())
		}
	}
	for g, ttl := range ttlOnly(cfg) {
		log.Warn("TTL-only SQL caching: replies read from this group's tables are served for up to their ttl even after a direct write in MySQL (invalidate = \"ttl\")",
			"group", g, "ttl", ttl.String())
	}
	log.Info("SQL result cache on: point selects are answered from the cache while their group's binlog follower is within max_staleness",
		"memory_limit", cfg.Cache.MemoryLimit, "max_staleness", cfg.Cache.MaxStaleness.String())
	return qcache.New(qcache.Options{MemoryLimit: cfg.Cache.MemoryLimit, Registry: reg})
}

// ttlOnly maps the groups with invalidate = "ttl" to the life of a cached reply that names none: cache.default_ttl,
// else max_staleness, so a reply is never older than keyway promises for a followed group.
func ttlOnly(cfg config.Config) map[string]time.Duration {
	var out map[string]time.Duration
	for _, g := range cfg.Groups {
		if g.Invalidate != config.InvalidateTTL {
			continue
		}
		if out == nil {
			out = map[string]time.Duration{}
		}
		out[g.Name] = cfg.Cache.DefaultTTL
		if out[g.Name] == 0 {
			out[g.Name] = cfg.Cache.MaxStaleness
		}
	}
	return out
}

// cacheSamples are the result cache's, the followers' and the caching containers' freshness figures for
// /metrics.
func (s *Server) cacheSamples() []stats.Sample {
	var out []stats.Sample
	add := func(name, help, group string, v float64) {
		out = append(out, stats.Sample{Name: name, Help: help, Group: group, Value: v})
	}
	boolean := func(b bool) float64 {
		if b {
			return 1
		}
		return 0
	}
	if c := s.sqlCache; c != nil {
		st := c.Stats()
		add("keyway_sql_cache_hits_total", "SQL statements answered from the result cache.", "", float64(st.Hits))
		add("keyway_sql_cache_misses_total", "Cacheable SQL statements the result cache could not answer.", "", float64(st.Misses))
		add("keyway_sql_cache_stores_total", "Replies stored in the result cache.", "", float64(st.Stores))
		add("keyway_sql_cache_dropped_total", "Fills that raced a write, and entries found invalid.", "", float64(st.Dropped))
		add("keyway_sql_cache_evictions_total", "Entries evicted for memory.", "", float64(st.Evictions))
		add("keyway_sql_cache_joined_total", "Misses that waited for another session's fill of the same statement.", "", float64(st.Joined))
		add("keyway_sql_cache_refreshes_total", "Entries with a ttl renewed softly, by one query while the old reply was still served.", "", float64(st.Refreshes))
		for _, reason := range qcache.BypassReasons {
			out = append(out, stats.Sample{Name: "keyway_sql_cache_bypasses_total", Labels: [][2]string{{"reason", reason}},
				Help:  "Statements the result cache would answer that went to MySQL uncached: not_fresh (followers behind max_staleness), pinned (transaction or session state), untrusted_table (a view).",
				Value: float64(st.Bypasses[reason])})
		}
		add("keyway_sql_cache_entries", "Entries in the result cache.", "", float64(st.Entries))
		add("keyway_sql_cache_bytes", "Bytes charged to the result cache.", "", float64(st.Bytes))
	}
	add("keyway_cache_bypasses_total", "Reads of caching containers sent to MySQL because no follower vouched for the cached rows.", "",
		float64(s.engine.Counters().CacheBypasses.Load()))
	add("keyway_cache_own_write_invalidations_total", "Invalidations by keyway's own writes (container rows, tables the SQL door wrote).", "",
		float64(s.validity.OwnWrites()))
	for _, g := range s.validity.Gates() {
		st := g.Status()
		out = append(out, stats.Sample{Name: "keyway_cache_fresh", Group: st.Group, Labels: [][2]string{{"mode", st.Mode}},
			Help:  "1 while the group's binlog follower vouches for its cached copies (within max_staleness); mode says how they are kept valid: binlog, ttl, none, or off (no usable binlog: reads go to MySQL).",
			Value: boolean(st.Fresh)})
	}
	for _, f := range s.followers {
		st := f.Status()
		g := st.Group
		add("keyway_binlog_following", "1 while the binlog follower is connected and reading.", g, boolean(st.State == binlog.Following))
		add("keyway_binlog_lag_seconds", "Time since the last instant up to which every commit is applied.", g, float64(st.LagMS)/1000)
		add("keyway_binlog_events_total", "Binlog events read.", g, float64(st.Events))
		add("keyway_binlog_commits_total", "Transactions applied.", g, float64(st.Commits))
		add("keyway_binlog_key_invalidations_total", "(table, key) invalidations from the binlog.", g, float64(st.Keys))
		add("keyway_binlog_table_invalidations_total", "Whole-table invalidations from the binlog (DDL, keys not logged).", g, float64(st.Tables))
		add("keyway_binlog_ddl_total", "DDL statements from the binlog (each drops the copies of the tables it names).", g, float64(st.DDL))
		add("keyway_binlog_gaps_total", "Binlog positions lost: every cached copy dropped.", g, float64(st.Gaps))
		add("keyway_binlog_reconnects_total", "Reconnections of the binlog follower.", g, float64(st.Reconn))
	}
	return out
}

// cacheReport is SHOW KEYWAY CACHE's rows: the /metrics samples of cacheSamples, named without the "keyway_"
// prefix and with the group and other labels appended, then each group's cache_state in words.
func (s *Server) cacheReport() [][2]string {
	var rows [][2]string
	for _, smp := range s.cacheSamples() {
		name := strings.TrimPrefix(smp.Name, "keyway_")
		var labels []string
		if smp.Group != "" {
			labels = append(labels, "group="+smp.Group)
		}
		for _, l := range smp.Labels {
			labels = append(labels, l[0]+"="+l[1])
		}
		if len(labels) > 0 {
			name += "{" + strings.Join(labels, ",") + "}"
		}
		rows = append(rows, [2]string{name, strconv.FormatFloat(smp.Value, 'f', -1, 64)})
	}
	for _, g := range s.validity.Gates() {
		rows = append(rows, [2]string{"cache_state{group=" + g.Group() + "}", gateState(g.Status())})
	}
	return rows
}

// gateState is a group's freshness in words: "fresh", or "not fresh" and the reason (SHOW KEYWAY CACHE).
func gateState(st validity.GateStatus) string {
	if st.Fresh {
		return "fresh"
	}
	return "not fresh: " + st.Reason
}

// cacheRules are the SQL door's rules from [[cache.rules]] (validated by config), with default_ttl applied.
func cacheRules(c config.Cache) []sqlproxy.CacheRule {
	var out []sqlproxy.CacheRule
	for _, r := range c.Rules {
		rule := sqlproxy.CacheRule{Digest: r.Digest, TTL: r.TTL}
		if rule.TTL == 0 {
			rule.TTL = c.DefaultTTL
		}
		if r.Table != "" {
			rule.Table = validity.ParseTableID("", r.Table)
		}
		if r.Regex != "" {
			rule.Regex = regexp.MustCompile(r.Regex) // config checked that it compiles
		}
		out = append(out, rule)
	}
	return out
}
