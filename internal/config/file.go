package config

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
)

// fileConfig is the layout of the TOML file: one field per section, tagged with the section's name.
//
// Every leaf is `any` so that the TOML decoder never stops at a value of the wrong type: the decoder below reports
// it with the key and the allowed form, alongside every other problem. A field left nil was not in the file.
//
// Arrays of tables ([[groups]], [[sql.users]]) are slices of structs whose leaves are `any` in turn. A value that
// is not a table where a table or array of tables belongs ("groups = 5") is a structural error the TOML decoder
// returns on its own, like a syntax error.
type fileConfig struct {
	Memcache   memcacheFile    `toml:"memcache"`
	Store      storeFile       `toml:"store"`
	SQL        sqlFile         `toml:"sql"`
	Groups     []groupFile     `toml:"groups"`
	Admin      adminFile       `toml:"admin"`
	Containers []containerFile `toml:"containers"`
	Migrate    migrateFile     `toml:"migrate"`
	Cache      cacheFile       `toml:"cache"`
	Sharding   shardingFile    `toml:"sharding"`
	ShardMaps  []shardMapFile  `toml:"shard_maps"`
}

type shardingFile struct {
	Global any `toml:"global"`
	Source any `toml:"source"`
	Schema any `toml:"schema"`
}

type shardMapFile struct {
	Name   any              `toml:"name"`
	Kind   any              `toml:"kind"`
	Tables []shardTableFile `toml:"tables"`
	Shards []shardFile      `toml:"shards"`
}

type shardTableFile struct {
	Table   any `toml:"table"`
	Column  any `toml:"column"`
	Scatter any `toml:"scatter"`
}

type shardFile struct {
	Name  any `toml:"name"`
	Group any `toml:"group"`
	From  any `toml:"from"`
	To    any `toml:"to"`
}

type cacheFile struct {
	MaxStaleness   any             `toml:"max_staleness"`
	BinlogServerID any             `toml:"binlog_server_id"`
	Enabled        any             `toml:"enabled"`
	MemoryLimit    any             `toml:"memory_limit"`
	DefaultTTL     any             `toml:"default_ttl"`
	Rules          []cacheRuleFile `toml:"rules"`
}

type cacheRuleFile struct {
	Digest any `toml:"digest"`
	Table  any `toml:"table"`
	Regex  any `toml:"regex"`
	TTL    any `toml:"ttl"`
}

type memcacheFile struct {
	Listen         any `toml:"listen"`
	MemoryLimit    any `toml:"memory_limit"`
	MaxConnections any `toml:"max_connections"`
	MaxItemSize    any `toml:"max_item_size"`
	WriteTimeout   any `toml:"write_timeout"`
	MaxInflight    any `toml:"max_inflight_bytes"`
	TLSCert        any `toml:"tls_cert"`
	TLSKey         any `toml:"tls_key"`
	AuthFile       any `toml:"auth_file"`
}

type storeFile struct {
	DataDir       any `toml:"data_dir"`
	Durability    any `toml:"durability"`
	FlushInterval any `toml:"flush_interval"`
}

type sqlFile struct {
	Listen           any           `toml:"listen"`
	MaxConnections   any           `toml:"max_connections"`
	TLSCert          any           `toml:"tls_cert"`
	TLSKey           any           `toml:"tls_key"`
	AllowLocalInfile any           `toml:"allow_local_infile"`
	RequireTLS       any           `toml:"require_tls"`
	MaxHandshakes    any           `toml:"max_handshakes"`
	HandshakeTimeout any           `toml:"handshake_timeout"`
	MaxAuthFailures  any           `toml:"max_auth_failures"`
	Users            []sqlUserFile `toml:"users"`
}

type sqlUserFile struct {
	Name            any `toml:"name"`
	Password        any `toml:"password"`
	AuthPlugin      any `toml:"auth_plugin"`
	BackendUser     any `toml:"backend_user"`
	BackendPassword any `toml:"backend_password"`
	Group           any `toml:"group"`
}

