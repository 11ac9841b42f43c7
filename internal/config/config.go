// Package config turns keyway's TOML file and the flags of `keyway serve` into one validated Config.
//
// Invariants:
//   - A Config that came out of Parse, LoadFile or ParseServeArgs has every default filled in and has passed
//     Validate; the rest of keyway never re-checks it.
//   - A zero field means "use the default" (EnsureDefaults fills it). A value the user wrote is never replaced by
//     a default: Parse and ParseServeArgs start from the defaults and apply the file and flags on top, so an
//     explicit 0 in the file or on the command line reaches Validate and is rejected there. One explicit zero is
//     allowed: memcache.listen = "" turns the memcache door off (as sql.listen = "" leaves the SQL door off).
//   - Unknown keys are errors, never ignored: a misspelt key would otherwise silently leave a default in force.
//   - Every error names the key (and the serve flag that sets it, if any) and says what is allowed. Validate and
//     the file decoder report every problem at once, joined with errors.Join, one problem per line.
//   - An entry of an array of tables ([[groups]], [[sql.users]], [[containers]]) has no place in the defaults the
//     file is applied on, so the file decoder fills each entry's defaults first and applies the entry's keys on top.
//     Defaults that depend on other keys (a user's backend_user, backend_password and group, a container's group,
//     a group's max_replica_lag) apply only where the key is absent.
//   - A default that a component also applies to a zero Options field is that component's exported Default*
//     constant (backend, binlog, engine, memcache, qcache, sqlproxy, store, writebehind), so each default lives in
//     one place.
//     config imports those packages for their constants only; none of them imports config. (shard is the
//     exception: the ranges of [[shard_maps]] are checked by shard's own rules, so the config and a map loaded from
//     keyway_shards are held to the same ones.)
//   - Containers are checked here for form only (names, identifiers, policies, group references); whether their
//     table and columns exist is checked at startup against the real table.
//
// Adding a section is: a field in Config, its mirror in fileConfig (file.go), and its ensureDefaults and validate
// methods called from EnsureDefaults and Validate.
package config

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/keywaydb/keyway/internal/backend"
	"github.com/keywaydb/keyway/internal/binlog"
	"github.com/keywaydb/keyway/internal/engine"
	"github.com/keywaydb/keyway/internal/memcache"
	"github.com/keywaydb/keyway/internal/qcache"
	"github.com/keywaydb/keyway/internal/shard"
	"github.com/keywaydb/keyway/internal/sqlproxy"
	"github.com/keywaydb/keyway/internal/store"
	"github.com/keywaydb/keyway/internal/writebehind"
)

// Config is keyway's whole configuration.
type Config struct {
	Memcache   Memcache    // [memcache]
	Store      Store       // [store]
	SQL        SQL         // [sql] and [[sql.users]]; the SQL door is off when SQL.Listen is ""
	Groups     []Group     // [[groups]]: backends
	Admin      Admin       // [admin]
	Containers []Container // [[containers]]: memcache keys mapped to table rows
	Migrate    Migrate     // [migrate]
	Cache      Cache       // [cache]
	Sharding   Sharding    // [sharding]
	ShardMaps  []ShardMap  // [[shard_maps]]: the shard map, when sharding.source = "config"
}

// Sharding says where the shard map comes from and which group holds the unsharded tables. Sharding is in use when
// [[shard_maps]] are configured or source is "table"; otherwise every table is on its user's group, as before.
type Sharding struct {
	// "global": the group of the unsharded (global) tables, and of the keyway_shards schema (default: the first
	// group, when sharding is in use).
	Global string
	// "source": ShardSourceConfig (the default: [[shard_maps]], reloaded on SIGHUP) or ShardSourceTable (the tables
	// of Schema on the global group, reloaded when the binlog shows them change).
	Source string
	// "schema": the schema of the shard map's tables with source = "table" (default "keyway_shards").
	Schema string
}

// The values of Sharding.Source.
const (
	ShardSourceConfig = "config"
	ShardSourceTable  = "table"
)

// ShardingInUse reports whether sharding is configured: [[shard_maps]] entries, or source = "table".
func (c *Config) ShardingInUse() bool {
	return len(c.ShardMaps) > 0 || c.Sharding.Source == ShardSourceTable
}

// ShardMap is one [[shard_maps]] entry: a mapping of shard key values to shards, and the tables sharded by it.
type ShardMap struct {
	Name   string       // "name"
	Kind   string       // "kind": "hash", "xxhash", "range_int" or "range_string"
	Tables []ShardTable // "tables": [{ table = "app.users", column = "id", scatter = false }]
	Shards []ShardRange // [[shard_maps.shards]]
}

// ShardTable is a table sharded by a mapping.
type ShardTable struct {
	Table   string // "table": "schema.table", or "table" for the table of that name in any schema
	Column  string // "column": the shard key column
	Scatter bool   // "scatter": a statement without one shard may run on every shard (default false)
}

// ShardRange is one [[shard_maps.shards]] entry.
type ShardRange struct {
	// "name": for hash and xxhash the shard's keyspace range as Vitess names shards ("-80", "80-", "-"); else any
	// name unique in the mapping.
	Name  string
	Group string // "group": the [[groups]] entry holding the shard
	// "from", "to": a range kind's bounds, from inclusive, to exclusive; "" (no key) is an open end. range_int takes
	// integers, range_string strings.
	From, To string
}

// ShardConfig is the shard map of [sharding] and [[shard_maps]] in shard's form, for shard.FromConfig, with the
// configured groups as the ones that exist.
func (c *Config) ShardConfig() shard.Config {
	sc := shard.Config{Global: c.Sharding.Global}
	for _, g := range c.Groups {
		sc.Groups = append(sc.Groups, g.Name)
	}
	for _, m := range c.ShardMaps {
		mc := shard.MappingConfig{Name: m.Name, Kind: m.Kind}
		for _, t := range m.Tables {
			mc.Tables = append(mc.Tables, shard.TableConfig{Table: t.Table, Column: t.Column, Scatter: t.Scatter})
		}
		for _, r := range m.Shards {
			mc.Shards = append(mc.Shards, shard.ShardConfig{Name: r.Name, Group: r.Group, From: r.From, To: r.To})
		}
		sc.Mappings = append(sc.Mappings, mc)
	}
	return sc
}

// Cache configures how keyway keeps cached copies (container rows) fresh.
type Cache struct {
	// "max_staleness": a copy is served only while the binlog followers have applied every commit made up to
	// this long ago (default 1s).
	MaxStaleness time.Duration
	// "binlog_server_id": the binlog followers' replica server_id (default 0: derived from the host name and the
	// listeners, so that two keyways never collide).
	BinlogServerID uint32
	// "enabled = false" turns the SQL door's result cache off (Disabled); it is on by default wherever a binlog
	// follower vouches for freshness.
	Disabled bool
	// "memory_limit": the SQL result cache's memory, in bytes (default 64 MiB).
	MemoryLimit int64
	// "default_ttl": the life of entries a rule caches when the rule gives no ttl (default 0: until invalidated).
	DefaultTTL time.Duration
	Rules      []CacheRule // [[cache.rules]]
}

// CacheRule makes the SQL door cache reads that are not point selects (a cacheable read: see the README). Exactly
// one of Digest, Table and Regex is set.
type CacheRule struct {
	Digest string        // "digest": the statement digest (as /digests and SHOW KEYWAY CANDIDATES list it)
	Table  string        // "table": any read of this table ("schema.table" or "table")
	Regex  string        // "regex": matched against the normalized statement
	TTL    time.Duration // "ttl": the entries' life; 0 = cache.default_ttl
}

// The values of Group.Invalidate.
const (
	InvalidateAuto   = ""       // binlog when the server has a usable one, else none (said at startup)
	InvalidateBinlog = "binlog" // follow the binlog; refuse to start without a usable one
	InvalidateTTL    = "ttl"    // no follower: copies live until their TTL or a write through keyway
	InvalidateNone   = "none"   // no follower
)

