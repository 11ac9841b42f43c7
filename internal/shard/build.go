package shard

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// Config is a shard map in the form the config file ([sharding], [[shard_maps]]) and the keyway_shards tables give
// it; FromConfig checks it and builds the Map.
type Config struct {
	Version  uint64 // the map's version (0: the Holder gives it one, see Holder.Store)
	Global   string // the group of the unsharded tables
	Mappings []MappingConfig
	// Groups, when not nil, are the groups that exist: a shard on any other is an error. (The config checks its
	// own references; a map loaded from keyway_shards is checked against the configured groups here.)
	Groups []string
}

// MappingConfig is one [[shard_maps]] entry, or one row of keyway_shards.mappings with its shards and tables.
type MappingConfig struct {
	Name   string
	Kind   string // "hash", "xxhash", "range_int" or "range_string"
	Tables []TableConfig
	Shards []ShardConfig
}

// TableConfig is one sharded table of a mapping.
type TableConfig struct {
	Table   string // "schema.table", or "table" for the table of that name in any schema
	Column  string // the shard key column
	Scatter bool
}

// ShardConfig is one shard of a mapping.
type ShardConfig struct {
	// Name is the shard's name; for hash kinds it is also its keyspace range: "-80", "80-c0", "c0-", "-".
	Name  string
	Group string
	// From and To are a range kind's bounds ("" = open): decimal integers for range_int, the bytes for
	// range_string. From is inclusive, To exclusive. Hash kinds take the range from Name and leave them "".
	From, To string
}

