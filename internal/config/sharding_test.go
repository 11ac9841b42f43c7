package config

import (
	"reflect"
	"strings"
	"testing"

	"github.com/keywaydb/keyway/internal/shard"
)

// shardGroups is a file with four valid groups: main, s1, s2, s3.
const shardGroups = `
[[groups]]
name = "main"
primary = "10.0.0.1:3306"
user = "m"
[[groups]]
name = "s1"
primary = "10.0.0.2:3306"
user = "m"
[[groups]]
name = "s2"
primary = "10.0.0.3:3306"
user = "m"
[[groups]]
name = "s3"
primary = "10.0.0.4:3306"
user = "m"
`

func TestParseSharding(t *testing.T) {
	c, err := Parse([]byte(shardGroups + `
[[shard_maps]]
name = "users"
kind = "xxhash"
tables = [{ table = "app.users", column = "id" }, { table = "orders", column = "user_id", scatter = true }]
[[shard_maps.shards]]
name = "-80"
group = "s1"
[[shard_maps.shards]]
name = "80-"
group = "s2"

[[shard_maps]]
name = "accounts"
kind = "range_int"
[[shard_maps.tables]]
table = "app.accounts"
column = "id"
[[shard_maps.shards]]
name = "low"
group = "s1"
to = 1000
[[shard_maps.shards]]
name = "high"
group = "s3"
from = 1000

[[shard_maps]]
name = "names"
kind = "range_string"
tables = [{ table = "app.names", column = "name" }]
shards = [{ name = "a", group = "s1", to = "n" }, { name = "n", group = "s2", from = "n" }]
`))
	if err != nil {
		t.Fatal(err)
	}
	want := Sharding{Global: "main", Source: "config", Schema: "keyway_shards"}
	if c.Sharding != want {
		t.Errorf("sharding %+v, want %+v (global: the first group)", c.Sharding, want)
	}
	wantMaps := []ShardMap{
		{Name: "users", Kind: "xxhash", Tables: []ShardTable{{"app.users", "id", false}, {"orders", "user_id", true}},
			Shards: []ShardRange{{Name: "-80", Group: "s1"}, {Name: "80-", Group: "s2"}}},
		{Name: "accounts", Kind: "range_int", Tables: []ShardTable{{"app.accounts", "id", false}},
			Shards: []ShardRange{{Name: "low", Group: "s1", To: "1000"}, {Name: "high", Group: "s3", From: "1000"}}},
		{Name: "names", Kind: "range_string", Tables: []ShardTable{{"app.names", "name", false}},
			Shards: []ShardRange{{Name: "a", Group: "s1", To: "n"}, {Name: "n", Group: "s2", From: "n"}}},
	}
	if !reflect.DeepEqual(c.ShardMaps, wantMaps) {
		t.Errorf("shard maps\n%+v\nwant\n%+v", c.ShardMaps, wantMaps)
	}
	m, err := shard.FromConfig(c.ShardConfig())
	if err != nil {
		t.Fatal(err)
	}
	if s, err := m.Table("app", "accounts").ShardOf([]byte("999"), false); err != nil || s.Group != "s1" {
		t.Errorf("accounts 999: %v %v", s, err)
	}
	if got := m.Groups(); !reflect.DeepEqual(got, []string{"main", "s1", "s2", "s3"}) {
		t.Errorf("groups %v", got)
	}

	// Without shard maps sharding is off, and global stays unset.
	c, err = Parse([]byte(shardGroups))
	if err != nil || c.ShardingInUse() || c.Sharding.Global != "" {
		t.Errorf("no shard maps: in use %v, global %q, %v", c.ShardingInUse(), c.Sharding.Global, err)
	}
	// source = "table": the map is on the global group.
	c, err = Parse([]byte(shardGroups + "[sharding]\nsource = \"table\"\nglobal = \"s3\"\nschema = \"shards\"\n"))
	if err != nil || !c.ShardingInUse() || c.Sharding != (Sharding{Global: "s3", Source: "table", Schema: "shards"}) {
		t.Errorf("source table: %+v %v", c.Sharding, err)
	}
}