// Container maps memcache keys to rows of one table (the InnoDB memcached
// plugin's containers model). Keys address it as "@@name.key"; keys without a
// prefix use the container named "default" when there is one.
type Container struct {
	Name      string   // "name"
	Group     string   // "group": the backend group holding the table (default: the first group)
	Table     string   // "table": "schema.table"
	Key       string   // "key": the key column (primary key or unique index on it alone)
	Values    []string // "values": one or more value columns, joined by Separator in memcache values
	Separator string   // "separator": default "|"
	Flags     string   // "flags": optional column for client flags
	CAS       string   // "cas": optional column for cas ids
	Expiry    string   // "expiry": optional column for expiry (Unix seconds)
	// Policies per operation class: "cache_only", "db_only", "caching" or "disabled".
	Get    string // "get": default "caching"
	Set    string // "set": default "caching"
	Delete string // "delete": default "caching"
	Flush  string // "flush": default "cache_only" (flush_all never truncates a table unless this is "db_only")
	Write  string // "write": "sync" (default: acknowledged after COMMIT) or "async"
	// With write = "async": sets wait at most WriteWindow before they are sent
	// to the table, and when WriteMaxPending rows wait, writers wait for room.
	WriteWindow     time.Duration // "write_window": default 100ms
	WriteMaxPending int           // "write_max_pending": default 16384
}

// Migrate imports configuration from an existing installation.
type Migrate struct {
	InnodbMemcache string // "innodb_memcache": the group whose innodb_memcache schema defines containers
}

// Container policies.
const (
	PolicyCacheOnly = "cache_only"
	PolicyDBOnly    = "db_only"
	PolicyCaching   = "caching"
	PolicyDisabled  = "disabled"
)

// The values of Container.Write.
const (
	WriteSync  = "sync"  // acknowledged after COMMIT
	WriteAsync = "async" // acknowledged from the local store, written behind
)

// DefaultContainer is the name of the container that serves keys without an "@@name." prefix.
const DefaultContainer = "default"

// SQL configures the SQL door (a MySQL-protocol proxy).
type SQL struct {
	Listen           string // "listen": host:port; "" = the SQL door is off
	MaxConnections   int    // "max_connections": concurrent client connections (default 1024)
	TLSCert          string // "tls_cert": PEM file; with tls_key, TLS is offered to clients
	TLSKey           string // "tls_key": PEM file
	AllowLocalInfile bool   // "allow_local_infile": relay LOAD DATA LOCAL INFILE to clients that opted in (default true; false: refused)
	RequireTLS       bool   // "require_tls": refuse clients that do not switch to TLS (needs tls_cert and tls_key)
	// Before login: "max_handshakes" connections may be logging in at once (default 256), each for at most
	// "handshake_timeout" (default 10s).
	MaxHandshakes    int
	HandshakeTimeout time.Duration
	// "max_auth_failures": failed logins per minute from one address before it is refused with
	// ER_HOST_IS_BLOCKED (default 0: unlimited).
	MaxAuthFailures int
	Users           []SQLUser // [[sql.users]]
}

// The values of SQLUser.AuthPlugin.
const (
	AuthNativePassword = "mysql_native_password"
	AuthCachingSHA2    = "caching_sha2_password"
)

// SQLUser is an account clients log in to keyway with.
type SQLUser struct {
	Name     string // "name"
	Password string // "password"
	// "auth_plugin": "mysql_native_password" or "caching_sha2_password"; "" (the default) follows the user's
	// backend as a direct login would: mysql_native_password on MariaDB, caching_sha2_password on MySQL 8 and later.
	AuthPlugin      string
	BackendUser     string // "backend_user": the account keyway uses on the backend (default: Name)
	BackendPassword string // "backend_password" (default: Password)
	Group           string // "group": the backend group this user's sessions go to (default: the first group)
}

// Group is a set of backend servers: a primary and, optionally, its read replicas.
type Group struct {
	Name           string        // "name"
	Primary        string        // "primary": host:port or a unix socket path
	User           string        // "user": keyway's own monitoring connection
	Password       string        // "password"
	MinIdle        int           // "min_idle": connections kept open per pool (default 0)
	MaxOpen        int           // "max_open": connections per pool at most (default 256)
	MaxConnections int           // "max_connections": all pools together at most (default 0: the server's less a tenth; -1: none)
	IdleTimeout    time.Duration // "idle_timeout": idle connections above min_idle close after this (default 60s)
	HealthInterval time.Duration // "health_interval": how often the monitor pings the primary (default 2s)
	ConnectTimeout time.Duration // "connect_timeout": dialing and handshake (default 5s)
	PoolWait       time.Duration // "pool_wait": the longest a statement waits for a pooled connection (default 0: connect_timeout)
	// "tls": how keyway's own connections to the group (the SQL door's pools, the health check, the containers'
	// pools) use TLS, after MySQL's ssl-mode: TLSOff, TLSPreferred (the default), TLSRequired or TLSVerify.
	TLS string
	// "tls_ca": PEM file of the CAs that sign the servers' certificates, for tls = "verify" ("" = the system
	// roots). "tls_server_name": the name the certificate must carry (default: the host of primary; with a unix
	// socket primary and no tls_server_name only the chain is verified, ssl-mode VERIFY_CA).
	TLSCA, TLSServerName string
	// "invalidate": how cached copies of this group's tables learn of writes made directly in MySQL:
	// InvalidateAuto (the default), InvalidateBinlog, InvalidateTTL or InvalidateNone.
	Invalidate string
	// "binlog_user", "binlog_password": the account the binlog follower uses, when not User (it needs
	// REPLICATION SLAVE and REPLICATION CLIENT).
	BinlogUser, BinlogPassword string
	// "replicas": the primary's read replicas (MariaDB, GTID replication), each an address as primary takes it
	// and a weight; in the file an entry is "host:port" (weight 1) or { address = "host:port", weight = 2 }.
	Replicas []Replica
	// "read_from": which servers take the reads that may leave the primary: ReadPrimary (the default: replicas
	// are only watched), ReadReplicas or ReadAny.
	ReadFrom string
	// "max_replica_lag": how far behind the primary a replica may be and still take reads (default:
	// cache.max_staleness).
	MaxReplicaLag time.Duration
}

// Replica is one of a group's read replicas.
type Replica struct {
	Address string // "address": host:port or a unix socket path, as Group.Primary
	Weight  int    // "weight": its share of the reads sent to replicas (default 1)
}

// Network is how the replica is dialed: "unix" for a socket path, else "tcp" (as Group.PrimaryNetwork).
func (r Replica) Network() string { return addressNetwork(r.Address) }

// The values of Group.ReadFrom: backend's own, so the server passes them through.
const (
	ReadPrimary  = backend.ReadPrimary  // every statement goes to the primary
	ReadReplicas = backend.ReadReplicas // reads a replica can serve go to the replicas
	ReadAny      = backend.ReadAny      // as ReadReplicas, the primary taking its share of those reads
)

// The values of Group.TLS. The default is "preferred", as for the mysql and mariadb clients: TLS whenever the
// server offers it, plaintext as before when it does not, so a deployment whose servers have no TLS sees no
// change, and one whose servers do is no longer readable on the wire. The backend link's TLS is keyway's own
// concern: CLIENT_SSL is not among the capability flags that key the backend pools (mysqlwire.ProtocolCaps), so
// it changes nothing a client of the SQL door negotiates. "preferred" and "required" do not verify the
// certificate (they stop passive eavesdropping, not an active man in the middle); "verify" does.
const (
	TLSOff       = "off"       // never TLS (ssl-mode DISABLED)
	TLSPreferred = "preferred" // TLS when offered, unverified; else plaintext (PREFERRED)
	TLSRequired  = "required"  // TLS or fail, unverified (REQUIRED)
	TLSVerify    = "verify"    // TLS or fail; chain against tls_ca and name (VERIFY_IDENTITY; VERIFY_CA on a socket)
)

// Admin configures the admin HTTP listener (the dashboard, /api, /metrics, /digests, /status, /healthz, /readyz).
type Admin struct {
	Listen string // "listen": host:port; "" = off (the default); examples and docs bind loopback
	// "token": when set, every admin endpoint asks for it, as "Authorization: Bearer <token>" or as the password
	// of HTTP basic auth (any user name). "" = no authentication, fit only for a loopback listener.
	Token string
	// "metrics_public": /metrics answers without the token, for a Prometheus that cannot send one. Nothing else
	// is opened by it.
	MetricsPublic bool
}