type groupFile struct {
	Name           any `toml:"name"`
	Primary        any `toml:"primary"`
	User           any `toml:"user"`
	Password       any `toml:"password"`
	MinIdle        any `toml:"min_idle"`
	MaxOpen        any `toml:"max_open"`
	MaxConnections any `toml:"max_connections"`
	IdleTimeout    any `toml:"idle_timeout"`
	HealthInterval any `toml:"health_interval"`
	ConnectTimeout any `toml:"connect_timeout"`
	PoolWait       any `toml:"pool_wait"`
	TLS            any `toml:"tls"`
	TLSCA          any `toml:"tls_ca"`
	TLSServerName  any `toml:"tls_server_name"`
	Invalidate     any `toml:"invalidate"`
	BinlogUser     any `toml:"binlog_user"`
	BinlogPassword any `toml:"binlog_password"`
	// replicas is an array whose entries are an address or an inline table { address = …, weight = … }: decoded
	// by decoder.replicas, which also reports the inline tables' unknown keys (the TOML decoder cannot: the leaf
	// is `any`).
	Replicas      any `toml:"replicas"`
	ReadFrom      any `toml:"read_from"`
	MaxReplicaLag any `toml:"max_replica_lag"`
}

type adminFile struct {
	Listen        any `toml:"listen"`
	Token         any `toml:"token"`
	MetricsPublic any `toml:"metrics_public"`
}

type containerFile struct {
	Name      any `toml:"name"`
	Group     any `toml:"group"`
	Table     any `toml:"table"`
	Key       any `toml:"key"`
	Values    any `toml:"values"`
	Separator any `toml:"separator"`
	Flags     any `toml:"flags"`
	CAS       any `toml:"cas"`
	Expiry    any `toml:"expiry"`
	Get       any `toml:"get"`
	Set       any `toml:"set"`
	Delete    any `toml:"delete"`
	Flush     any `toml:"flush"`
	Write     any `toml:"write"`
	// write-behind tuning
	WriteWindow     any `toml:"write_window"`
	WriteMaxPending any `toml:"write_max_pending"`
}

type migrateFile struct {
	InnodbMemcache any `toml:"innodb_memcache"`
}

func (f *fileConfig) applyTo(c *Config, d *decoder) {
	f.Memcache.applyTo(&c.Memcache, d)
	f.Store.applyTo(&c.Store, d)
	// Groups first: a user without a group key gets the first group's name.
	if f.Groups != nil {
		c.Groups = make([]Group, len(f.Groups))
		for i := range f.Groups {
			f.Groups[i].applyTo(&c.Groups[i], "groups["+strconv.Itoa(i)+"].", d)
		}
	}
	f.SQL.applyTo(c, d)
	d.str("admin.listen", f.Admin.Listen, wantAdminListen, &c.Admin.Listen)
	if t, ok := f.Admin.Token.(string); ok || f.Admin.Token == nil {
		c.Admin.Token = t
	} else {
		d.problems.add("admin.token", "(hidden)", wantAdminToken) // a secret: never echoed, even malformed
	}
	d.boolean("admin.metrics_public", f.Admin.MetricsPublic, wantBool, &c.Admin.MetricsPublic)
	d.duration("cache.max_staleness", f.Cache.MaxStaleness, wantStaleness, &c.Cache.MaxStaleness)
	enabled := true
	d.boolean("cache.enabled", f.Cache.Enabled, wantBool, &enabled)
	c.Cache.Disabled = !enabled
	d.size("cache.memory_limit", f.Cache.MemoryLimit, mib, wantMemoryLimit, &c.Cache.MemoryLimit)
	d.duration("cache.default_ttl", f.Cache.DefaultTTL, wantStaleness, &c.Cache.DefaultTTL)
	for i, r := range f.Cache.Rules {
		key := "cache.rules[" + strconv.Itoa(i) + "]."
		var rule CacheRule
		d.str(key+"digest", r.Digest, wantRule, &rule.Digest)
		d.str(key+"table", r.Table, wantRule, &rule.Table)
		d.str(key+"regex", r.Regex, wantRule, &rule.Regex)
		d.duration(key+"ttl", r.TTL, wantStaleness, &rule.TTL)
		c.Cache.Rules = append(c.Cache.Rules, rule)
	}
	serverID := -1
	d.integer("cache.binlog_server_id", f.Cache.BinlogServerID, wantServerID, &serverID)
	switch {
	case serverID == -1: // absent or refused
	case serverID < 0 || serverID > 1<<32-1:
		d.problems.add("cache.binlog_server_id", strconv.Itoa(serverID), wantServerID)
	default:
		c.Cache.BinlogServerID = uint32(serverID)
	}
	if f.Containers != nil {
		c.Containers = make([]Container, len(f.Containers))
		for i := range f.Containers {
			f.Containers[i].applyTo(&c.Containers[i], c.Groups, "containers["+strconv.Itoa(i)+"].", d)
		}
	}
	d.str("migrate.innodb_memcache", f.Migrate.InnodbMemcache, wantMigrateGroup, &c.Migrate.InnodbMemcache)
	f.applySharding(c, d)
}

