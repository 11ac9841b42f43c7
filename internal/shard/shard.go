// Package shard is keyway's shard map: which group (a primary, optionally replicas) holds the row of a sharded table
// with a given shard key value, and which group holds the unsharded ("global") tables. The SQL door's router and the
// memcache door's containers consult it per statement or key; backend runs what they route on the group it names.
//
// A Map holds mappings; a Mapping has a Kind and shards; each sharded table belongs to one mapping and names its shard
// key column. The kinds:
//   - Hash and XXHash compute an 8-byte keyspace id from the value as Vitess's `hash` and `xxhash` vindexes do (see
//     hash.go), and each shard owns a half-open range of keyspace ids named as Vitess names shards: "-80", "80-",
//     "40-80", "-" (all).
//   - RangeInt and RangeString give each shard a half-open range [from, to) of the value itself (an int64, or a byte
//     string compared bytewise); either end may be open.
//
// Invariants:
//   - A Map is immutable once built (FromConfig, Load): every reader may use it without a lock, and a reload is one
//     Holder.Store of a new Map, so no lookup ever sees half of one map and half of another.
//   - A built Map is valid: the shards of a hash mapping cover the keyspace exactly once (no gap, no overlap); the
//     shards of a range mapping never overlap (gaps are allowed: a value in one is an error naming it, never a guess);
//     a table (schema, name) belongs to at most one mapping. An invalid form is an error from FromConfig or Load, and
//     the caller keeps the map it had.
//   - Lookups (Map.Table, Mapping.ShardOf, Table.ShardOf) do not allocate on success and take O(log shards).
//   - Versions only grow: Holder.Store refuses a different map with a version that does not exceed the current one.
package shard

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Kind is how a mapping turns a shard key value into a shard.
type Kind uint8

// The kinds of mapping.
const (
	// Hash is Vitess's `hash` vindex: the keyspace id is DES (all-zero key) over the value as a big-endian uint64.
	Hash Kind = iota + 1
	// XXHash is Vitess's `xxhash` vindex: the keyspace id is XXH64 (seed 0) of the value's text, little-endian.
	XXHash
	// RangeInt gives each shard a half-open range of int64 values.
	RangeInt
	// RangeString gives each shard a half-open range of byte strings (compared bytewise, as a binary collation).
	RangeString
)

// kindNames are the names the config and the keyway_shards tables use.
var kindNames = [...]string{Hash: "hash", XXHash: "xxhash", RangeInt: "range_int", RangeString: "range_string"}

// String is the kind's name as the config writes it ("hash", "xxhash", "range_int", "range_string").
func (k Kind) String() string {
	if int(k) < len(kindNames) && kindNames[k] != "" {
		return kindNames[k]
	}
	return "Kind(" + strconv.Itoa(int(k)) + ")"
}

// ParseKind is the Kind named s, as String writes it.
func ParseKind(s string) (Kind, error) {
	for k, name := range kindNames {
		if name != "" && name == s {
			return Kind(k), nil
		}
	}
	return 0, fmt.Errorf("unknown kind %q: want hash, xxhash, range_int or range_string", s)
}

// hashed reports whether the kind maps values to keyspace ids.
func (k Kind) hashed() bool { return k == Hash || k == XXHash }

// Map is one immutable shard map. Build it with FromConfig or Load; share it through a Holder.
type Map struct {
	// Version identifies this map: the keyway_shards map_version row, or the Holder's count for a config map. It
	// only grows from one stored map to the next.
	Version uint64
	// Global is the group of the unsharded tables (every table no mapping lists).
	Global string

	mappings []*Mapping
	exact    map[string]*Table // "schema\x00table" → table configured with its schema
	anyDB    map[string]*Table // "table" → table configured without a schema
}

// Mapping is a set of shards and the tables sharded by it.
type Mapping struct {
	Name   string
	Kind   Kind
	Shards []*Shard  // in range order
	Tables []*Table  // in the order configured
	starts []uint64  // hash kinds: Shards[i] owns keyspace ids from starts[i] up to starts[i+1] (or the end)
	ints   []intEnd  // RangeInt: Shards[i]'s from and to
	strs   []strEnds // RangeString: Shards[i]'s from and to
}

type intEnd struct {
	from, to         int64
	openFrom, openTo bool
}

type strEnds struct {
	from, to []byte
	openTo   bool // an open from is the empty string: every string is at least ""
}

// Shard is one shard of a mapping: its name, the group that holds it and its range.
type Shard struct {
	// Name is the shard's name: for hash kinds its keyspace range as Vitess names it ("-80", "80-c0", "-").
	Name string
	// Group is the [[groups]] entry holding the shard's rows.
	Group string
	// From and To are the range as configured, "" for an open end: hex keyspace ids for hash kinds, decimal
	// integers for RangeInt, the bytes for RangeString. From is inclusive, To exclusive.
	From, To string
}