// minAdminToken is the shortest admin token accepted: a token is a shared secret, not a password someone types.
const minAdminToken = 16

// Memcache configures the memcache door.
type Memcache struct {
	// "listen": host:port; empty host = all interfaces, port 0 = any free port. listen = "" in the file turns the
	// memcache door off; without the key the door listens on 127.0.0.1:11211.
	Listen         string
	MemoryLimit    int64 // "memory_limit" in bytes: memory for items in the local store
	MaxConnections int   // "max_connections": concurrent client connections
	MaxItemSize    int64 // "max_item_size" in bytes: the largest value a client may store
	// "write_timeout": a client that does not read its replies for this long is disconnected (default 30s).
	WriteTimeout time.Duration
	// "max_inflight_bytes": all connections' partly received requests together (default 0: automatic, the
	// largest of memory_limit/8, 4 MiB and max_item_size + 4 KiB); a large value past it is refused with
	// SERVER_ERROR out of memory storing object.
	MaxInflightBytes int64
	// "tls_cert" and "tls_key": PEM files; with both, the door speaks TLS only (memcached -Z with ssl_chain_cert
	// and ssl_key).
	TLSCert string
	TLSKey  string
	// "auth_file": a file in memcached's -Y format, one "user:password" a line; when set, every client must
	// authenticate before any command (text protocol: memcached 1.6's "set <any> 0 0 <n>" with "user password" as
	// the data; binary protocol: SASL PLAIN, as memcached -S).
	AuthFile string
}

// AuthUser is one line of a memcache.auth_file.
type AuthUser struct {
	Name     string
	Password string
}

// ReadAuthFile reads a memcache.auth_file: memcached's -Y format, one "user:password" a line (the password is the
// rest of the line after the first ':', without its line ending). Blank lines are skipped; a line without ':' or
// with an empty user is an error that names the line but not its content (it may hold a password).
func ReadAuthFile(path string) ([]AuthUser, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var users []AuthUser
	for i, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSuffix(line, "\r")
		if line == "" {
			continue
		}
		name, password, ok := strings.Cut(line, ":")
		if !ok || name == "" {
			return nil, fmt.Errorf("line %d is not \"user:password\"", i+1)
		}
		users = append(users, AuthUser{Name: name, Password: password})
	}
	if len(users) == 0 {
		return nil, errors.New("it has no \"user:password\" line")
	}
	return users, nil
}

// Store configures the local store's persistence.
type Store struct {
	DataDir       string        // "data_dir": where the store persists; "" = nothing is persisted
	Durability    string        // "durability": DurabilityNone, DurabilityAsync or DurabilitySync
	FlushInterval time.Duration // "flush_interval": how often async durability writes behind
}

// The values of Store.Durability.
const (
	DurabilityNone  = "none"  // nothing is written to data_dir
	DurabilityAsync = "async" // acknowledged from memory, written to data_dir every flush_interval
	DurabilitySync  = "sync"  // acknowledged only once written to data_dir
)

// Units for byte sizes. keyway follows memcached: every unit is a power of 1024, so "64MB" means 64 MiB.
const (
	kib int64 = 1 << 10
	mib int64 = 1 << 20
	gib int64 = 1 << 30
)

// Defaults and limits. The defaults of what a component applies itself come from that component (its zero-value
// default), so each lives in one place. The want* texts below quote these numbers: change both together.
const (
	defaultListen         = "127.0.0.1:11211"
	defaultMemoryLimit    = 64 * mib
	defaultMaxConnections = memcache.DefaultMaxConnections
	defaultMaxItemSize    = engine.DefaultMaxItemSize
	defaultFlushInterval  = store.DefaultFlushInterval

	defaultSQLMaxConnections = sqlproxy.DefaultMaxConnections
	defaultMaxHandshakes     = sqlproxy.DefaultMaxHandshakes
	defaultHandshakeTimeout  = sqlproxy.DefaultHandshakeTimeout
	defaultWriteTimeout      = memcache.DefaultWriteTimeout
	defaultMaxOpen           = backend.DefaultMaxOpen
	defaultIdleTimeout       = backend.DefaultIdleTimeout
	defaultHealthInterval    = backend.DefaultHealthInterval
	defaultMaxStaleness      = binlog.DefaultMaxStaleness
	defaultCacheMemory       = qcache.DefaultMemoryLimit
	defaultConnectTimeout    = backend.DefaultConnectTimeout
	defaultGroupTLS          = TLSPreferred

	minMemoryLimit    = 1 * mib
	maxMaxConnections = 1 << 20
	minMaxItemSize    = 1 * kib // memcached -I: between 1k and 1024m
	maxMaxItemSize    = 1 * gib
	maxFlushInterval  = time.Hour
	maxMaxOpen        = 1 << 20
	maxSocketPath     = 107 // sun_path holds 108 bytes with the terminating NUL

	defaultSeparator   = "|"
	defaultGetPolicy   = PolicyCaching
	defaultSetPolicy   = PolicyCaching
	defaultDelPolicy   = PolicyCaching
	defaultFlushPolicy = PolicyCacheOnly
	defaultWrite       = WriteSync
	defaultWriteWindow = writebehind.DefaultWindow
	defaultMaxPending  = writebehind.DefaultMaxPending
	maxWriteWindow     = time.Minute
	maxIdentifier      = 64 // MySQL's limit on table and column names
)