// applySharding fills [sharding] and [[shard_maps]]. The global group defaults to the first group's name only where
// the key is absent and sharding is in use, so that global = "" reaches Validate and is rejected.
func (f *fileConfig) applySharding(c *Config, d *decoder) {
	d.str("sharding.global", f.Sharding.Global, wantShardGlobal, &c.Sharding.Global)
	d.str("sharding.source", f.Sharding.Source, wantShardSource, &c.Sharding.Source)
	d.str("sharding.schema", f.Sharding.Schema, wantShardSchema, &c.Sharding.Schema)
	if f.ShardMaps != nil {
		c.ShardMaps = make([]ShardMap, len(f.ShardMaps))
	}
	for i, fm := range f.ShardMaps {
		m := &c.ShardMaps[i]
		key := "shard_maps[" + strconv.Itoa(i) + "]."
		d.str(key+"name", fm.Name, wantShardMapName, &m.Name)
		d.str(key+"kind", fm.Kind, wantShardKind, &m.Kind)
		for j, ft := range fm.Tables {
			tkey := key + "tables[" + strconv.Itoa(j) + "]."
			var t ShardTable
			d.str(tkey+"table", ft.Table, wantShardTable, &t.Table)
			d.str(tkey+"column", ft.Column, wantShardColumn, &t.Column)
			d.boolean(tkey+"scatter", ft.Scatter, wantBool, &t.Scatter)
			m.Tables = append(m.Tables, t)
		}
		for j, fs := range fm.Shards {
			skey := key + "shards[" + strconv.Itoa(j) + "]."
			var r ShardRange
			d.str(skey+"name", fs.Name, wantShardName, &r.Name)
			d.str(skey+"group", fs.Group, wantShardGroupRef, &r.Group)
			d.bound(skey+"from", fs.From, &r.From)
			d.bound(skey+"to", fs.To, &r.To)
			m.Shards = append(m.Shards, r)
		}
	}
	if f.Sharding.Global == nil && c.ShardingInUse() && len(c.Groups) > 0 {
		c.Sharding.Global = c.Groups[0].Name
	}
}

// bound accepts a range bound: an integer (range_int) or a string (range_string), kept as its text.
func (d *decoder) bound(key string, v any, dst *string) {
	switch v := v.(type) {
	case nil:
	case int64:
		*dst = strconv.FormatInt(v, 10)
	case string:
		*dst = v
	default:
		d.problems.add(key, showTOML(v), wantShardBound)
	}
}