// Range is the shard's range as SHOW KEYWAY SHARDS shows it: "-80" for a hash shard, "[10, 20)" or "[10, …)" for a
// range shard.
func (s *Shard) Range(k Kind) string {
	if k.hashed() {
		return s.From + "-" + s.To
	}
	show := func(v string) string {
		if k == RangeString {
			return strconv.Quote(v)
		}
		return v
	}
	from, to := "…", "…"
	if s.From != "" || k == RangeString {
		from = show(s.From)
	}
	if s.To != "" {
		to = show(s.To)
	}
	return "[" + from + ", " + to + ")"
}

// Table is a sharded table: its mapping and shard key column.
type Table struct {
	Schema  string // lower case; "" = the table of this name in any schema
	Name    string // lower case
	Column  string // the shard key column, lower case
	Scatter bool   // a statement without one shard may run on every shard of the mapping
	Mapping *Mapping
}

// String is "schema.table", or "table" for a table configured without a schema.
func (t *Table) String() string {
	if t.Schema == "" {
		return t.Name
	}
	return t.Schema + "." + t.Name
}

// maxName bounds the names Table looks up without allocating: MySQL names are at most 64 characters.
const maxName = 256

// Table returns the sharded table schema.table, or nil when the table is not sharded (a global table, on m.Global).
// Names compare case-insensitively (ASCII); a table configured without a schema matches it in any schema, and one
// configured with schema.table wins over it. It does not allocate.
func (m *Map) Table(schema, table string) *Table {
	if m == nil || len(table) > maxName || len(schema) > maxName {
		return nil
	}
	var buf [2*maxName + 1]byte
	n := lowerInto(buf[:], schema)
	buf[n] = 0
	n2 := lowerInto(buf[n+1:], table)
	if t := m.exact[string(buf[:n+1+n2])]; t != nil {
		return t
	}
	return m.anyDB[string(buf[n+1:n+1+n2])]
}

// lowerInto writes s in ASCII lower case into dst (which has room) and returns its length.
func lowerInto(dst []byte, s string) int {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		dst[i] = c
	}
	return len(s)
}

// Mappings returns the map's mappings in the order configured (by name for a map loaded from keyway_shards). The
// slice is the map's own: do not change it.
func (m *Map) Mappings() []*Mapping { return m.mappings }

// Mapping returns the mapping called name, or nil.
func (m *Map) Mapping(name string) *Mapping {
	for _, mp := range m.mappings {
		if mp.Name == name {
			return mp
		}
	}
	return nil
}

// Groups returns every group the map names, each once: the global group, then the shards' groups in mapping and
// shard order.
func (m *Map) Groups() []string {
	var out []string
	if m.Global != "" {
		out = append(out, m.Global)
	}
	for _, mp := range m.mappings {
		for _, s := range mp.Shards {
			if !slices.Contains(out, s.Group) {
				out = append(out, s.Group)
			}
		}
	}
	return out
}

// Groups returns the groups holding the mapping's shards, each once, in shard order: where DDL on its tables and a
// scatter run.
func (mp *Mapping) Groups() []string {
	var out []string
	for _, s := range mp.Shards {
		if !slices.Contains(out, s.Group) {
			out = append(out, s.Group)
		}
	}
	return out
}

// NoShardError is the error of a value no shard holds: in a gap between a range mapping's shards, or (for Hash and
// RangeInt) not an integer.
type NoShardError struct {
	Mapping  string
	Table    string // "schema.table" when the lookup came through Table.ShardOf, else ""
	Column   string
	Value    string
	IsString bool
	Reason   string // "" = no shard's range holds it; else why the value has no shard ("not an integer")
}

func (e *NoShardError) Error() string {
	v := e.Value
	if e.IsString {
		v = "'" + strings.ReplaceAll(v, "'", "''") + "'"
	}
	var b strings.Builder
	if e.Reason != "" {
		b.WriteString("cannot shard by ")
	} else {
		b.WriteString("no shard holds ")
	}
	if e.Column != "" {
		b.WriteString(e.Column + " = ")
	}
	b.WriteString(v)
	if e.Table != "" {
		b.WriteString(" of table " + e.Table)
	}
	b.WriteString(" in mapping " + e.Mapping)
	if e.Reason != "" {
		b.WriteString(": " + e.Reason)
	}
	return b.String()
}

// ErrNoShard matches every *NoShardError with errors.Is.
var ErrNoShard = errors.New("no shard holds the value")

// Is makes errors.Is(err, ErrNoShard) true.
func (e *NoShardError) Is(target error) bool { return target == ErrNoShard }