// What each key allows, as said in errors.
const (
	wantListen         = `want "host:port", e.g. "127.0.0.1:11211" (empty host = all interfaces, port 0 = any free port), or "" for no memcache door`
	wantMCTLSPair      = `want both memcache.tls_cert and memcache.tls_key (a PEM certificate chain and its PEM private key) to serve the memcache door over TLS, or neither`
	wantAuthFile       = `want the path of a readable file of "user:password" lines (memcached's -Y format), or "" for no authentication`
	wantMemoryLimit    = `want megabytes as an integer (64) or a size with unit ("64MB", "1GiB", "512k"), at least 1 MiB`
	wantMaxConnections = `want an integer from 1 to 1048576`
	wantMaxItemSize    = `want bytes as an integer (1048576) or a size with unit ("1m", "2MB"), from 1 KiB to 1 GiB`
	wantDataDir        = `want a directory path, or "" for no persistence`
	wantDurability     = `want "none", "async" or "sync"`
	wantFlushInterval  = `want a duration like "1s" or "250ms", more than 0 and at most 1h`

	wantSQLListen    = `want "host:port", e.g. "127.0.0.1:3306" (empty host = all interfaces, port 0 = any free port), or "" for no SQL door`
	wantRule         = `want exactly one of digest = "…", table = "schema.table" or regex = "…", and an optional ttl = "30s"`
	wantServerID     = `want an integer from 1 to 4294967295 that no server or other replica uses, or 0 to derive one`
	wantStaleness    = `want a positive duration, e.g. "1s" or "200ms"`
	wantInvalidate   = `want "binlog", "ttl", "none", or no key (binlog when the server has a usable one)`
	wantAdminListen  = `want "host:port", e.g. "127.0.0.1:9104" (empty host = loopback; "0.0.0.0:9104" = all interfaces; port 0 = any free port), or "" for no admin listener`
	wantAdminToken   = `want at least 16 printable ASCII characters without spaces (e.g. the output of "openssl rand -hex 24"), or "" for no authentication`
	wantTLSFile      = `want the path of a PEM file`
	wantTLSPair      = `want both sql.tls_cert and sql.tls_key (a PEM certificate chain and its PEM private key) to offer TLS, or neither`
	wantBool         = `want true or false`
	wantAuthFailures = `want a whole number: failed logins per minute from one address before it is blocked, 0 for unlimited`
	wantRequireTLS   = `want false, or set sql.tls_cert and sql.tls_key too: keyway cannot require TLS it does not offer`
	wantInflight     = `want bytes as an integer or a size with unit ("16m"), or 0 for automatic`
	wantSQLUsers     = `the SQL door (sql.listen) needs at least one [[sql.users]] entry with the name and password clients log in with`
	wantGroups       = `the SQL door (sql.listen) needs at least one [[groups]] entry with the primary its sessions go to`
	wantUserName     = `want the account name clients log in with, unique among [[sql.users]]`
	wantPassword     = `want a string ("" for no password)`
	wantAuthPlugin   = `want "mysql_native_password" or "caching_sha2_password" (leave it out to follow the backend: mysql_native_password on MariaDB, caching_sha2_password on MySQL 8)`
	wantBackendUser  = `want the account keyway logs in to the backend with (leave it out to use the user's own name)`
	wantGroupRef     = `want the name of a [[groups]] entry (leave it out for the first group)`
	wantGroupName    = `want a name, unique among [[groups]]`
	wantPrimary      = `want "host:port" (e.g. "127.0.0.1:3306") or an absolute unix socket path of at most 107 bytes (e.g. "/run/mysqld/mysqld.sock")`
	wantGroupUser    = `want the account keyway's own monitoring connection logs in with`
	wantMinIdle      = `want an integer from 0 to max_open`
	wantMaxOpen      = `want an integer from 1 to 1048576`
	wantGroupMaxConn = `want an integer from 1 to 1048576, 0 (the server's max_connections less a tenth, the default) or -1 (no bound)`
	wantPoolDuration = `want a duration like "60s" or "500ms", more than 0`
	wantGroupTLS     = `want "off", "preferred" (TLS when the server offers it), "required" (TLS, certificate not verified) or "verify" (TLS, certificate verified against tls_ca)`
	wantTLSCA        = `want the path of a PEM file with the CA certificates that sign the server's certificate (only with tls = "verify")`
	wantServerName   = `want the host name the server's certificate carries (only with tls = "verify"; default: the host of primary)`
	wantReplicas     = `want an array of the group's replicas, each "host:port", an absolute unix socket path, or { address = "host:port", weight = 2 } for a share of the reads other than 1: replicas = ["10.0.0.2:3306", { address = "10.0.0.3:3306", weight = 2 }]`
	wantReplicaAddr  = `want "host:port" (e.g. "10.0.0.2:3306") or an absolute unix socket path of at most 107 bytes, other than the primary and the other replicas`
	wantWeight       = `want a whole number from 1 to 1000: the replica's share of the reads sent to replicas (default 1)`
	wantReadFrom     = `want "primary" (every statement on the primary; the default), "replicas" (reads a replica can serve go to the replicas) or "any" (as "replicas", with the primary taking its share)`
	wantReadReplicas = `sends reads to replicas, and the group has none: list them in replicas = ["host:port", …], or set read_from = "primary"`
	wantReplicaLag   = `want a positive duration, e.g. "1s": how far behind the primary a replica may be and still take reads (default: cache.max_staleness)`

	wantContainerName   = `want a name of letters, digits and _ (keys address the container as "@@name.key"), unique among [[containers]]`
	wantContainerGroups = `[[containers]] need at least one [[groups]] entry with the primary holding their tables`
	wantTable           = `want "schema.table", each part a MySQL identifier (letters, digits, _ or $; at most 64 characters)`
	wantKeyColumn       = `want the name of the key column (letters, digits, _ or $; at most 64 characters)`
	wantValues          = `want one or more column names, as an array (["c1", "c2"]) or one string ("c1,c2")`
	wantValueColumn     = `want a column name (letters, digits, _ or $; at most 64 characters)`
	wantSeparator       = `want a non-empty string that joins the value columns, e.g. "|"`
	wantOptColumn       = `want a column name (letters, digits, _ or $; at most 64 characters), or "" for none`
	wantPolicy          = `want "cache_only", "db_only", "caching" or "disabled"`
	wantWrite           = `want "sync" (acknowledged after COMMIT) or "async" (written behind)`
	wantAsyncSet        = `"async" writes behind to the table, so it needs set = "caching" or "db_only"`
	wantWriteWindow     = `want a duration from "1ms" to "1m": how long an async set waits before it is sent to the table`
	wantWriteMaxPending = `want a whole number from 1 to 1048576: rows an async container lets wait for the table before writers wait`
	wantMigrateGroup    = `want the name of the [[groups]] entry whose server has the innodb_memcache schema, or "" for none`

	wantShardSource   = `want "config" (the map is [[shard_maps]]) or "table" (the map is in the sharding.schema tables on the global group)`
	wantShardSchema   = `want a schema name (letters, digits, _ or $; at most 64 characters); default "keyway_shards"`
	wantShardGlobal   = `want the name of the [[groups]] entry holding the unsharded tables (leave it out for the first group)`
	wantShardGroups   = `sharding needs [[groups]] entries: the global group and the groups holding the shards`
	wantShardMapsHere = `[[shard_maps]] are the map of source = "config": with source = "table" the map is in the sharding.schema tables; remove one or the other`
	wantShardMapName  = `want a name (letters, digits, _ or $; at most 64 characters), unique among [[shard_maps]]`
	wantShardKind     = `want "hash" (Vitess's hash), "xxhash" (Vitess's xxhash), "range_int" or "range_string"`
	wantShardTable    = `want "schema.table", or "table" for the table of that name in any schema, each part a MySQL identifier, in one mapping only`
	wantShardColumn   = `want the name of the shard key column (letters, digits, _ or $; at most 64 characters)`
	wantShardTables   = `want the mapping's tables: tables = [{ table = "app.users", column = "id" }]`
	wantShardShards   = `want the mapping's shards: one [[shard_maps.shards]] entry each, with name and group`
	wantShardName     = `want a name unique in the mapping; for "hash" and "xxhash" the shard's keyspace range as Vitess names shards: "-80", "80-c0", "c0-", or "-" for all`
	wantShardGroupRef = `want the name of a [[groups]] entry`
	wantShardBound    = `want an integer (range_int) or a string (range_string), or no key for an open end; hash and xxhash shards take their range from their name`
)

// Default returns the configuration keyway runs with when nothing is configured: a memcached on 127.0.0.1:11211
// that persists nothing.
func Default() Config {
	var c Config
	// A client that announced CLIENT_LOCAL_FILES opted in to LOAD DATA LOCAL INFILE (the backend asks only such
	// clients, since they share its capability flags): relay it unless the file says allow_local_infile = false.
	c.SQL.AllowLocalInfile = true
	c.EnsureDefaults()
	return c
}

// EnsureDefaults sets every zero field to its default. Store.Durability defaults to "async" when Store.DataDir is
// set and to "none" otherwise, so set DataDir before calling it.
//
// For the SQL door: a user's BackendUser defaults to its Name, its BackendPassword to its Password and its Group to
// the first group's name. (In a Config built in code an empty BackendPassword therefore means "the user's own"; the
// file can say backend_password = "" for a backend account without a password.)
func (c *Config) EnsureDefaults() {
	c.Memcache.ensureDefaults()
	c.Store.ensureDefaults()
	c.SQL.ensureDefaults()
	if c.Cache.MaxStaleness == 0 {
		c.Cache.MaxStaleness = defaultMaxStaleness
	}
	if c.Cache.MemoryLimit == 0 {
		c.Cache.MemoryLimit = defaultCacheMemory
	}
	for i := range c.Groups {
		c.Groups[i].ensureDefaults()
		c.Groups[i].deriveDefaults(c.Cache)
	}
	for i := range c.SQL.Users {
		u := &c.SQL.Users[i]
		u.ensureDefaults()
		if u.Group == "" && len(c.Groups) > 0 {
			u.Group = c.Groups[0].Name
		}
	}
	for i := range c.Containers {
		k := &c.Containers[i]
		k.ensureDefaults()
		if k.Group == "" && len(c.Groups) > 0 {
			k.Group = c.Groups[0].Name
		}
	}
	c.Sharding.ensureDefaults()
	if c.Sharding.Global == "" && c.ShardingInUse() && len(c.Groups) > 0 {
		c.Sharding.Global = c.Groups[0].Name
	}
}