// applyTo fills k from the file on top of the defaults. The group defaults to the first group's name only where
// the key is absent, so that group = "" reaches Validate and is rejected.
func (f *containerFile) applyTo(k *Container, groups []Group, key string, d *decoder) {
	k.ensureDefaults()
	d.str(key+"name", f.Name, wantContainerName, &k.Name)
	d.str(key+"group", f.Group, wantGroupRef, &k.Group)
	d.str(key+"table", f.Table, wantTable, &k.Table)
	d.str(key+"key", f.Key, wantKeyColumn, &k.Key)
	d.columns(key+"values", f.Values, wantValues, &k.Values)
	d.str(key+"separator", f.Separator, wantSeparator, &k.Separator)
	d.str(key+"flags", f.Flags, wantOptColumn, &k.Flags)
	d.str(key+"cas", f.CAS, wantOptColumn, &k.CAS)
	d.str(key+"expiry", f.Expiry, wantOptColumn, &k.Expiry)
	d.str(key+"get", f.Get, wantPolicy, &k.Get)
	d.str(key+"set", f.Set, wantPolicy, &k.Set)
	d.str(key+"delete", f.Delete, wantPolicy, &k.Delete)
	d.str(key+"flush", f.Flush, wantPolicy, &k.Flush)
	d.str(key+"write", f.Write, wantWrite, &k.Write)
	d.duration(key+"write_window", f.WriteWindow, wantWriteWindow, &k.WriteWindow)
	d.integer(key+"write_max_pending", f.WriteMaxPending, wantWriteMaxPending, &k.WriteMaxPending)
	if f.Group == nil && len(groups) > 0 {
		k.Group = groups[0].Name
	}
}

func (f *sqlFile) applyTo(c *Config, d *decoder) {
	s := &c.SQL
	d.str("sql.listen", f.Listen, wantSQLListen, &s.Listen)
	d.integer("sql.max_connections", f.MaxConnections, wantMaxConnections, &s.MaxConnections)
	d.str("sql.tls_cert", f.TLSCert, wantTLSFile, &s.TLSCert)
	d.str("sql.tls_key", f.TLSKey, wantTLSFile, &s.TLSKey)
	d.boolean("sql.allow_local_infile", f.AllowLocalInfile, wantBool, &s.AllowLocalInfile)
	d.boolean("sql.require_tls", f.RequireTLS, wantBool, &s.RequireTLS)
	d.integer("sql.max_handshakes", f.MaxHandshakes, wantMaxConnections, &s.MaxHandshakes)
	d.duration("sql.handshake_timeout", f.HandshakeTimeout, wantPoolDuration, &s.HandshakeTimeout)
	d.integer("sql.max_auth_failures", f.MaxAuthFailures, wantAuthFailures, &s.MaxAuthFailures)
	if f.Users == nil {
		return
	}
	s.Users = make([]SQLUser, len(f.Users))
	for i := range f.Users {
		f.Users[i].applyTo(&s.Users[i], c.Groups, "sql.users["+strconv.Itoa(i)+"].", d)
	}
}

// applyTo fills u from the file. The defaults that depend on other keys apply only where the key is absent, so
// that backend_password = "" (a backend account without a password) is kept, and backend_user = "" or group = ""
// reach Validate and are rejected.
func (f *sqlUserFile) applyTo(u *SQLUser, groups []Group, key string, d *decoder) {
	d.str(key+"name", f.Name, wantUserName, &u.Name)
	d.str(key+"password", f.Password, wantPassword, &u.Password)
	d.str(key+"auth_plugin", f.AuthPlugin, wantAuthPlugin, &u.AuthPlugin)
	if f.AuthPlugin == "" { // written empty: not a way to ask for the default (leaving the key out is)
		d.problems.add(key+"auth_plugin", `""`, wantAuthPlugin)
	}
	d.str(key+"backend_user", f.BackendUser, wantBackendUser, &u.BackendUser)
	d.str(key+"backend_password", f.BackendPassword, wantPassword, &u.BackendPassword)
	d.str(key+"group", f.Group, wantGroupRef, &u.Group)
	if f.BackendUser == nil {
		u.BackendUser = u.Name
	}
	if f.BackendPassword == nil {
		u.BackendPassword = u.Password
	}
	if f.Group == nil && len(groups) > 0 {
		u.Group = groups[0].Name
	}
}

