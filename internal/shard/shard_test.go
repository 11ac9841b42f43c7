package shard

import (
	"encoding/hex"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// ksid formats a keyspace id as Vitess prints it: its 8 bytes in hex.
func ksid(id uint64) string { return fmt.Sprintf("%016x", id) }

// TestHashVectors: Vitess's `hash` vindex (go/vt/vtgate/vindexes/hash_test.go TestHashMap, and the documented
// 1 → 166b40b44aba4bd6, 29999 → fcd63e56d3374d88).
func TestHashVectors(t *testing.T) {
	// hash_test.go writes the ids as Go strings; these are their bytes.
	vitess := map[string]string{
		"1": "\x16k@\xb4J\xbaK\xd6",
		"2": "\x06\xe7\xea\"Βp\x8f",
		"3": "N\xb1\x90ɢ\xfa\x16\x9c",
		"4": "\xd2\xfd\x88g\xd5\r-\xfe",
		"5": "p\xbb\x02<\x81\f\xa8z",
		"6": "\xf0\x98H\n\xc4ľq",
	}
	for in, want := range vitess {
		got, err := Hash.KeyspaceID([]byte(in), false)
		if err != nil || ksid(got) != hex.EncodeToString([]byte(want)) {
			t.Errorf("hash(%s) = %s (%v), want %x", in, ksid(got), err, want)
		}
	}
	for _, c := range []struct{ in, want string }{
		{"1", "166b40b44aba4bd6"},
		{"29999", "fcd63e56d3374d88"},
		{"0001", "166b40b44aba4bd6"},                      // the integer, not its text
		{"-1", ksid(hashID(18446744073709551615))},        // a negative int64 is its two's complement bits, as Vitess
		{"18446744073709551615", ksid(hashID(1<<64 - 1))}, // unsigned values up to 2^64-1
	} {
		for _, isString := range []bool{false, true} { // '29999' shards as 29999
			got, err := Hash.KeyspaceID([]byte(c.in), isString)
			if err != nil || ksid(got) != c.want {
				t.Errorf("hash(%s, string %v) = %s (%v), want %s", c.in, isString, ksid(got), err, c.want)
			}
		}
	}
	for _, in := range []string{"", "abc", "1.5", "18446744073709551616", "-9223372036854775809", "--1", "1e3"} {
		if _, err := Hash.KeyspaceID([]byte(in), true); err == nil {
			t.Errorf("hash(%q): no error", in)
		}
	}
}

// TestXXHashVectors: Vitess's `xxhash` vindex (go/vt/vtgate/vindexes/xxhash_test.go TestXXHashMap).
func TestXXHashVectors(t *testing.T) {
	for _, c := range []struct {
		in       string
		isString bool
		want     string
	}{
		{"test1", true, "d01ab7e4d6978f0b"},
		{"test2", true, "87eb11714c0a0e89"},
		{"testaverylongvaluetomakesurethisworks", true, "81d8c38e0d850e6a"},
		{"1", false, "d46405367612b4b7"},
		{"", true, "99e9d85137db46ef"}, // Vitess's NULL hashes the empty text
		{"-1", false, "d8e2a6a7c8c7623d"},
		{"18446744073709551615", false, "477cfa8d6d8f1f8d"},
		{"9223372036854775807", false, "b37eb01f7bffafd8"},
		{"-9223372036854775808", false, "102c27ddb26a609e"},
		// An integer is hashed as its canonical decimal text; a string as its bytes.
		{"0001", false, "d46405367612b4b7"},
		{"1", true, "d46405367612b4b7"},
		{"0001", true, ksid(xxhashID([]byte("0001")))},
	} {
		got, err := XXHash.KeyspaceID([]byte(c.in), c.isString)
		if err != nil || ksid(got) != c.want {
			t.Errorf("xxhash(%q, string %v) = %s (%v), want %s", c.in, c.isString, ksid(got), err, c.want)
		}
	}
	if _, err := XXHash.KeyspaceID([]byte("1.5"), false); err == nil {
		t.Error("xxhash of the integer 1.5: no error")
	}
}

func mustMap(t testing.TB, c Config) *Map {
	t.Helper()
	m, err := FromConfig(c)
	if err != nil {
		t.Fatalf("FromConfig: %v", err)
	}
	return m
}

// testConfig has one mapping of each kind.
func testConfig() Config {
	return Config{
		Global: "g0",
		Mappings: []MappingConfig{
			{Name: "users", Kind: "hash", Tables: []TableConfig{{Table: "app.users", Column: "id"}, {Table: "App.Orders", Column: "User_ID", Scatter: true}},
				Shards: []ShardConfig{{Name: "80-c0", Group: "g3"}, {Name: "-40", Group: "g1"}, {Name: "c0-", Group: "g1"}, {Name: "40-80", Group: "g2"}}},
			{Name: "events", Kind: "xxhash", Tables: []TableConfig{{Table: "events", Column: "id"}},
				Shards: []ShardConfig{{Name: "-80", Group: "g1"}, {Name: "80-", Group: "g2"}}},
			{Name: "accounts", Kind: "range_int", Tables: []TableConfig{{Table: "app.accounts", Column: "id"}},
				Shards: []ShardConfig{{Name: "high", Group: "g3", From: "200"}, {Name: "low", Group: "g1", To: "0"}, {Name: "mid", Group: "g2", From: "0", To: "100"}}},
			{Name: "names", Kind: "range_string", Tables: []TableConfig{{Table: "app.names", Column: "name"}},
				Shards: []ShardConfig{{Name: "a-m", Group: "g1", To: "n"}, {Name: "n-", Group: "g2", From: "n"}}},
		},
	}
}

func TestShardOf(t *testing.T) {
	m := mustMap(t, testConfig())
	for _, c := range []struct {
		mapping, value string
		isString       bool
		want           string // shard name, or "error: …"
	}{
		{"users", "1", false, "-40"},     // 16…
		{"users", "29999", false, "c0-"}, // fc…
		{"users", "2", false, "-40"},     // 06…
		{"users", "3", false, "40-80"},   // 4e…
		{"users", "4", false, "c0-"},     // d2…
		{"users", "5", false, "40-80"},   // 70…
		{"users", "x", true, "error: cannot shard by 'x' in mapping users: not an integer"},
		{"events", "test1", true, "80-"}, // d0…
		{"events", "-1", false, "80-"},   // d8…
		{"events", "9223372036854775807", false, "80-"},
		{"events", "-9223372036854775808", false, "-80"}, // 10…
		{"accounts", "-9223372036854775808", false, "low"},
		{"accounts", "-1", false, "low"},
		{"accounts", "0", false, "mid"},
		{"accounts", "99", true, "mid"},
		{"accounts", "100", false, "error: no shard holds 100 in mapping accounts"},
		{"accounts", "199", false, "error: no shard holds 199 in mapping accounts"},
		{"accounts", "200", false, "high"},
		{"accounts", "9223372036854775807", false, "high"},
		{"accounts", "9223372036854775808", false, "error: cannot shard by 9223372036854775808 in mapping accounts: not an integer from -9223372036854775808 to 9223372036854775807"},
		{"accounts", "1.5", false, "error: cannot shard by 1.5 in mapping accounts: not an integer from -9223372036854775808 to 9223372036854775807"},
		{"names", "", true, "a-m"},
		{"names", "mzzz", true, "a-m"},
		{"names", "n", true, "n-"},
		{"names", "\xff", true, "n-"},
		{"names", "12", false, "a-m"},
	} {
		s, err := m.Mapping(c.mapping).ShardOf([]byte(c.value), c.isString)
		got := ""
		if err != nil {
			got = "error: " + err.Error()
			if !errors.Is(err, ErrNoShard) {
				t.Errorf("%s %q: %v is not ErrNoShard", c.mapping, c.value, err)
			}
		} else {
			got = s.Name
		}
		if got != c.want {
			t.Errorf("%s.ShardOf(%q, %v) = %s, want %s", c.mapping, c.value, c.isString, got, c.want)
		}
	}

	// Through a table the error names the table and column.
	_, err := m.Table("app", "accounts").ShardOf([]byte("150"), false)
	if want := "no shard holds id = 150 of table app.accounts in mapping accounts"; err == nil || err.Error() != want {
		t.Errorf("table ShardOf in a gap: %v, want %s", err, want)
	}
	_, err = m.Table("app", "names").ShardOf([]byte("it's"), true)
	if err != nil {
		t.Errorf("names: %v", err)
	}
	low := mustMap(t, Config{Global: "g", Mappings: []MappingConfig{{Name: "n", Kind: "range_string", Tables: []TableConfig{{Table: "t", Column: "c"}},
		Shards: []ShardConfig{{Name: "b", Group: "g", From: "b"}}}}})
	_, err = low.Table("x", "t").ShardOf([]byte("a'b"), true)
	if want := "no shard holds c = 'a''b' of table t in mapping n"; err == nil || err.Error() != want {
		t.Errorf("string below the first shard: %v, want %s", err, want)
	}
}

// TestShardOfAgreesWithKeyspaceRanges: for many values, the shard ShardOf picks is the one whose keyspace range
// holds the value's keyspace id as a byte string.
func TestShardOfAgreesWithKeyspaceRanges(t *testing.T) {
	m := mustMap(t, testConfig())
	for _, name := range []string{"users", "events"} {
		mp := m.Mapping(name)
		for i := -1000; i < 5000; i++ {
			v := []byte(strconv.Itoa(i))
			s, err := mp.ShardOf(v, false)
			if err != nil {
				t.Fatal(err)
			}
			id, _ := mp.Kind.KeyspaceID(v, false)
			h := ksid(id)
			if (s.From != "" && h < s.From) || (s.To != "" && h >= s.To) {
				t.Fatalf("%s: %d (keyspace id %s) went to shard %s", name, i, h, s.Name)
			}
		}
	}
}

func TestTable(t *testing.T) {
	m := mustMap(t, testConfig())
	for _, c := range []struct {
		schema, table string
		want          string // mapping.column, or "" for global
	}{
		{"app", "users", "users.id"},
		{"APP", "Users", "users.id"},
		{"other", "users", ""},
		{"", "users", ""},
		{"app", "orders", "users.user_id"},
		{"app", "events", "events.id"},
		{"anything", "EVENTS", "events.id"},
		{"", "events", "events.id"},
		{"app", "nothing", ""},
	} {
		got := ""
		if tb := m.Table(c.schema, c.table); tb != nil {
			got = tb.Mapping.Name + "." + tb.Column
		}
		if got != c.want {
			t.Errorf("Table(%q, %q) = %q, want %q", c.schema, c.table, got, c.want)
		}
	}
	// schema.table wins over the same name configured without a schema.
	m2 := mustMap(t, Config{Global: "g", Mappings: []MappingConfig{
		{Name: "a", Kind: "hash", Tables: []TableConfig{{Table: "t", Column: "x"}}, Shards: []ShardConfig{{Name: "-", Group: "g"}}},
		{Name: "b", Kind: "hash", Tables: []TableConfig{{Table: "s.t", Column: "y"}}, Shards: []ShardConfig{{Name: "-", Group: "g"}}},
	}})
	if tb := m2.Table("s", "t"); tb == nil || tb.Mapping.Name != "b" {
		t.Errorf("s.t: %v, want mapping b", tb)
	}
	if tb := m2.Table("r", "t"); tb == nil || tb.Mapping.Name != "a" {
		t.Errorf("r.t: %v, want mapping a", tb)
	}
	if tb := m2.Table("s", strings.Repeat("x", 1000)); tb != nil {
		t.Errorf("a very long name: %v", tb)
	}
	if got := m.Table("app", "orders"); !got.Scatter || got.String() != "app.orders" {
		t.Errorf("app.orders: scatter %v, %s", got.Scatter, got)
	}
}

func TestGroupsAndDescribe(t *testing.T) {
	m := mustMap(t, testConfig())
	if got, want := m.Groups(), []string{"g0", "g1", "g2", "g3"}; !reflect.DeepEqual(got, want) {
		t.Errorf("Map.Groups() = %v, want %v", got, want)
	}
	if got, want := m.Mapping("users").Groups(), []string{"g1", "g2", "g3"}; !reflect.DeepEqual(got, want) {
		t.Errorf("users.Groups() = %v, want %v (shard order: -40 g1, 40-80 g2, 80-c0 g3, c0- g1)", got, want)
	}
	var names []string
	for _, s := range m.Mapping("users").Shards {
		names = append(names, s.Name)
	}
	if want := []string{"-40", "40-80", "80-c0", "c0-"}; !reflect.DeepEqual(names, want) {
		t.Errorf("users shards %v, want %v", names, want)
	}
	want := [][]string{
		{"users", "hash", "-40", "-40", "g1", "app.users(id), app.orders(user_id) scatter"},
		{"users", "hash", "40-80", "40-80", "g2", "app.users(id), app.orders(user_id) scatter"},
		{"users", "hash", "80-c0", "80-c0", "g3", "app.users(id), app.orders(user_id) scatter"},
		{"users", "hash", "c0-", "c0-", "g1", "app.users(id), app.orders(user_id) scatter"},
		{"events", "xxhash", "-80", "-80", "g1", "events(id)"},
		{"events", "xxhash", "80-", "80-", "g2", "events(id)"},
		{"accounts", "range_int", "low", "[…, 0)", "g1", "app.accounts(id)"},
		{"accounts", "range_int", "mid", "[0, 100)", "g2", "app.accounts(id)"},
		{"accounts", "range_int", "high", "[200, …)", "g3", "app.accounts(id)"},
		{"names", "range_string", "a-m", `["", "n")`, "g1", "app.names(name)"},
		{"names", "range_string", "n-", `["n", …)`, "g2", "app.names(name)"},
		{"", "global", "", "", "g0", "every other table"},
	}
	if got := m.Describe(); !reflect.DeepEqual(got, want) {
		t.Errorf("Describe:\n%q\nwant\n%q", got, want)
	}
}

func TestFromConfigErrors(t *testing.T) {
	one := func(kind string, shards ...ShardConfig) Config {
		return Config{Global: "g", Mappings: []MappingConfig{{Name: "m", Kind: kind, Tables: []TableConfig{{Table: "a.t", Column: "id"}}, Shards: shards}}}
	}
	for _, c := range []struct {
		name string
		c    Config
		want string
	}{
		{"no global", Config{}, "the global group is not set: name the group of the unsharded tables"},
		{"unknown global", Config{Global: "x", Groups: []string{"g"}}, `global group "x" is not a configured group (g)`},
		{"unknown kind", one("range"), "mapping m: unknown kind \"range\": want hash, xxhash, range_int or range_string"},
		{"no shards", one("hash"), "mapping m, no shards"},
		{"gap", one("hash", ShardConfig{Name: "-40", Group: "g"}, ShardConfig{Name: "80-", Group: "g"}),
			"mapping m, keyspace ids between shards -40 and 80- have no shard"},
		{"overlap", one("xxhash", ShardConfig{Name: "-80", Group: "g"}, ShardConfig{Name: "40-", Group: "g"}),
			"mapping m, shards -80 and 40- overlap"},
		{"no start", one("hash", ShardConfig{Name: "40-", Group: "g"}),
			`mapping m, keyspace ids below 40 have no shard (the first shard starts the keyspace: "-…")`},
		{"no end", one("hash", ShardConfig{Name: "-80", Group: "g"}),
			`mapping m, keyspace ids from 80 on have no shard (the last shard ends the keyspace: "…-")`},
		{"bad name", one("hash", ShardConfig{Name: "shard1", Group: "g"}),
			`mapping m, shard shard1: want a keyspace range as Vitess names shards: "-80", "80-c0", "c0-", or "-" for all`},
		{"odd digits", one("hash", ShardConfig{Name: "-8", Group: "g"}, ShardConfig{Name: "8-", Group: "g"}),
			"mapping m, shard -8: \"8\": want whole bytes of a keyspace id, 2 to 16 hex digits\n" +
				"mapping m, shard 8-: \"8\": want whole bytes of a keyspace id, 2 to 16 hex digits"},
		{"empty keyspace range", one("hash", ShardConfig{Name: "80-40", Group: "g"}), "mapping m, shard 80-40: the range is empty (80 is not below 40)"},
		{"hash with from", one("hash", ShardConfig{Name: "-", Group: "g", From: "1"}),
			`mapping m, shard -: a hash shard's range is its name (e.g. "-80", "80-"): leave from and to out`},
		{"int overlap", one("range_int", ShardConfig{Name: "a", Group: "g", To: "10"}, ShardConfig{Name: "b", Group: "g", From: "5", To: "20"}),
			"mapping m, shards a and b overlap"},
		{"int two open starts", one("range_int", ShardConfig{Name: "a", Group: "g", To: "10"}, ShardConfig{Name: "b", Group: "g", To: "20"}),
			"mapping m, shards a and b overlap"},
		{"int open end overlaps", one("range_int", ShardConfig{Name: "a", Group: "g", From: "10"}, ShardConfig{Name: "b", Group: "g", From: "20"}),
			"mapping m, shards a and b overlap"},
		{"int not a number", one("range_int", ShardConfig{Name: "a", Group: "g", From: "x"}),
			`mapping m, shard a: from = "x": want an integer (a 64-bit signed integer), or none for an open end`},
		{"int empty", one("range_int", ShardConfig{Name: "a", Group: "g", From: "10", To: "10"}),
			"mapping m, shard a: the range [10, 10) is empty: from must be below to"},
		{"string overlap", one("range_string", ShardConfig{Name: "a", Group: "g", To: "n"}, ShardConfig{Name: "b", Group: "g", From: "m"}),
			"mapping m, shards a and b overlap"},
		{"string empty", one("range_string", ShardConfig{Name: "a", Group: "g", From: "n", To: "a"}),
			`mapping m, shard a: the range ["n", "a") is empty: from must sort below to`},
		{"duplicate shard", one("range_int", ShardConfig{Name: "a", Group: "g"}, ShardConfig{Name: "a", Group: "g"}),
			"mapping m, shard a: the name is used twice"},
		{"no group", one("hash", ShardConfig{Name: "-"}), "mapping m, shard -: no group"},
		{"unknown group", Config{Global: "g", Groups: []string{"g", "h"}, Mappings: []MappingConfig{{Name: "m", Kind: "hash", Shards: []ShardConfig{{Name: "-", Group: "x"}}}}},
			`mapping m, shard -: group "x" is not a configured group (g, h)`},
		{"table in two mappings", Config{Global: "g", Mappings: []MappingConfig{
			{Name: "a", Kind: "hash", Tables: []TableConfig{{Table: "s.t", Column: "x"}}, Shards: []ShardConfig{{Name: "-", Group: "g"}}},
			{Name: "b", Kind: "hash", Tables: []TableConfig{{Table: "S.T", Column: "y"}}, Shards: []ShardConfig{{Name: "-", Group: "g"}}},
		}}, "mapping b, table s.t: mapping a has it already (a table has one mapping)"},
		{"duplicate mapping", Config{Global: "g", Mappings: []MappingConfig{
			{Name: "a", Kind: "hash", Shards: []ShardConfig{{Name: "-", Group: "g"}}},
			{Name: "a", Kind: "hash", Shards: []ShardConfig{{Name: "-", Group: "g"}}},
		}}, "mapping a: the name is used twice"},
		{"bad table", Config{Global: "g", Mappings: []MappingConfig{{Name: "a", Kind: "hash", Tables: []TableConfig{{Table: "a.b.c", Column: "x"}, {Table: "t"}},
			Shards: []ShardConfig{{Name: "-", Group: "g"}}}}},
			"mapping a, table \"a.b.c\": want \"schema.table\" or \"table\"\nmapping a, table \"t\": no shard key column"},
	} {
		_, err := FromConfig(c.c)
		if err == nil || err.Error() != c.want {
			t.Errorf("%s: FromConfig error\n%v\nwant\n%s", c.name, err, c.want)
		}
	}
}

func TestNoAllocations(t *testing.T) {
	m := mustMap(t, testConfig())
	cases := []struct {
		mapping, value string
		isString       bool
	}{{"users", "12345", false}, {"events", "12345", false}, {"events", "some-key", true}, {"accounts", "42", false}, {"names", "smith", true}}
	for _, c := range cases {
		mp, v := m.Mapping(c.mapping), []byte(c.value)
		if n := testing.AllocsPerRun(100, func() {
			if _, err := mp.ShardOf(v, c.isString); err != nil {
				t.Fatal(err)
			}
		}); n != 0 {
			t.Errorf("%s ShardOf allocates %v times", c.mapping, n)
		}
	}
	if n := testing.AllocsPerRun(100, func() {
		if m.Table("App", "Users") == nil || m.Table("x", "events") == nil || m.Table("app", "global") != nil {
			t.Fatal("wrong table")
		}
	}); n != 0 {
		t.Errorf("Table allocates %v times", n)
	}
}

func TestHolder(t *testing.T) {
	var h Holder
	if h.Load() != nil {
		t.Fatal("an empty Holder has a map")
	}
	c := testConfig()
	a := mustMap(t, c)
	if ok, err := h.Store(a); !ok || err != nil || h.Load().Version != 1 || a.Version != 0 {
		t.Fatalf("first config map: %v %v, version %d (the stored map is a copy: %d)", ok, err, h.Load().Version, a.Version)
	}
	// The same map again (a SIGHUP that changed nothing): kept, version and all.
	first := h.Load()
	if ok, err := h.Store(mustMap(t, c)); ok || err != nil || h.Load() != first {
		t.Fatalf("an identical map: swapped %v, %v", ok, err)
	}
	c.Mappings[2].Shards[2].To = "150"
	if ok, err := h.Store(mustMap(t, c)); !ok || err != nil || h.Load().Version != 2 {
		t.Fatalf("a changed config map: %v %v, version %d, want 2", ok, err, h.Load().Version)
	}
	// Versions from the data must grow with a change.
	c.Version = 2
	c.Mappings[2].Shards[2].To = "160"
	if ok, err := h.Store(mustMap(t, c)); ok || err == nil ||
		err.Error() != "shard map version 2 changes the map of version 2 without a higher version: bump map_version with the change" {
		t.Fatalf("a changed map with the same version: %v %v", ok, err)
	}
	c.Version = 7
	if ok, err := h.Store(mustMap(t, c)); !ok || err != nil || h.Load().Version != 7 {
		t.Fatalf("version 7: %v %v", ok, err)
	}
	c.Version = 8 // the same map, version bumped alone: stored
	if ok, err := h.Store(mustMap(t, c)); !ok || err != nil || h.Load().Version != 8 {
		t.Fatalf("version 8, same map: %v %v", ok, err)
	}
	c.Version = 8 // the same map and version: kept
	if ok, err := h.Store(mustMap(t, c)); ok || err != nil {
		t.Fatalf("version 8 again: %v %v", ok, err)
	}
}

// TestHolderSwap: readers route while a writer swaps maps; every lookup sees one whole map (run with -race).
func TestHolderSwap(t *testing.T) {
	// Two maps that send accounts 0…99 to different groups: map version v routes every value to group "gv".
	mk := func(v uint64) *Map {
		g := "g" + strconv.FormatUint(v%2, 10)
		return mustMap(t, Config{Version: v, Global: g, Mappings: []MappingConfig{{Name: "a", Kind: "range_int",
			Tables: []TableConfig{{Table: "app.accounts", Column: "id"}},
			Shards: []ShardConfig{{Name: "low", Group: g, To: "50"}, {Name: "high", Group: g, From: "50"}}}}})
	}
	var h Holder
	if _, err := h.Store(mk(1)); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for r := 0; r < 4; r++ {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				m := h.Load()
				s, err := m.Table("app", "accounts").ShardOf([]byte(strconv.Itoa(i%100)), false)
				if err != nil || s.Group != m.Global {
					t.Errorf("version %d: shard %v (%v), want group %s", m.Version, s, err, m.Global)
					return
				}
			}
		})
	}
	for v := uint64(2); v < 500; v++ {
		if ok, err := h.Store(mk(v)); !ok || err != nil {
			t.Fatalf("store version %d: %v %v", v, ok, err)
		}
	}
	close(stop)
	wg.Wait()
	if h.Load().Version != 499 {
		t.Fatalf("version %d, want 499", h.Load().Version)
	}
}

func BenchmarkShardOf(b *testing.B) {
	m := mustMap(b, testConfig())
	for _, c := range []struct {
		name, mapping, value string
		isString             bool
	}{
		{"hash", "users", "1234567", false},
		{"xxhash/int", "events", "1234567", false},
		{"xxhash/string", "events", "user:1234567", true},
		{"range_int", "accounts", "42", false},
		{"range_string", "names", "smith", true},
	} {
		mp, v := m.Mapping(c.mapping), []byte(c.value)
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := mp.ShardOf(v, c.isString); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	b.Run("table", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if m.Table("app", "users") == nil {
				b.Fatal("no table")
			}
		}
	})
}