func (s *Sharding) ensureDefaults() {
	if s.Source == "" {
		s.Source = ShardSourceConfig
	}
	if s.Schema == "" {
		s.Schema = shard.DefaultSchema
	}
}

// ensureDefaults fills the defaults that depend on nothing else; Group defaults to the first group's name, which
// the caller knows.
func (k *Container) ensureDefaults() {
	if k.Separator == "" {
		k.Separator = defaultSeparator
	}
	if k.Get == "" {
		k.Get = defaultGetPolicy
	}
	if k.Set == "" {
		k.Set = defaultSetPolicy
	}
	if k.Delete == "" {
		k.Delete = defaultDelPolicy
	}
	if k.Flush == "" {
		k.Flush = defaultFlushPolicy
	}
	if k.Write == "" {
		k.Write = defaultWrite
	}
	if k.WriteWindow == 0 {
		k.WriteWindow = defaultWriteWindow
	}
	if k.WriteMaxPending == 0 {
		k.WriteMaxPending = defaultMaxPending
	}
}

func (s *SQL) ensureDefaults() {
	if s.MaxConnections == 0 {
		s.MaxConnections = defaultSQLMaxConnections
	}
	if s.MaxHandshakes == 0 {
		s.MaxHandshakes = defaultMaxHandshakes
	}
	if s.HandshakeTimeout == 0 {
		s.HandshakeTimeout = defaultHandshakeTimeout
	}
}

func (u *SQLUser) ensureDefaults() {
	if u.BackendUser == "" {
		u.BackendUser = u.Name
	}
	if u.BackendPassword == "" {
		u.BackendPassword = u.Password
	}
}

func (g *Group) ensureDefaults() {
	if g.MaxOpen == 0 {
		g.MaxOpen = defaultMaxOpen
	}
	if g.IdleTimeout == 0 {
		g.IdleTimeout = defaultIdleTimeout
	}
	if g.HealthInterval == 0 {
		g.HealthInterval = defaultHealthInterval
	}
	if g.ConnectTimeout == 0 {
		g.ConnectTimeout = defaultConnectTimeout
	}
	if g.TLS == "" {
		g.TLS = defaultGroupTLS
	}
	if g.ReadFrom == "" {
		g.ReadFrom = ReadPrimary
	}
	for i := range g.Replicas {
		if g.Replicas[i].Weight == 0 {
			g.Replicas[i].Weight = 1
		}
	}
}

// deriveDefaults fills the group's defaults that depend on other sections: max_replica_lag is cache.max_staleness.
func (g *Group) deriveDefaults(cache Cache) {
	if g.MaxReplicaLag == 0 {
		g.MaxReplicaLag = cache.MaxStaleness
	}
}

func (m *Memcache) ensureDefaults() {
	if m.Listen == "" {
		m.Listen = defaultListen
	}
	if m.MemoryLimit == 0 {
		m.MemoryLimit = defaultMemoryLimit
	}
	if m.MaxConnections == 0 {
		m.MaxConnections = defaultMaxConnections
	}
	if m.MaxItemSize == 0 {
		m.MaxItemSize = defaultMaxItemSize
	}
	if m.WriteTimeout == 0 {
		m.WriteTimeout = defaultWriteTimeout
	}
}

func (s *Store) ensureDefaults() {
	s.deriveDefaults()
	if s.FlushInterval == 0 {
		s.FlushInterval = defaultFlushInterval
	}
}

// Validate reports every problem in c at once, one per line, each naming its key and what is allowed. It expects
// EnsureDefaults to have run: a zero field is reported as invalid.
func (c *Config) Validate() error {
	return errors.Join(c.validate()...)
}

func (c *Config) validate() problems {
	var p problems
	c.Memcache.validate(&p)
	c.Store.validate(&p)
	c.validateSQL(&p)
	if c.Admin.Listen != "" && !validListen(c.Admin.Listen) {
		p.add("admin.listen (--admin-listen)", strconv.Quote(c.Admin.Listen), wantAdminListen)
	}
	if c.Admin.Token != "" && !validAdminToken(c.Admin.Token) {
		// The value itself is never shown: it is a secret.
		p.add("admin.token", "(hidden)", wantAdminToken)
	}
	c.validateContainers(&p)
	c.validateSharding(&p)
	for i, r := range c.Cache.Rules {
		key := "cache.rules[" + strconv.Itoa(i) + "]"
		n := 0
		for _, f := range []string{r.Digest, r.Table, r.Regex} {
			if f != "" {
				n++
			}
		}
		if n != 1 {
			p.add(key, fmt.Sprintf("%d of digest, table, regex", n), wantRule)
		}
		if r.Regex != "" {
			if _, err := regexp.Compile(r.Regex); err != nil {
				p.add(key+".regex", strconv.Quote(r.Regex), "want a Go regular expression: "+err.Error())
			}
		}
		if r.TTL < 0 {
			p.add(key+".ttl", strconv.Quote(r.TTL.String()), wantStaleness)
		}
	}
	if c.Cache.MemoryLimit < 0 {
		p.add("cache.memory_limit", strconv.FormatInt(c.Cache.MemoryLimit, 10), wantMemoryLimit)
	}
	if c.Cache.MaxStaleness <= 0 {
		p.add("cache.max_staleness", strconv.Quote(c.Cache.MaxStaleness.String()), wantStaleness)
	}
	for i, g := range c.Groups {
		switch g.Invalidate {
		case InvalidateAuto, InvalidateBinlog, InvalidateTTL, InvalidateNone:
		default:
			p.add("groups["+strconv.Itoa(i)+"].invalidate", strconv.Quote(g.Invalidate), wantInvalidate)
		}
		// A lag left at an invalid max_staleness is that key's problem, reported above.
		if g.MaxReplicaLag <= 0 && g.MaxReplicaLag != c.Cache.MaxStaleness {
			p.add("groups["+strconv.Itoa(i)+"].max_replica_lag", strconv.Quote(g.MaxReplicaLag.String()), wantReplicaLag)
		}
	}
	return p
}