// applyTo fills g from the file on top of the defaults, so that a 0 written in the file reaches Validate.
func (f *groupFile) applyTo(g *Group, key string, d *decoder) {
	g.ensureDefaults()
	d.str(key+"name", f.Name, wantGroupName, &g.Name)
	d.str(key+"primary", f.Primary, wantPrimary, &g.Primary)
	d.str(key+"user", f.User, wantGroupUser, &g.User)
	d.str(key+"password", f.Password, wantPassword, &g.Password)
	d.integer(key+"min_idle", f.MinIdle, wantMinIdle, &g.MinIdle)
	d.integer(key+"max_open", f.MaxOpen, wantMaxOpen, &g.MaxOpen)
	d.integer(key+"max_connections", f.MaxConnections, wantGroupMaxConn, &g.MaxConnections)
	d.duration(key+"idle_timeout", f.IdleTimeout, wantPoolDuration, &g.IdleTimeout)
	d.duration(key+"health_interval", f.HealthInterval, wantPoolDuration, &g.HealthInterval)
	d.duration(key+"connect_timeout", f.ConnectTimeout, wantPoolDuration, &g.ConnectTimeout)
	d.duration(key+"pool_wait", f.PoolWait, wantPoolDuration, &g.PoolWait)
	d.str(key+"tls", f.TLS, wantGroupTLS, &g.TLS)
	d.str(key+"tls_ca", f.TLSCA, wantTLSCA, &g.TLSCA)
	d.str(key+"tls_server_name", f.TLSServerName, wantServerName, &g.TLSServerName)
	d.str(key+"invalidate", f.Invalidate, wantInvalidate, &g.Invalidate)
	d.str(key+"binlog_user", f.BinlogUser, wantGroupUser, &g.BinlogUser)
	d.str(key+"binlog_password", f.BinlogPassword, wantPassword, &g.BinlogPassword)
	d.replicas(key+"replicas", f.Replicas, &g.Replicas)
	d.str(key+"read_from", f.ReadFrom, wantReadFrom, &g.ReadFrom)
	// A lag of zero or less written in the file is refused here: finish gives a zero the default
	// (cache.max_staleness), so Validate would not see it.
	if f.MaxReplicaLag != nil {
		n := len(d.problems)
		var lag time.Duration
		d.duration(key+"max_replica_lag", f.MaxReplicaLag, wantReplicaLag, &lag)
		switch {
		case len(d.problems) > n: // reported: not a duration
		case lag <= 0:
			d.problems.add(key+"max_replica_lag", showTOML(f.MaxReplicaLag), wantReplicaLag)
		default:
			g.MaxReplicaLag = lag
		}
	}
}

func (f *memcacheFile) applyTo(m *Memcache, d *decoder) {
	d.str("memcache.listen", f.Listen, wantListen, &m.Listen)
	d.size("memcache.memory_limit", f.MemoryLimit, mib, wantMemoryLimit, &m.MemoryLimit) // an integer is megabytes, like memcached -m
	d.integer("memcache.max_connections", f.MaxConnections, wantMaxConnections, &m.MaxConnections)
	d.size("memcache.max_item_size", f.MaxItemSize, 1, wantMaxItemSize, &m.MaxItemSize)
	d.duration("memcache.write_timeout", f.WriteTimeout, wantPoolDuration, &m.WriteTimeout)
	d.size("memcache.max_inflight_bytes", f.MaxInflight, 1, wantInflight, &m.MaxInflightBytes)
	d.str("memcache.tls_cert", f.TLSCert, wantTLSFile, &m.TLSCert)
	d.str("memcache.tls_key", f.TLSKey, wantTLSFile, &m.TLSKey)
	d.str("memcache.auth_file", f.AuthFile, wantAuthFile, &m.AuthFile)
}

