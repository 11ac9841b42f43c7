package server

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/keywaydb/keyway/internal/config"
	"github.com/keywaydb/keyway/internal/shard"
	"github.com/keywaydb/keyway/internal/testenv"
)

// TestShardMapFromTables: with [sharding] source = "table", keyway loads the map from keyway_shards on the global
// group, routes the SQL door's statements by it, and reloads it when an operator edits the tables (the binlog
// follower sees the edit): rows written after the reload land where the new map says.
func TestShardMapFromTables(t *testing.T) {
	farm := testenv.NewShards(t, 2)
	global := openTestDB(t, farm.Global.RootDSN)
	for _, q := range shard.CreateSchemaSQL("") {
		if _, err := global.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	for _, q := range []string{
		"INSERT INTO keyway_shards.map_version VALUES (1, 1)",
		"INSERT INTO keyway_shards.mappings VALUES ('users', 'xxhash')",
		"INSERT INTO keyway_shards.shards VALUES ('users', '-', 's1', NULL, NULL)",
		"INSERT INTO keyway_shards.tables VALUES ('test', 'users', 'users', 'id', FALSE)",
	} {
		if _, err := global.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	shards := map[string]*testenv.MariaDB{}
	for i, m := range farm.Shards {
		shards["s"+strconv.Itoa(i+1)] = m
		if _, err := openTestDB(t, m.AppDSN).Exec("CREATE TABLE users (id BIGINT PRIMARY KEY, name VARCHAR(20))"); err != nil {
			t.Fatal(err)
		}
	}
	toml := fmt.Sprintf(`
[memcache]
listen = ""
[sql]
listen = "127.0.0.1:0"
[[sql.users]]
name = "app"
password = "secret"
%s[sharding]
global = "global"
source = "table"
`, farmGroups(farm, "binlog_user = \"root\"\n", ""))
	cfg, err := config.Parse([]byte(toml))
	if err != nil {
		t.Fatal(err)
	}
	s, err := Start(cfg, Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s.Stop(ctx)
	}()
	if v := s.ShardMapVersion(); v != 1 {
		t.Fatalf("map version %d at start, want 1", v)
	}
	if st := s.status().(Status); st.Shards == nil || st.Shards.Version != 1 || st.Shards.Source != "table" || len(st.Shards.Map) != 2 {
		t.Fatalf("/status shards: %+v", st.Shards)
	}
	db := openTestDB(t, fmt.Sprintf("app:secret@tcp(%s)/test", s.sqlLn.Addr()))
	on := func(id int) string {
		t.Helper()
		var at string
		for name, m := range shards {
			var n int
			if err := openTestDB(t, m.AppDSN).QueryRow("SELECT COUNT(*) FROM users WHERE id = ?", id).Scan(&n); err != nil {
				t.Fatal(err)
			}
			if n > 0 {
				if at != "" {
					t.Fatalf("user %d is on %s and %s", id, at, name)
				}
				at = name
			}
		}
		return at
	}
	for id := 1; id <= 5; id++ {
		if _, err := db.Exec("INSERT INTO users (id, name) VALUES (?, 'a')", id); err != nil {
			t.Fatal(err)
		}
		if at := on(id); at != "s1" {
			t.Fatalf("under map 1 user %d is on %q, want s1", id, at)
		}
	}
	// The operator splits the keyspace in one transaction that bumps the version.
	tx, err := global.Begin()
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		"DELETE FROM keyway_shards.shards WHERE mapping = 'users'",
		"INSERT INTO keyway_shards.shards VALUES ('users', '-80', 's1', NULL, NULL), ('users', '80-', 's2', NULL, NULL)",
		"UPDATE keyway_shards.map_version SET version = 2",
	} {
		if _, err := tx.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for s.ShardMapVersion() != 2 {
		if time.Now().After(deadline) {
			t.Fatalf("the map is still version %d after the edit", s.ShardMapVersion())
		}
		time.Sleep(50 * time.Millisecond)
	}
	m := s.shards.holder.Load()
	seen := map[string]bool{}
	for id := 100; id < 130; id++ {
		if _, err := db.Exec("INSERT INTO users (id, name) VALUES (?, 'b')", id); err != nil {
			t.Fatal(err)
		}
		sh, err := m.Table("test", "users").ShardOf([]byte(strconv.Itoa(id)), false)
		if err != nil {
			t.Fatal(err)
		}
		if at := on(id); at != sh.Group {
			t.Fatalf("under map 2 user %d is on %q, want %s", id, at, sh.Group)
		}
		seen[sh.Group] = true
	}
	if !seen["s1"] || !seen["s2"] {
		t.Fatalf("30 ids all on one shard under map 2: %v", seen)
	}
}

// TestShardMapConfigReload: a map in the config ([[shard_maps]]) is swapped on a reload (SIGHUP) when it changed,
// with the next version; one that does not build is refused and the running map stays.
func TestShardMapConfigReload(t *testing.T) {
	farm := testenv.NewShards(t, 2)
	for _, m := range farm.Shards {
		if _, err := openTestDB(t, m.AppDSN).Exec("CREATE TABLE users (id BIGINT PRIMARY KEY)"); err != nil {
			t.Fatal(err)
		}
	}
	file := func(shards string) string {
		return fmt.Sprintf(`
[memcache]
listen = ""
[sql]
listen = "127.0.0.1:0"
[[sql.users]]
name = "app"
password = "secret"
%s[[shard_maps]]
name = "users"
kind = "range_int"
tables = [{ table = "test.users", column = "id" }]
%s`, farmGroups(farm, "", ""), shards)
	}
	parse := func(text string) config.Config {
		t.Helper()
		cfg, err := config.Parse([]byte(text))
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	one := "[[shard_maps.shards]]\nname = \"all\"\ngroup = \"s1\"\n"
	s, err := Start(parse(file(one)), Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s.Stop(ctx)
	}()
	db := openTestDB(t, fmt.Sprintf("app:secret@tcp(%s)/test", s.sqlLn.Addr()))
	count := func(shard int, cond string) int {
		var n int
		if err := openTestDB(t, farm.Shards[shard].AppDSN).QueryRow("SELECT COUNT(*) FROM users WHERE " + cond).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if _, err := db.Exec("INSERT INTO users (id) VALUES (5), (500)"); err != nil {
		t.Fatal(err)
	}
	if count(0, "id IN (5, 500)") != 2 || s.ShardMapVersion() != 1 {
		t.Fatalf("under map 1: %d rows on s1, version %d", count(0, "id IN (5, 500)"), s.ShardMapVersion())
	}
	two := "[[shard_maps.shards]]\nname = \"low\"\ngroup = \"s1\"\nto = 100\n[[shard_maps.shards]]\nname = \"high\"\ngroup = \"s2\"\nfrom = 100\n"
	applied, restart, err := s.Reload(parse(file(two)))
	if err != nil || len(restart) != 0 || len(applied) == 0 {
		t.Fatalf("reload: applied %v, restart %v, %v", applied, restart, err)
	}
	if v := s.ShardMapVersion(); v != 2 {
		t.Fatalf("after the reload the map is version %d, want 2", v)
	}
	for _, q := range []string{"INSERT INTO users (id) VALUES (6)", "INSERT INTO users (id) VALUES (600)"} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	if count(0, "id = 6") != 1 || count(1, "id = 600") != 1 || count(0, "id = 600") != 0 {
		t.Fatal("after the reload, 6 is not on s1 or 600 not on s2")
	}
	// A map whose shards overlap does not build: the reload fails and version 2 stays.
	bad := "[[shard_maps.shards]]\nname = \"a\"\ngroup = \"s1\"\nto = 200\n[[shard_maps.shards]]\nname = \"b\"\ngroup = \"s2\"\nfrom = 100\n"
	if cfg, err := config.Parse([]byte(file(bad))); err == nil {
		if _, _, err := s.Reload(cfg); err == nil {
			t.Fatal("a reload with overlapping shards succeeded")
		}
	}
	if v := s.ShardMapVersion(); v != 2 {
		t.Fatalf("after the refused reload the map is version %d, want 2", v)
	}
}

// farmGroups is the [[groups]] of a keyway in front of farm: "global" on its global server, then "s1", "s2", … on
// its shards, each with the app account, and the TOML lines globalExtra and shardExtra added to the global group's
// table and to each shard group's.
func farmGroups(farm *testenv.Shards, globalExtra, shardExtra string) string {
	var b strings.Builder
	group := func(name, addr, extra string) {
		fmt.Fprintf(&b, "[[groups]]\nname = %q\nprimary = %q\nuser = \"app\"\npassword = \"secret\"\n%s", name, addr, extra)
	}
	group("global", farm.Global.Addr, globalExtra)
	for i, m := range farm.Shards {
		group("s"+strconv.Itoa(i+1), m.Addr, shardExtra)
	}
	return b.String()
}