// validateSharding checks [sharding] and [[shard_maps]]: their form and group references here, the shards' ranges
// by shard's own rules (shard.FromConfig), reported under the mapping's shards key.
func (c *Config) validateSharding(p *problems) {
	s := &c.Sharding
	if s.Source != ShardSourceConfig && s.Source != ShardSourceTable {
		p.add("sharding.source", strconv.Quote(s.Source), wantShardSource)
	}
	if !validIdentifier(s.Schema) {
		p.add("sharding.schema", strconv.Quote(s.Schema), wantShardSchema)
	}
	if !c.ShardingInUse() {
		if s.Global != "" {
			c.checkGroupRef(p, "sharding.global", s.Global, wantShardGlobal)
		}
		return
	}
	if len(c.Groups) == 0 {
		p.add("groups", "none", wantShardGroups)
	} else {
		c.checkGroupRef(p, "sharding.global", s.Global, wantShardGlobal)
	}
	if s.Source == ShardSourceTable && len(c.ShardMaps) > 0 {
		p.add("shard_maps", strconv.Itoa(len(c.ShardMaps))+" entries", wantShardMapsHere)
	}
	names := make(map[string]int)
	tables := make(map[string]string) // lower-case table → the key of its first entry
	for i := range c.ShardMaps {
		m := &c.ShardMaps[i]
		key := "shard_maps[" + strconv.Itoa(i) + "]."
		switch first, dup := names[m.Name]; {
		case !validIdentifier(m.Name):
			p.add(key+"name", strconv.Quote(m.Name), wantShardMapName)
		case dup:
			p.add(key+"name", strconv.Quote(m.Name), wantShardMapName+"; shard_maps["+strconv.Itoa(first)+"] has it already")
		default:
			names[m.Name] = i
		}
		kind, kindErr := shard.ParseKind(m.Kind)
		if kindErr != nil {
			p.add(key+"kind", strconv.Quote(m.Kind), wantShardKind)
		}
		if len(m.Tables) == 0 {
			p.add(key+"tables", "[]", wantShardTables)
		}
		for j, t := range m.Tables {
			tkey := key + "tables[" + strconv.Itoa(j) + "]"
			schema, table, qualified := strings.Cut(t.Table, ".")
			if !qualified {
				schema, table = "", t.Table
			}
			switch first, dup := tables[strings.ToLower(t.Table)]; {
			case !validIdentifier(table) || (qualified && !validIdentifier(schema)):
				p.add(tkey+".table", strconv.Quote(t.Table), wantShardTable)
			case dup:
				p.add(tkey+".table", strconv.Quote(t.Table), wantShardTable+"; "+first+" has it already")
			default:
				tables[strings.ToLower(t.Table)] = tkey
			}
			if !validIdentifier(t.Column) {
				p.add(tkey+".column", strconv.Quote(t.Column), wantShardColumn)
			}
		}
		if len(m.Shards) == 0 {
			p.add(key+"shards", "none", wantShardShards)
		}
		formOK := kindErr == nil
		shardNames := make(map[string]bool)
		for j, r := range m.Shards {
			skey := key + "shards[" + strconv.Itoa(j) + "]."
			if r.Name == "" || shardNames[r.Name] {
				p.add(skey+"name", strconv.Quote(r.Name), wantShardName)
				formOK = false
			}
			shardNames[r.Name] = true
			if len(c.Groups) > 0 {
				c.checkGroupRef(p, skey+"group", r.Group, wantShardGroupRef)
			}
			if kindErr == nil && kind != shard.RangeInt && kind != shard.RangeString {
				for _, b := range []struct{ name, v string }{{"from", r.From}, {"to", r.To}} {
					if b.v != "" {
						p.add(skey+b.name, strconv.Quote(b.v), wantShardBound)
						formOK = false
					}
				}
			}
		}
		// The ranges, by shard's rules: gaps and overlaps, hex names, integers. Groups and tables are checked above.
		if formOK && len(m.Shards) > 0 {
			mc := c.ShardConfig().Mappings[i]
			mc.Tables = nil
			for j := range mc.Shards {
				mc.Shards[j].Group = "g"
			}
			if _, err := shard.FromConfig(shard.Config{Global: "g", Mappings: []shard.MappingConfig{mc}}); err != nil {
				for _, e := range strings.Split(err.Error(), "\n") {
					_, msg, _ := strings.Cut(e, ", ")
					*p = append(*p, errors.New(key+"shards: "+msg))
				}
			}
		}
	}
}

// checkGroupRef reports key = name unless name is a [[groups]] entry's name.
func (c *Config) checkGroupRef(p *problems, key, name, want string) {
	var names []string
	for _, g := range c.Groups {
		if g.Name == name {
			return
		}
		names = append(names, strconv.Quote(g.Name))
	}
	if len(names) > 0 {
		want += ": " + strings.Join(names, ", ")
	}
	p.add(key, strconv.Quote(name), want)
}

// validateContainers checks [[containers]] and [migrate] for form and for their references to [[groups]]. The
// tables and columns are checked at startup against the real table.
func (c *Config) validateContainers(p *problems) {
	groups := make(map[string]bool, len(c.Groups))
	var groupNames []string
	for _, g := range c.Groups {
		if g.Name != "" && !groups[g.Name] {
			groups[g.Name] = true
			groupNames = append(groupNames, strconv.Quote(g.Name))
		}
	}
	if len(c.Containers) > 0 && len(c.Groups) == 0 {
		p.add("groups", "none", wantContainerGroups)
	}
	names := make(map[string]int, len(c.Containers)) // name → index of its first use
	for i := range c.Containers {
		k := &c.Containers[i]
		key := "containers[" + strconv.Itoa(i) + "]."
		switch first, dup := names[k.Name]; {
		case !validContainerName(k.Name):
			p.add(key+"name", strconv.Quote(k.Name), wantContainerName)
		case dup:
			p.add(key+"name", strconv.Quote(k.Name), wantContainerName+"; containers["+strconv.Itoa(first)+"] has it already")
		default:
			names[k.Name] = i
		}
		// Without any group the problem is reported once, above; a container left without a group because the
		// first group has no name is covered by that group's problem.
		if len(c.Groups) > 0 && !groups[k.Group] && (k.Group != "" || c.Groups[0].Name != "") {
			p.add(key+"group", strconv.Quote(k.Group), wantGroupRef+": "+strings.Join(groupNames, ", "))
		}
		k.validate(key, p)
	}
	if m := c.Migrate.InnodbMemcache; m != "" && !groups[m] {
		want := wantMigrateGroup + ": no [[groups]] entry is configured"
		if len(groupNames) > 0 {
			want = wantMigrateGroup + ": " + strings.Join(groupNames, ", ")
		}
		p.add("migrate.innodb_memcache", strconv.Quote(m), want)
	}
}

// validate checks a container's own keys; key is its prefix ("containers[0].").
func (k *Container) validate(key string, p *problems) {
	if schema, table, ok := strings.Cut(k.Table, "."); !ok || !validIdentifier(schema) || !validIdentifier(table) {
		p.add(key+"table", strconv.Quote(k.Table), wantTable)
	}
	if !validIdentifier(k.Key) {
		p.add(key+"key", strconv.Quote(k.Key), wantKeyColumn)
	}
	if len(k.Values) == 0 {
		p.add(key+"values", "[]", wantValues)
	}
	for j, v := range k.Values {
		if !validIdentifier(v) {
			p.add(key+"values["+strconv.Itoa(j)+"]", strconv.Quote(v), wantValueColumn)
		}
	}
	if k.Separator == "" {
		p.add(key+"separator", `""`, wantSeparator)
	}
	for _, col := range []struct{ name, v string }{{"flags", k.Flags}, {"cas", k.CAS}, {"expiry", k.Expiry}} {
		if col.v != "" && !validIdentifier(col.v) {
			p.add(key+col.name, strconv.Quote(col.v), wantOptColumn)
		}
	}
	for _, pol := range []struct{ name, v string }{{"get", k.Get}, {"set", k.Set}, {"delete", k.Delete}, {"flush", k.Flush}} {
		switch pol.v {
		case PolicyCacheOnly, PolicyDBOnly, PolicyCaching, PolicyDisabled:
		default:
			p.add(key+pol.name, strconv.Quote(pol.v), wantPolicy)
		}
	}
	switch {
	case k.Write != WriteSync && k.Write != WriteAsync:
		p.add(key+"write", strconv.Quote(k.Write), wantWrite)
	case k.Write == WriteAsync && k.Set != PolicyCaching && k.Set != PolicyDBOnly:
		p.add(key+"write", `"async"`, wantAsyncSet+" (set is "+strconv.Quote(k.Set)+")")
	}
	if k.WriteWindow < time.Millisecond || k.WriteWindow > maxWriteWindow {
		p.add(key+"write_window", strconv.Quote(k.WriteWindow.String()), wantWriteWindow)
	}
	if k.WriteMaxPending < 1 || k.WriteMaxPending > 1<<20 {
		p.add(key+"write_max_pending", strconv.Itoa(k.WriteMaxPending), wantWriteMaxPending)
	}
}

// validContainerName accepts a non-empty name of ASCII letters, digits and _: it is written in keys as "@@name.".
func validContainerName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if b := s[i]; !(b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9' || b == '_') {
			return false
		}
	}
	return true
}

// validIdentifier accepts what MySQL and MariaDB take as an unquoted table or column name: letters, digits, _ and
// $ (and characters from U+0080 to U+FFFF), not digits only, at most 64 characters.
func validIdentifier(s string) bool {
	if s == "" || utf8.RuneCountInString(s) > maxIdentifier {
		return false
	}
	digitsOnly := true
	for _, r := range s {
		switch {
		case r >= '0' && r <= '9':
			continue
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r == '_', r == '$', r >= 0x80 && r <= 0xFFFF && r != utf8.RuneError:
		default:
			return false
		}
		digitsOnly = false
	}
	return !digitsOnly
}