// ShardOf returns the shard holding value: the literal's text as the statement carries it (for a string, its
// content without quotes or escapes; for an integer, its decimal text), isString saying which. For Hash and
// RangeInt the value must be an integer (a string whose content is one counts, as MySQL compares it); for XXHash an
// integer is hashed as its canonical decimal text ("007" as "7"), a string as its bytes. A value no shard holds is a
// *NoShardError. It does not allocate on success.
func (mp *Mapping) ShardOf(value []byte, isString bool) (*Shard, error) {
	switch mp.Kind {
	case Hash:
		u, ok := parseUint64Bits(value)
		if !ok {
			return nil, mp.noShard(value, isString, "not an integer")
		}
		return mp.shardOfKeyspaceID(hashID(u)), nil
	case XXHash:
		if isString {
			return mp.shardOfKeyspaceID(xxhashID(value)), nil
		}
		id, ok := xxhashInteger(value)
		if !ok {
			return nil, mp.noShard(value, isString, "not an integer")
		}
		return mp.shardOfKeyspaceID(id), nil
	case RangeInt:
		v, ok := parseInt64(value)
		if !ok {
			return nil, mp.noShard(value, isString, "not an integer from -9223372036854775808 to 9223372036854775807")
		}
		// The last shard whose from is at most v (an open from is the least).
		i, _ := slices.BinarySearchFunc(mp.ints, v, func(e intEnd, v int64) int {
			if !e.openFrom && e.from > v {
				return 1
			}
			return -1
		})
		if i > 0 {
			if e := mp.ints[i-1]; e.openTo || v < e.to {
				return mp.Shards[i-1], nil
			}
		}
		return nil, mp.noShard(value, isString, "")
	case RangeString:
		i, _ := slices.BinarySearchFunc(mp.strs, value, func(e strEnds, v []byte) int {
			if bytes.Compare(e.from, v) > 0 {
				return 1
			}
			return -1
		})
		if i > 0 {
			if e := mp.strs[i-1]; e.openTo || bytes.Compare(value, e.to) < 0 {
				return mp.Shards[i-1], nil
			}
		}
		return nil, mp.noShard(value, isString, "")
	}
	return nil, mp.noShard(value, isString, "the mapping has no kind")
}

// shardOfKeyspaceID is the shard whose keyspace range holds id (the ranges cover every id).
func (mp *Mapping) shardOfKeyspaceID(id uint64) *Shard {
	i, _ := slices.BinarySearchFunc(mp.starts, id, func(start, id uint64) int {
		if start > id {
			return 1
		}
		return -1
	})
	return mp.Shards[i-1]
}

// KeyspaceID is the 8-byte keyspace id of value for a Hash or XXHash mapping, as a big-endian uint64 (so that
// numeric order is Vitess's byte order), with ShardOf's rules for value and isString.
func (k Kind) KeyspaceID(value []byte, isString bool) (uint64, error) {
	switch k {
	case Hash:
		if u, ok := parseUint64Bits(value); ok {
			return hashID(u), nil
		}
	case XXHash:
		if isString {
			return xxhashID(value), nil
		}
		if id, ok := xxhashInteger(value); ok {
			return id, nil
		}
	default:
		return 0, fmt.Errorf("a %s mapping has no keyspace ids", k)
	}
	return 0, fmt.Errorf("%q is not an integer", value)
}

func (mp *Mapping) noShard(value []byte, isString bool, reason string) error {
	return &NoShardError{Mapping: mp.Name, Value: string(value), IsString: isString, Reason: reason}
}

// ShardOf is Mapping.ShardOf for the table's shard key; a *NoShardError names the table and its column.
func (t *Table) ShardOf(value []byte, isString bool) (*Shard, error) {
	s, err := t.Mapping.ShardOf(value, isString)
	if err != nil {
		var ne *NoShardError
		if errors.As(err, &ne) {
			ne.Table, ne.Column = t.String(), t.Column
		}
		return nil, err
	}
	return s, nil
}

// Describe returns one row per shard for SHOW KEYWAY SHARDS: mapping, kind, shard, range, group and the mapping's
// tables ("app.users(id), orders(user_id)"; scatter tables marked "scatter"), then one row for the global group.
func (m *Map) Describe() [][]string {
	var rows [][]string
	for _, mp := range m.mappings {
		var tables []string
		for _, t := range mp.Tables {
			s := t.String() + "(" + t.Column + ")"
			if t.Scatter {
				s += " scatter"
			}
			tables = append(tables, s)
		}
		for _, s := range mp.Shards {
			rows = append(rows, []string{mp.Name, mp.Kind.String(), s.Name, s.Range(mp.Kind), s.Group, strings.Join(tables, ", ")})
		}
	}
	rows = append(rows, []string{"", "global", "", "", m.Global, "every other table"})
	return rows
}

// DescribeColumns are the column names of Describe's rows.
var DescribeColumns = []string{"mapping", "kind", "shard", "range", "group", "tables"}