func (f *storeFile) applyTo(s *Store, d *decoder) {
	d.str("store.data_dir", f.DataDir, wantDataDir, &s.DataDir)
	d.str("store.durability", f.Durability, wantDurability, &s.Durability)
	d.duration("store.flush_interval", f.FlushInterval, wantFlushInterval, &s.FlushInterval)
}

// decodeFile applies the keys present in data onto c. A TOML syntax error is returned as err and nothing else is
// reported; otherwise every unknown key and every value of the wrong form is returned in problems, and the keys
// with such values are left as they were in c.
func decodeFile(c *Config, data []byte) (problems []error, err error) {
	var f fileConfig
	md, err := toml.Decode(string(data), &f)
	if err != nil {
		return nil, explainSyntax(err, data)
	}
	d := &decoder{}
	if undecoded := md.Undecoded(); len(undecoded) > 0 {
		// The undecoded keys of an array of tables carry no index; the document as plain maps tells which
		// entries have them.
		var raw map[string]any
		if _, err := toml.Decode(string(data), &raw); err != nil {
			return nil, err
		}
		reported := make(map[string]bool)
		for _, key := range undecoded {
			d.problems = append(d.problems, unknownKey(key, raw, reported)...)
		}
	}
	f.applyTo(c, d)
	return d.problems, nil
}

// explainSyntax adds the likely fix to a TOML syntax error on a "key = value" line whose value is bare text: TOML
// reads 127.0.0.1:11211 as a malformed float and localhost:11211 as nothing, and says only that, where the fix is
// to quote the value. The error is returned unchanged otherwise (it keeps its type and line).
func explainSyntax(err error, data []byte) error {
	var pe toml.ParseError
	if !errors.As(err, &pe) || pe.Position.Line < 1 {
		return err
	}
	lines := strings.Split(string(data), "\n")
	if pe.Position.Line > len(lines) {
		return err
	}
	key, value, ok := strings.Cut(lines[pe.Position.Line-1], "=")
	key = strings.TrimSpace(key)
	if i := strings.Index(value, " #"); i >= 0 {
		value = value[:i]
	}
	value = strings.TrimSpace(value)
	if !ok || key == "" || value == "" || strings.ContainsAny(value[:1], "\"'[{") || strings.ContainsAny(value, "\"'") {
		return err
	}
	return fmt.Errorf("%w; a text value (an address, a path, a name) must be quoted: %s = %q", err, key, value)
}

// unknownKey explains an undecoded key: the first part of it that fileConfig does not have, and what is allowed
// in its place, once for every entry of an array of tables that has it ("sql.users[1].nmae"). It returns nothing
// for a part already reported (TOML lists a table and then each key in it) and for keys below an `any` leaf, whose
// value the decoder reports as being of the wrong type.
func unknownKey(key toml.Key, raw map[string]any, reported map[string]bool) []error {
	t := reflect.TypeFor[fileConfig]()
	where := "the top level"
	for i, part := range key {
		for t.Kind() == reflect.Slice {
			t = t.Elem()
		}
		if t.Kind() != reflect.Struct {
			return nil
		}
		f, ok := fieldByTag(t, part)
		if !ok {
			names := indexedKeys(raw, key[:i+1], "")
			if len(names) == 0 {
				names = []string{key[:i+1].String()}
			}
			var errs []error
			for _, name := range names {
				if reported[name] {
					continue
				}
				reported[name] = true
				errs = append(errs, fmt.Errorf("unknown key %s: %s allows %s", name, where, strings.Join(allowedKeys(t), ", ")))
			}
			return errs
		}
		t = f.Type
		where = "[" + key[:i+1].String() + "]"
		if t.Kind() == reflect.Slice {
			where = "[" + where + "]"
		}
	}
	return nil
}