// validateSQL checks [sql], its [[sql.users]] and the [[groups]] they refer to.
func (c *Config) validateSQL(p *problems) {
	s := &c.SQL
	if s.Listen != "" {
		if !validListen(s.Listen) {
			p.add("sql.listen (--sql-listen)", strconv.Quote(s.Listen), wantSQLListen)
		}
		if len(s.Users) == 0 {
			p.add("sql.users", "none", wantSQLUsers)
		}
		if len(c.Groups) == 0 {
			p.add("groups", "none", wantGroups)
		}
	}
	if s.MaxConnections < 1 || s.MaxConnections > maxMaxConnections {
		p.add("sql.max_connections", strconv.Itoa(s.MaxConnections), wantMaxConnections)
	}
	if s.MaxHandshakes < 1 || s.MaxHandshakes > maxMaxConnections {
		p.add("sql.max_handshakes", strconv.Itoa(s.MaxHandshakes), wantMaxConnections)
	}
	if s.HandshakeTimeout <= 0 {
		p.add("sql.handshake_timeout", strconv.Quote(s.HandshakeTimeout.String()), wantPoolDuration)
	}
	if s.MaxAuthFailures < 0 {
		p.add("sql.max_auth_failures", strconv.Itoa(s.MaxAuthFailures), wantAuthFailures)
	}
	if s.RequireTLS && s.TLSCert == "" {
		p.add("sql.require_tls", "true", wantRequireTLS)
	}
	switch {
	case s.TLSCert == "" && s.TLSKey == "":
	case s.TLSCert == "" || s.TLSKey == "":
		p.add("sql.tls_cert, sql.tls_key", strconv.Quote(s.TLSCert)+", "+strconv.Quote(s.TLSKey), wantTLSPair)
	default:
		if _, err := tls.LoadX509KeyPair(s.TLSCert, s.TLSKey); err != nil {
			p.add("sql.tls_cert, sql.tls_key", strconv.Quote(s.TLSCert)+", "+strconv.Quote(s.TLSKey),
				"cannot load them ("+err.Error()+"): "+wantTLSPair)
		}
	}

	groups := make(map[string]int, len(c.Groups)) // name → index of its first use
	var groupNames []string
	for i := range c.Groups {
		g := &c.Groups[i]
		key := "groups[" + strconv.Itoa(i) + "]."
		switch first, dup := groups[g.Name]; {
		case g.Name == "":
			p.add(key+"name", `""`, wantGroupName)
		case dup:
			p.add(key+"name", strconv.Quote(g.Name), wantGroupName+"; groups["+strconv.Itoa(first)+"] has it already")
		default:
			groups[g.Name] = i
			groupNames = append(groupNames, strconv.Quote(g.Name))
		}
		g.validate(key, p)
	}

	users := make(map[string]int, len(s.Users))
	for i := range s.Users {
		u := &s.Users[i]
		key := "sql.users[" + strconv.Itoa(i) + "]."
		switch first, dup := users[u.Name]; {
		case u.Name == "":
			p.add(key+"name", `""`, wantUserName)
		case dup:
			p.add(key+"name", strconv.Quote(u.Name), wantUserName+"; sql.users["+strconv.Itoa(first)+"] has it already")
		default:
			users[u.Name] = i
		}
		if u.AuthPlugin != "" && u.AuthPlugin != AuthNativePassword && u.AuthPlugin != AuthCachingSHA2 {
			p.add(key+"auth_plugin", strconv.Quote(u.AuthPlugin), wantAuthPlugin)
		}
		// An empty name is reported above; the backend user it left empty is its consequence.
		if u.BackendUser == "" && u.Name != "" {
			p.add(key+"backend_user", `""`, wantBackendUser)
		}
		if _, ok := groups[u.Group]; !ok && len(c.Groups) > 0 {
			// A user left without a group because the first group has no name is covered by that group's problem.
			if u.Group != "" || c.Groups[0].Name != "" {
				p.add(key+"group", strconv.Quote(u.Group), wantGroupRef+": "+strings.Join(groupNames, ", "))
			}
		}
	}
}

func (g *Group) validate(key string, p *problems) {
	if !validPrimary(g.Primary) {
		p.add(key+"primary", strconv.Quote(g.Primary), wantPrimary)
	}
	if g.User == "" {
		p.add(key+"user", `""`, wantGroupUser)
	}
	if g.MaxOpen < 1 || g.MaxOpen > maxMaxOpen {
		p.add(key+"max_open", strconv.Itoa(g.MaxOpen), wantMaxOpen)
	}
	if g.MaxConnections < -1 || g.MaxConnections > maxMaxOpen {
		p.add(key+"max_connections", strconv.Itoa(g.MaxConnections), wantGroupMaxConn)
	}
	if g.MinIdle < 0 || (g.MinIdle > g.MaxOpen && g.MaxOpen >= 1) {
		p.add(key+"min_idle", strconv.Itoa(g.MinIdle), wantMinIdle+" ("+strconv.Itoa(g.MaxOpen)+")")
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"idle_timeout", g.IdleTimeout}, {"health_interval", g.HealthInterval}, {"connect_timeout", g.ConnectTimeout}} {
		if d.v <= 0 {
			p.add(key+d.name, strconv.Quote(d.v.String()), wantPoolDuration)
		}
	}
	if g.PoolWait < 0 {
		p.add(key+"pool_wait", strconv.Quote(g.PoolWait.String()), wantPoolDuration)
	}
	switch g.TLS {
	case TLSOff, TLSPreferred, TLSRequired, TLSVerify:
	default:
		p.add(key+"tls", strconv.Quote(g.TLS), wantGroupTLS)
	}
	// tls_ca and tls_server_name with a mode that does not verify would suggest a check that never happens.
	if g.TLSCA != "" {
		if g.TLS != TLSVerify {
			p.add(key+"tls_ca", strconv.Quote(g.TLSCA), wantTLSCA+`; tls is "`+g.TLS+`"`)
		} else if err := checkCAFile(g.TLSCA); err != nil {
			p.add(key+"tls_ca", strconv.Quote(g.TLSCA), "cannot use it ("+err.Error()+"): "+wantTLSCA)
		}
	}
	if g.TLSServerName != "" && g.TLS != TLSVerify {
		p.add(key+"tls_server_name", strconv.Quote(g.TLSServerName), wantServerName+`; tls is "`+g.TLS+`"`)
	}
	g.validateReplicas(key, p)
}

// maxReplicaWeight bounds a replica's weight, so that the weights of a group add up without a care.
const maxReplicaWeight = 1000

// validateReplicas checks replicas and read_from (max_replica_lag is checked by Config.validate, which knows
// cache.max_staleness, its default). A replica's address is reported under its entry's key
// ("groups[0].replicas[1]"), its weight under ".weight".
func (g *Group) validateReplicas(key string, p *problems) {
	seen := make(map[string]string) // sameAddress form → who has it, as said in the problem
	if validPrimary(g.Primary) {
		seen[sameAddress(g.Primary)] = "it is the group's primary"
	}
	for i, r := range g.Replicas {
		rkey := key + "replicas[" + strconv.Itoa(i) + "]"
		if !validPrimary(r.Address) {
			p.add(rkey, strconv.Quote(r.Address), wantReplicaAddr)
		} else if who, dup := seen[sameAddress(r.Address)]; dup {
			p.add(rkey, strconv.Quote(r.Address), wantReplicaAddr+"; "+who)
		} else {
			seen[sameAddress(r.Address)] = "replicas[" + strconv.Itoa(i) + "] has it already"
		}
		if r.Weight < 1 || r.Weight > maxReplicaWeight {
			p.add(rkey+".weight", strconv.Itoa(r.Weight), wantWeight)
		}
	}
	switch g.ReadFrom {
	case ReadPrimary:
	case ReadReplicas, ReadAny:
		if len(g.Replicas) == 0 {
			p.add(key+"read_from", strconv.Quote(g.ReadFrom), wantReadReplicas)
		}
	default:
		p.add(key+"read_from", strconv.Quote(g.ReadFrom), wantReadFrom)
	}
}

// sameAddress is the form in which two valid addresses of one server compare equal, without resolving names:
// the host in lower case and the port as a number ("DB1:03306" is "db1:3306"); a socket path cleaned.
func sameAddress(addr string) string {
	if addressNetwork(addr) == "unix" {
		return "unix:" + filepath.Clean(addr)
	}
	host, port, _ := net.SplitHostPort(addr)
	n, _ := strconv.Atoi(port)
	return net.JoinHostPort(strings.ToLower(host), strconv.Itoa(n))
}