// FromConfig checks c and builds its Map. It reports every problem at once (errors.Join), each naming the mapping
// and the shard or table it is about.
func FromConfig(c Config) (*Map, error) {
	m := &Map{
		Version: c.Version,
		Global:  c.Global,
		exact:   make(map[string]*Table),
		anyDB:   make(map[string]*Table),
	}
	var errs []error
	fail := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if c.Global == "" {
		fail("the global group is not set: name the group of the unsharded tables")
	} else if c.Groups != nil && !slices.Contains(c.Groups, c.Global) {
		fail("global group %q is not a configured group (%s)", c.Global, strings.Join(c.Groups, ", "))
	}
	owner := make(map[string]string) // table key → mapping
	for _, mc := range c.Mappings {
		mp := &Mapping{Name: mc.Name}
		if mc.Name == "" {
			fail("a mapping has no name")
		} else if m.Mapping(mc.Name) != nil {
			fail("mapping %s: the name is used twice", mc.Name)
		}
		kind, err := ParseKind(mc.Kind)
		if err != nil {
			fail("mapping %s: %v", mc.Name, err)
		}
		mp.Kind = kind
		for _, sc := range mc.Shards {
			if sc.Group == "" {
				fail("mapping %s, shard %s: no group", mc.Name, sc.Name)
			} else if c.Groups != nil && !slices.Contains(c.Groups, sc.Group) {
				fail("mapping %s, shard %s: group %q is not a configured group (%s)", mc.Name, sc.Name, sc.Group, strings.Join(c.Groups, ", "))
			}
		}
		if kind != 0 {
			for _, err := range mp.buildShards(mc.Shards) {
				fail("mapping %s, %v", mc.Name, err)
			}
		}
		for _, tc := range mc.Tables {
			t, err := newTable(tc, mp)
			if err != nil {
				fail("mapping %s, table %q: %v", mc.Name, tc.Table, err)
				continue
			}
			k := tableKey(t.Schema, t.Name)
			if other, dup := owner[k]; dup {
				if other == mc.Name {
					fail("mapping %s, table %s: listed twice", mc.Name, t)
				} else {
					fail("mapping %s, table %s: mapping %s has it already (a table has one mapping)", mc.Name, t, other)
				}
				continue
			}
			owner[k] = mc.Name
			mp.Tables = append(mp.Tables, t)
			if t.Schema == "" {
				m.anyDB[t.Name] = t
			} else {
				m.exact[k] = t
			}
		}
		m.mappings = append(m.mappings, mp)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return m, nil
}

func tableKey(schema, table string) string { return schema + "\x00" + table }

// newTable checks one table entry: "schema.table" or "table", and a column.
func newTable(tc TableConfig, mp *Mapping) (*Table, error) {
	name := strings.ToLower(tc.Table)
	schema, table, ok := strings.Cut(name, ".")
	if !ok {
		schema, table = "", name
	}
	switch {
	case table == "" || (ok && schema == "") || strings.Contains(table, "."):
		return nil, errors.New(`want "schema.table" or "table"`)
	case len(table) > maxName || len(schema) > maxName:
		return nil, errors.New("the name is too long")
	case tc.Column == "":
		return nil, errors.New("no shard key column")
	}
	return &Table{Schema: schema, Name: table, Column: strings.ToLower(tc.Column), Scatter: tc.Scatter, Mapping: mp}, nil
}

// buildShards checks the shards' ranges and fills mp.Shards (in range order) and the lookup arrays.
func (mp *Mapping) buildShards(shards []ShardConfig) []error {
	if len(shards) == 0 {
		return []error{errors.New("no shards")}
	}
	var errs []error
	names := make(map[string]bool)
	for _, sc := range shards {
		if sc.Name == "" {
			errs = append(errs, errors.New("a shard has no name"))
		} else if names[sc.Name] {
			errs = append(errs, fmt.Errorf("shard %s: the name is used twice", sc.Name))
		}
		names[sc.Name] = true
	}
	if len(errs) > 0 {
		return errs
	}
	switch {
	case mp.Kind.hashed():
		return mp.buildKeyspaceShards(shards)
	case mp.Kind == RangeInt:
		return mp.buildIntShards(shards)
	default:
		return mp.buildStringShards(shards)
	}
}

// keyspaceRange is a hash shard's range: [start, end), end open when !hasEnd.
type keyspaceRange struct {
	sc         ShardConfig
	start, end uint64
	hasEnd     bool
}

func (mp *Mapping) buildKeyspaceShards(shards []ShardConfig) []error {
	var errs []error
	var rs []keyspaceRange
	for _, sc := range shards {
		if sc.From != "" || sc.To != "" {
			errs = append(errs, fmt.Errorf("shard %s: a %s shard's range is its name (e.g. \"-80\", \"80-\"): leave from and to out", sc.Name, mp.Kind))
			continue
		}
		r, err := parseKeyspaceRange(sc.Name)
		if err != nil {
			errs = append(errs, fmt.Errorf("shard %s: %v", sc.Name, err))
			continue
		}
		r.sc = sc
		rs = append(rs, r)
	}
	if len(errs) > 0 {
		return errs
	}
	slices.SortStableFunc(rs, func(a, b keyspaceRange) int { return cmpUint(a.start, b.start) })
	// Exactly once: the first starts at 0, each ends where the next starts, the last is open.
	if rs[0].start != 0 {
		from, _, _ := strings.Cut(rs[0].sc.Name, "-")
		errs = append(errs, fmt.Errorf("keyspace ids below %s have no shard (the first shard starts the keyspace: \"-…\")", from))
	}
	// reach is how far the shards so far cover (open: to the end), and by whom it was reached.
	reach, open, by := rs[0].end, !rs[0].hasEnd, rs[0]
	for _, cur := range rs[1:] {
		switch {
		case open || reach > cur.start:
			errs = append(errs, fmt.Errorf("shards %s and %s overlap", by.sc.Name, cur.sc.Name))
		case reach < cur.start:
			errs = append(errs, fmt.Errorf("keyspace ids between shards %s and %s have no shard", by.sc.Name, cur.sc.Name))
		}
		if !open && (!cur.hasEnd || cur.end > reach) {
			reach, open, by = cur.end, !cur.hasEnd, cur
		}
	}
	if !open {
		_, to, _ := strings.Cut(by.sc.Name, "-")
		errs = append(errs, fmt.Errorf("keyspace ids from %s on have no shard (the last shard ends the keyspace: \"…-\")", to))
	}
	if len(errs) > 0 {
		return errs
	}
	for _, r := range rs {
		from, to, _ := strings.Cut(r.sc.Name, "-")
		s := &Shard{Name: r.sc.Name, Group: r.sc.Group, From: from, To: to}
		mp.Shards = append(mp.Shards, s)
		mp.starts = append(mp.starts, r.start)
	}
	return nil
}

// parseKeyspaceRange reads a Vitess shard name: "start-end" in hex, each side an even number of at most 16 digits
// or empty (open), start < end.
func parseKeyspaceRange(name string) (keyspaceRange, error) {
	from, to, ok := strings.Cut(name, "-")
	if !ok {
		return keyspaceRange{}, errors.New(`want a keyspace range as Vitess names shards: "-80", "80-c0", "c0-", or "-" for all`)
	}
	var r keyspaceRange
	var err error
	if r.start, err = parseKeyspaceBound(from); err != nil {
		return r, err
	}
	if to != "" {
		if r.end, err = parseKeyspaceBound(to); err != nil {
			return r, err
		}
		r.hasEnd = true
		if r.end <= r.start {
			return r, fmt.Errorf("the range is empty (%s is not below %s)", orZero(from), to)
		}
	}
	return r, nil
}

func orZero(s string) string {
	if s == "" {
		return "0"
	}
	return s
}

// parseKeyspaceBound reads hex digits as the first bytes of a keyspace id, the rest zero: "80" is 0x8000000000000000.
func parseKeyspaceBound(h string) (uint64, error) {
	if h == "" {
		return 0, nil
	}
	if len(h)%2 != 0 || len(h) > 16 {
		return 0, fmt.Errorf("%q: want whole bytes of a keyspace id, 2 to 16 hex digits", h)
	}
	v, err := strconv.ParseUint(h, 16, 64)
	if err != nil {
		return 0, fmt.Errorf("%q: want hex digits", h)
	}
	return v << (64 - 4*uint(len(h))), nil
}

func cmpUint(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

type intRange struct {
	sc ShardConfig
	e  intEnd
}

func (mp *Mapping) buildIntShards(shards []ShardConfig) []error {
	var errs []error
	var rs []intRange
	for _, sc := range shards {
		r := intRange{sc: sc}
		var ok bool
		if r.e.openFrom = sc.From == ""; !r.e.openFrom {
			if r.e.from, ok = parseInt64([]byte(strings.TrimSpace(sc.From))); !ok {
				errs = append(errs, fmt.Errorf("shard %s: from = %q: want an integer (a 64-bit signed integer), or none for an open end", sc.Name, sc.From))
				continue
			}
		}
		if r.e.openTo = sc.To == ""; !r.e.openTo {
			if r.e.to, ok = parseInt64([]byte(strings.TrimSpace(sc.To))); !ok {
				errs = append(errs, fmt.Errorf("shard %s: to = %q: want an integer (a 64-bit signed integer), or none for an open end", sc.Name, sc.To))
				continue
			}
		}
		if !r.e.openFrom && !r.e.openTo && r.e.to <= r.e.from {
			errs = append(errs, fmt.Errorf("shard %s: the range [%s, %s) is empty: from must be below to", sc.Name, sc.From, sc.To))
			continue
		}
		rs = append(rs, r)
	}
	if len(errs) > 0 {
		return errs
	}
	lowFrom := func(e intEnd) int64 {
		if e.openFrom {
			return math.MinInt64
		}
		return e.from
	}
	slices.SortStableFunc(rs, func(a, b intRange) int {
		switch {
		case a.e.openFrom && b.e.openFrom:
			return 0
		case a.e.openFrom:
			return -1
		case b.e.openFrom:
			return 1
		case a.e.from < b.e.from:
			return -1
		case a.e.from > b.e.from:
			return 1
		}
		return 0
	})
	for i := 1; i < len(rs); i++ {
		prev, cur := rs[i-1], rs[i]
		if cur.e.openFrom || prev.e.openTo || prev.e.to > lowFrom(cur.e) {
			errs = append(errs, fmt.Errorf("shards %s and %s overlap", prev.sc.Name, cur.sc.Name))
		}
	}
	if len(errs) > 0 {
		return errs
	}
	for _, r := range rs {
		mp.Shards = append(mp.Shards, &Shard{Name: r.sc.Name, Group: r.sc.Group, From: r.sc.From, To: r.sc.To})
		mp.ints = append(mp.ints, r.e)
	}
	return nil
}

type strRange struct {
	sc ShardConfig
	e  strEnds
}

func (mp *Mapping) buildStringShards(shards []ShardConfig) []error {
	var errs []error
	var rs []strRange
	for _, sc := range shards {
		r := strRange{sc: sc, e: strEnds{from: []byte(sc.From), to: []byte(sc.To), openTo: sc.To == ""}}
		if !r.e.openTo && bytes.Compare(r.e.to, r.e.from) <= 0 {
			errs = append(errs, fmt.Errorf("shard %s: the range [%q, %q) is empty: from must sort below to", sc.Name, sc.From, sc.To))
			continue
		}
		rs = append(rs, r)
	}
	if len(errs) > 0 {
		return errs
	}
	slices.SortStableFunc(rs, func(a, b strRange) int { return bytes.Compare(a.e.from, b.e.from) })
	for i := 1; i < len(rs); i++ {
		prev, cur := rs[i-1], rs[i]
		if prev.e.openTo || bytes.Compare(prev.e.to, cur.e.from) > 0 {
			errs = append(errs, fmt.Errorf("shards %s and %s overlap", prev.sc.Name, cur.sc.Name))
		}
	}
	if len(errs) > 0 {
		return errs
	}
	for _, r := range rs {
		mp.Shards = append(mp.Shards, &Shard{Name: r.sc.Name, Group: r.sc.Group, From: r.sc.From, To: r.sc.To})
		mp.strs = append(mp.strs, r.e)
	}
	return nil
}

// Equal reports whether m and o describe the same routing (versions aside): the same global group, and the same
// mappings with the same shards, groups, ranges and tables, in the same order.
func (m *Map) Equal(o *Map) bool {
	if m == nil || o == nil {
		return m == o
	}
	if m.Global != o.Global || len(m.mappings) != len(o.mappings) {
		return false
	}
	for i, a := range m.mappings {
		b := o.mappings[i]
		if a.Name != b.Name || a.Kind != b.Kind || len(a.Shards) != len(b.Shards) || len(a.Tables) != len(b.Tables) {
			return false
		}
		for j, s := range a.Shards {
			if *s != *b.Shards[j] {
				return false
			}
		}
		for j, t := range a.Tables {
			u := b.Tables[j]
			if t.Schema != u.Schema || t.Name != u.Name || t.Column != u.Column || t.Scatter != u.Scatter {
				return false
			}
		}
	}
	return true
}