// indexedKeys spells key as it occurs in the document v, with an index after every array of tables on the way,
// once per occurrence: sql.users.x in a file whose second and third [[sql.users]] have x is "sql.users[1].x" and
// "sql.users[2].x".
func indexedKeys(v any, key toml.Key, prefix string) []string {
	if len(key) == 0 {
		return []string{prefix}
	}
	var out []string
	switch v := v.(type) {
	case map[string]any:
		child, ok := v[key[0]]
		if !ok {
			return nil
		}
		name := toml.Key{key[0]}.String()
		if prefix != "" {
			name = prefix + "." + name
		}
		return indexedKeys(child, key[1:], name)
	case []map[string]any:
		for i, e := range v {
			out = append(out, indexedKeys(e, key, prefix+"["+strconv.Itoa(i)+"]")...)
		}
	case []any:
		for i, e := range v {
			out = append(out, indexedKeys(e, key, prefix+"["+strconv.Itoa(i)+"]")...)
		}
	}
	return out
}

func fieldByTag(t reflect.Type, name string) (reflect.StructField, bool) {
	for i := range t.NumField() {
		if f := t.Field(i); f.Tag.Get("toml") == name {
			return f, true
		}
	}
	return reflect.StructField{}, false
}

// allowedKeys lists the keys of a file struct as they are written in TOML: [section], [[array]] or key.
func allowedKeys(t reflect.Type) []string {
	var keys []string
	for i := range t.NumField() {
		f := t.Field(i)
		name := f.Tag.Get("toml")
		switch {
		case f.Type.Kind() == reflect.Struct:
			name = "[" + name + "]"
		case f.Type.Kind() == reflect.Slice && f.Type.Elem().Kind() == reflect.Struct:
			name = "[[" + name + "]]"
		}
		keys = append(keys, name)
	}
	return keys
}

// decoder converts raw TOML values to Config fields. Each method does nothing for nil (the key is absent); for a
// value of the wrong form it records a problem naming the key and what is allowed, and leaves dst alone.
type decoder struct {
	problems problems
}

func (d *decoder) str(key string, v any, want string, dst *string) {
	if v == nil {
		return
	}
	s, ok := v.(string)
	if !ok {
		d.problems.add(key, showTOML(v), want)
		return
	}
	*dst = s
}

// replicas accepts an array whose entries are each an address ("host:port" or a unix socket path; weight 1) or an
// inline table { address = "…", weight = N }; the two forms may be mixed. Every entry keeps its index, so Validate
// names the same replicas[i] as the file. An entry of the wrong form, or a table without a string address, is
// reported under the entry's own key ("groups[0].replicas[1]", where Validate reports addresses too, so the empty
// address it leaves is not reported again); a weight of the wrong form under ".weight"; an unknown key of a table
// as such. Addresses and weights are otherwise checked by Validate.
func (d *decoder) replicas(key string, v any, dst *[]Replica) {
	var entries []any
	switch v := v.(type) {
	case nil:
		return
	case []any:
		entries = v
	case []map[string]any: // written as [[groups.replicas]]
		for _, t := range v {
			entries = append(entries, t)
		}
	default:
		d.problems.add(key, showTOML(v), wantReplicas)
		return
	}
	out := make([]Replica, len(entries))
	for i, e := range entries {
		ekey := key + "[" + strconv.Itoa(i) + "]"
		r := &out[i]
		r.Weight = 1
		switch e := e.(type) {
		case string:
			r.Address = e
		case map[string]any:
			for _, k := range slices.Sorted(maps.Keys(e)) {
				switch k {
				case "address":
				case "weight":
					d.integer(ekey+".weight", e[k], wantWeight, &r.Weight)
				default:
					d.problems = append(d.problems, fmt.Errorf("unknown key %s.%s: a replica's table allows address, weight", ekey, k))
				}
			}
			switch a, ok := e["address"].(string); {
			case ok:
				r.Address = a
			case e["address"] == nil:
				d.problems.add(ekey, "a table without address", wantReplicas)
			default:
				d.problems.add(ekey, "{ address = "+showTOML(e["address"])+" }", wantReplicas)
			}
		default:
			d.problems.add(ekey, showTOML(e), wantReplicas)
		}
	}
	*dst = out
}