// checkCAFile reads a PEM file of CA certificates as the backend will.
func checkCAFile(name string) error {
	b, err := os.ReadFile(name)
	if err != nil {
		return err
	}
	if !x509.NewCertPool().AppendCertsFromPEM(b) {
		return errors.New("no PEM certificate in it")
	}
	return nil
}

// PrimaryNetwork is how the primary is dialed: "unix" for a socket path (it starts with "/"), else "tcp". This is
// the one place the form of an address is read; validPrimary and the server's topology both use it.
func (g Group) PrimaryNetwork() string { return addressNetwork(g.Primary) }

func addressNetwork(addr string) string {
	if strings.HasPrefix(addr, "/") {
		return "unix"
	}
	return "tcp"
}

// validPrimary accepts host:port with a non-empty host and a port from 1 to 65535, or an absolute unix socket path
// short enough for sun_path. As with validListen, the host is not resolved here.
func validPrimary(s string) bool {
	if addressNetwork(s) == "unix" {
		return len(s) <= maxSocketPath
	}
	host, port, err := net.SplitHostPort(s)
	if err != nil || host == "" {
		return false
	}
	n, err := strconv.Atoi(port)
	return err == nil && n >= 1 && n <= 65535
}

func (m *Memcache) validate(p *problems) {
	if m.Listen != "" && !validListen(m.Listen) {
		p.add("memcache.listen (-l, -p)", strconv.Quote(m.Listen), wantListen)
	}
	if m.MemoryLimit < minMemoryLimit {
		p.add("memcache.memory_limit (-m)", formatBytes(m.MemoryLimit), wantMemoryLimit)
	}
	if m.MaxConnections < 1 || m.MaxConnections > maxMaxConnections {
		p.add("memcache.max_connections (-c)", strconv.Itoa(m.MaxConnections), wantMaxConnections)
	}
	if m.WriteTimeout <= 0 {
		p.add("memcache.write_timeout", strconv.Quote(m.WriteTimeout.String()), wantPoolDuration)
	}
	if m.MaxInflightBytes < 0 {
		p.add("memcache.max_inflight_bytes", formatBytes(m.MaxInflightBytes), wantInflight)
	}
	if m.MaxItemSize < minMaxItemSize || m.MaxItemSize > maxMaxItemSize {
		p.add("memcache.max_item_size (-I)", formatBytes(m.MaxItemSize), wantMaxItemSize)
	}
	switch {
	case m.TLSCert == "" && m.TLSKey == "":
	case m.TLSCert == "" || m.TLSKey == "":
		p.add("memcache.tls_cert, memcache.tls_key", strconv.Quote(m.TLSCert)+", "+strconv.Quote(m.TLSKey), wantMCTLSPair)
	default:
		if _, err := tls.LoadX509KeyPair(m.TLSCert, m.TLSKey); err != nil {
			p.add("memcache.tls_cert, memcache.tls_key", strconv.Quote(m.TLSCert)+", "+strconv.Quote(m.TLSKey),
				"cannot load them ("+err.Error()+"): "+wantMCTLSPair)
		}
	}
	if m.AuthFile != "" {
		if _, err := ReadAuthFile(m.AuthFile); err != nil {
			p.add("memcache.auth_file", strconv.Quote(m.AuthFile), "cannot use it ("+err.Error()+"): "+wantAuthFile)
		}
	}
}

// validListen accepts host:port with a numeric port. The host is not resolved here: that is the listener's job,
// and a name that does not resolve yet may resolve at start.
func validListen(s string) bool {
	_, port, err := net.SplitHostPort(s)
	if err != nil {
		return false
	}
	n, err := strconv.Atoi(port)
	return err == nil && n >= 0 && n <= 65535
}

// deriveDefaults fills the defaults that depend on other fields.
func (s *Store) deriveDefaults() {
	if s.Durability == "" {
		s.Durability = DurabilityNone
		if s.DataDir != "" {
			s.Durability = DurabilityAsync
		}
	}
}

func (s *Store) validate(p *problems) {
	switch s.Durability {
	case DurabilityNone:
	case DurabilityAsync, DurabilitySync:
		// data_dir with durability "none" is allowed (it keeps nothing), but not the other way round.
		if s.DataDir == "" {
			p.add("store.durability (--durability)", strconv.Quote(s.Durability),
				`needs store.data_dir (--data-dir): set a data directory, or set durability = "none"`)
		}
	default:
		p.add("store.durability (--durability)", strconv.Quote(s.Durability), wantDurability)
	}
	if s.FlushInterval <= 0 || s.FlushInterval > maxFlushInterval {
		p.add("store.flush_interval", strconv.Quote(s.FlushInterval.String()), wantFlushInterval)
	}
}

// Parse reads a TOML configuration, fills in defaults and validates it. It reports every problem at once:
// unknown keys, values of the wrong form and values out of range.
func Parse(data []byte) (Config, error) {
	c := start()
	problems, err := decodeFile(&c, data)
	if err != nil {
		return Config{}, err
	}
	c.finish()
	if err := errors.Join(append(problems, c.validate().besides(problems)...)...); err != nil {
		return Config{}, err
	}
	return c, nil
}

// LoadFile is Parse on the contents of the file at path; errors in the file are prefixed with its path.
func LoadFile(path string) (Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("config: %w", err)
	}
	c, err := Parse(data)
	if err != nil {
		return Config{}, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// start is what the file and flags are applied on: the defaults, except those that depend on other fields
// (Store.Durability on data_dir), which finish derives afterwards.
func start() Config {
	c := Default()
	c.Store.Durability = ""
	return c
}

// finish derives the remaining defaults once the file and flags are applied. It is EnsureDefaults for a Config
// that came from start, but leaves alone a 0 the user wrote, so that Validate rejects it rather than EnsureDefaults
// silently replacing it.
func (c *Config) finish() {
	c.Store.deriveDefaults()
	for i := range c.Groups {
		c.Groups[i].deriveDefaults(c.Cache)
	}
}

// problems collects errors: mostly *problem, plus the odd other error (an unknown key).
type problems []error

func (p *problems) add(key, value, want string) {
	*p = append(*p, &problem{key, value, want})
}

// besides returns the problems in p about keys that reported has no problem about. A key whose value was of the
// wrong form is left at its default, or empty where it has none; Validate would then report the empty value too.
func (p problems) besides(reported []error) problems {
	keys := make(map[string]bool)
	for _, err := range reported {
		if pr, ok := err.(*problem); ok {
			keys[pr.bareKey()] = true
		}
	}
	var out problems
	for _, err := range p {
		if pr, ok := err.(*problem); ok && keys[pr.bareKey()] {
			continue
		}
		out = append(out, err)
	}
	return out
}

// problem is one invalid value: "key = value: what is allowed".
type problem struct {
	key   string // as in the file, then the flags that set it: "memcache.listen (-l, -p)"
	value string // as written, or close to it
	want  string
}

func (p *problem) Error() string { return p.key + " = " + p.value + ": " + p.want }

// bareKey is the key without the flags that set it.
func (p *problem) bareKey() string {
	k, _, _ := strings.Cut(p.key, " (")
	return k
}

// formatBytes shows n in the largest binary unit that divides it exactly, so an error repeats what the user wrote.
func formatBytes(n int64) string {
	switch {
	case n != 0 && n%gib == 0:
		return strconv.FormatInt(n/gib, 10) + " GiB"
	case n != 0 && n%mib == 0:
		return strconv.FormatInt(n/mib, 10) + " MiB"
	case n != 0 && n%kib == 0:
		return strconv.FormatInt(n/kib, 10) + " KiB"
	}
	return strconv.FormatInt(n, 10) + " bytes"
}

// validAdminToken: long enough to resist guessing, and only characters that pass unchanged through an
// Authorization header and a basic-auth password.
func validAdminToken(t string) bool {
	if len(t) < minAdminToken {
		return false
	}
	for i := 0; i < len(t); i++ {
		if t[i] <= ' ' || t[i] > '~' {
			return false
		}
	}
	return true
}