func TestShardingEveryProblemAtOnce(t *testing.T) {
	_, err := Parse([]byte(shardGroups + `
[sharding]
global = "nope"
schema = "a b"

[[shard_maps]]
name = "users"
kind = "hash"
tables = [{ table = "app.users", column = "id" }, { table = "a.b.c", column = "" }]
[[shard_maps.shards]]
name = "-80"
group = "s1"
[[shard_maps.shards]]
name = "40-"
group = "s9"

[[shard_maps]]
name = "users"
kind = "range"
tables = [{ table = "APP.USERS", column = "id" }]

[[shard_maps]]
name = "accounts"
kind = "range_int"
tables = [{ table = "app.accounts", column = "id" }]
shards = [{ name = "a", group = "s1", to = 100 }, { name = "b", group = "s2", from = 50 }, { name = "a", group = "s2" }]

[[shard_maps]]
name = "ok"
kind = "xxhash"
tables = [{ table = "t", column = "id" }]
shards = [{ name = "-", group = "s1", from = 1 }]
`))
	if err == nil {
		t.Fatal("no error")
	}
	want := []string{
		`sharding.schema = "a b": ` + wantShardSchema,
		`sharding.global = "nope": ` + wantShardGlobal + `: "main", "s1", "s2", "s3"`,
		`shard_maps[0].tables[1].table = "a.b.c": ` + wantShardTable,
		`shard_maps[0].tables[1].column = "": ` + wantShardColumn,
		`shard_maps[0].shards[1].group = "s9": ` + wantShardGroupRef + `: "main", "s1", "s2", "s3"`,
		`shard_maps[0].shards: shards -80 and 40- overlap`,
		`shard_maps[1].name = "users": ` + wantShardMapName + `; shard_maps[0] has it already`,
		`shard_maps[1].kind = "range": ` + wantShardKind,
		`shard_maps[1].tables[0].table = "APP.USERS": ` + wantShardTable + `; shard_maps[0].tables[0] has it already`,
		`shard_maps[1].shards = none: ` + wantShardShards,
		`shard_maps[2].shards[2].name = "a": ` + wantShardName,
		`shard_maps[3].shards[0].from = "1": ` + wantShardBound,
	}
	if got := strings.Split(err.Error(), "\n"); !reflect.DeepEqual(got, want) {
		t.Errorf("errors:\n%s\nwant\n%s", err, strings.Join(want, "\n"))
	}

	// Ranges are checked once the form is right.
	_, err = Parse([]byte(shardGroups + `
[[shard_maps]]
name = "accounts"
kind = "range_int"
tables = [{ table = "app.accounts", column = "id" }]
shards = [{ name = "a", group = "s1", to = 100 }, { name = "b", group = "s2", from = 50 }, { name = "c", group = "s2", from = "x" }]
[[shard_maps]]
name = "h"
kind = "hash"
tables = [{ table = "h", column = "id" }]
shards = [{ name = "-40", group = "s1" }, { name = "80-", group = "s2" }]
`))
	want = []string{
		`shard_maps[0].shards: shard c: from = "x": want an integer (a 64-bit signed integer), or none for an open end`,
		`shard_maps[1].shards: keyspace ids between shards -40 and 80- have no shard`,
	}
	if err == nil || !reflect.DeepEqual(strings.Split(err.Error(), "\n"), want) {
		t.Errorf("errors:\n%v\nwant\n%s", err, strings.Join(want, "\n"))
	}

	// Sharding needs groups; shard maps and source = "table" exclude each other.
	_, err = Parse([]byte("[sharding]\nsource = \"table\"\n"))
	if want := "groups = none: " + wantShardGroups; err == nil || err.Error() != want {
		t.Errorf("no groups: %v, want %s", err, want)
	}
	_, err = Parse([]byte(shardGroups + "[sharding]\nsource = \"tables\"\n"))
	if want := `sharding.source = "tables": ` + wantShardSource; err == nil || err.Error() != want {
		t.Errorf("bad source: %v, want %s", err, want)
	}
	_, err = Parse([]byte(shardGroups + "[sharding]\nsource = \"table\"\n" +
		"[[shard_maps]]\nname = \"u\"\nkind = \"hash\"\ntables = [{ table = \"u\", column = \"id\" }]\nshards = [{ name = \"-\", group = \"s1\" }]\n"))
	if want := `shard_maps = 1 entries: ` + wantShardMapsHere; err == nil || err.Error() != want {
		t.Errorf("maps with source table: %v, want %s", err, want)
	}
}

func TestShardingWrongTypesAndUnknownKeys(t *testing.T) {
	_, err := Parse([]byte(shardGroups + `
[sharding]
global = 1
[[shard_maps]]
name = "u"
kind = "range_int"
tables = [{ table = "u", column = "id", scatter = "yes", shard = 1 }]
shards = [{ name = "a", group = "s1", from = true, weight = 2 }]
`))
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{
		`unknown key shard_maps[0].tables[0].shard`,
		`unknown key shard_maps[0].shards[0].weight`,
		`sharding.global = 1: ` + wantShardGlobal,
		`shard_maps[0].tables[0].scatter = "yes": ` + wantBool,
		`shard_maps[0].shards[0].from = true: ` + wantShardBound,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("errors:\n%v\nwant a line with\n%s", err, want)
		}
	}
}