// columns accepts an array of strings, or one string of comma-separated names (as innodb_memcache's value_columns
// is written), where spaces around each name are dropped. An empty string is no columns, which Validate rejects.
func (d *decoder) columns(key string, v any, want string, dst *[]string) {
	var cols []string
	switch v := v.(type) {
	case nil:
		return
	case string:
		cols = []string{}
		if strings.TrimSpace(v) != "" {
			for _, c := range strings.Split(v, ",") {
				cols = append(cols, strings.TrimSpace(c))
			}
		}
	case []any:
		cols = make([]string, 0, len(v))
		for _, e := range v {
			s, ok := e.(string)
			if !ok {
				d.problems.add(key, showTOML(v), want+" (not "+showTOML(e)+")")
				return
			}
			cols = append(cols, s)
		}
	default:
		d.problems.add(key, showTOML(v), want)
		return
	}
	*dst = cols
}

func (d *decoder) boolean(key string, v any, want string, dst *bool) {
	if v == nil {
		return
	}
	b, ok := v.(bool)
	if !ok {
		d.problems.add(key, showTOML(v), want)
		return
	}
	*dst = b
}

func (d *decoder) integer(key string, v any, want string, dst *int) {
	if v == nil {
		return
	}
	n, ok := v.(int64)
	if !ok || n != int64(int(n)) {
		d.problems.add(key, showTOML(v), want)
		return
	}
	*dst = int(n)
}

// size accepts an integer in units of intUnit, or a string parsed by parseSize with the same unit for a bare number.
func (d *decoder) size(key string, v any, intUnit int64, want string, dst *int64) {
	var n int64
	ok := false
	switch v := v.(type) {
	case nil:
		return
	case int64:
		n, ok = multiply(v, intUnit)
	case string:
		n, ok = parseSize(v, intUnit)
	}
	if !ok {
		d.problems.add(key, showTOML(v), want)
		return
	}
	*dst = n
}

func (d *decoder) duration(key string, v any, want string, dst *time.Duration) {
	if v == nil {
		return
	}
	s, ok := v.(string)
	if !ok {
		d.problems.add(key, showTOML(v), want)
		return
	}
	t, err := time.ParseDuration(s)
	if err != nil {
		d.problems.add(key, showTOML(v), want)
		return
	}
	*dst = t
}

// showTOML shows a decoded TOML value in an error, close to how it was written.
func showTOML(v any) string {
	switch v := v.(type) {
	case string:
		return strconv.Quote(v)
	case map[string]any:
		return "a table"
	case []any, []map[string]any:
		return "an array"
	}
	return fmt.Sprint(v)
}

// parseSize parses a byte size as memcached's -I does, and a little more: a whole number, then optionally a unit.
// Units are case-insensitive and all powers of 1024: b; k, kb, kib; m, mb, mib; g, gb, gib. A bare number is in
// units of bare (1 for bytes, mib for megabytes). Callers say what is allowed, so it only reports ok.
func parseSize(s string, bare int64) (n int64, ok bool) {
	s = strings.TrimSpace(s)
	digits := 0
	for digits < len(s) && s[digits] >= '0' && s[digits] <= '9' {
		digits++
	}
	n, err := strconv.ParseInt(s[:digits], 10, 64)
	if err != nil {
		return 0, false
	}
	var unit int64
	switch strings.ToLower(strings.TrimSpace(s[digits:])) {
	case "":
		unit = bare
	case "b":
		unit = 1
	case "k", "kb", "kib":
		unit = kib
	case "m", "mb", "mib":
		unit = mib
	case "g", "gb", "gib":
		unit = gib
	default:
		return 0, false
	}
	return multiply(n, unit)
}

// multiply returns n*unit, or false if that overflows.
func multiply(n, unit int64) (int64, bool) {
	if n > math.MaxInt64/unit || n < math.MinInt64/unit {
		return 0, false
	}
	return n * unit, true
}
