package server

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bradfitz/gomemcache/memcache"

	"github.com/keywaydb/keyway/internal/config"
	"github.com/keywaydb/keyway/internal/shard"
	"github.com/keywaydb/keyway/internal/testenv"
)

// shardedContainersTOML is a keyway with the memcache door, a global group and two shard groups, and three
// containers on sharded tables: kv (xxhash by its string key, write = "sync"), nums (hash: keys must be integers)
// and wb (range_int, write = "async"). Placeholder: the farm's groups (farmGroups).
const shardedContainersTOML = `
[memcache]
listen = "127.0.0.1:0"
[sql]
listen = ""
%s[sharding]
global = "global"
[[shard_maps]]
name = "kv"
kind = "xxhash"
tables = [{ table = "test.kv", column = "k" }]
shards = [{ name = "-80", group = "s1" }, { name = "80-", group = "s2" }]
[[shard_maps]]
name = "nums"
kind = "hash"
tables = [{ table = "test.nums", column = "k" }]
shards = [{ name = "-80", group = "s1" }, { name = "80-", group = "s2" }]
[[shard_maps]]
name = "wb"
kind = "range_int"
tables = [{ table = "test.wb", column = "k" }]
shards = [{ name = "low", group = "s1", to = "1000" }, { name = "high", group = "s2", from = "1000" }]
[[containers]]
name = "kv"
table = "test.kv"
key = "k"
values = ["v"]
flags = "f"
get = "db_only"
set = "db_only"
delete = "db_only"
[[containers]]
name = "nums"
table = "test.nums"
key = "k"
values = ["v"]
get = "db_only"
set = "db_only"
delete = "db_only"
[[containers]]
name = "wb"
table = "test.wb"
key = "k"
values = ["v"]
get = "db_only"
set = "db_only"
delete = "db_only"
write = "async"
write_window = "20ms"
`

// TestShardedContainers: containers on sharded tables route each memcache key to its shard's group. Sets, gets,
// multi-gets (keys of both shards in one request, answered in request order), deletes, incr and add land where the
// map says, checked on each server directly, for a sync and a write-behind container; a key that cannot be routed
// gets a CLIENT_ERROR and the connection goes on; a container whose key column is not the shard key is refused at
// start; after a map reload the next commands route by the new map.
func TestShardedContainers(t *testing.T) {
	farm := testenv.NewShards(t, 2)
	servers := map[string]*sql.DB{}
	for i, m := range farm.Shards {
		db := openTestDB(t, m.AppDSN)
		servers["s"+strconv.Itoa(i+1)] = db
		for _, q := range []string{
			"CREATE TABLE kv (k VARCHAR(64) PRIMARY KEY, v VARCHAR(100), f INT NOT NULL DEFAULT 0)",
			"CREATE TABLE nums (k VARCHAR(20) PRIMARY KEY, v VARCHAR(100))",
			"CREATE TABLE wb (k VARCHAR(20) PRIMARY KEY, v VARCHAR(100))",
		} {
			if _, err := db.Exec(q); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
	}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	toml := fmt.Sprintf(shardedContainersTOML, farmGroups(farm, "invalidate = \"none\"\n", "invalidate = \"none\"\n"))
	start := func(toml string) (*Server, error) {
		cfg, err := config.Parse([]byte(toml))
		if err != nil {
			t.Fatal(err)
		}
		return Start(cfg, Options{Logger: logger})
	}

	// Refused at start: a key column that is not the shard key (get = "caching": TestShardedCachingContainer).
	for _, c := range []struct{ from, to, want string }{
		{"key = \"k\"\nvalues = [\"v\"]\nflags", "key = \"v\"\nvalues = [\"k\"]\nflags",
			`container "kv" (test.kv): the shard map shards table test.kv by column "k" (mapping kv), not by the container's key column "v"`},
	} {
		s, err := start(strings.Replace(toml, c.from, c.to, 1))
		if err == nil {
			s.Stop(context.Background())
			t.Fatalf("started with %s", c.to)
		}
		if !strings.Contains(err.Error(), c.want) {
			t.Fatalf("start with %s: %v, want it to say %s", c.to, err, c.want)
		}
	}

	// keyway check looks for the tables on the shards' groups, not on the containers' group (global has none).
	cfg, err := config.Parse([]byte(toml))
	if err != nil {
		t.Fatal(err)
	}
	if problems, _ := Check(context.Background(), cfg); len(problems) > 0 {
		t.Fatalf("keyway check: %q", problems)
	}

	s, err := start(toml)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		s.Stop(ctx)
	}()
	m := s.shards.holder.Load()
	want := func(table, key string) string {
		t.Helper()
		sh, err := m.Table("test", table).ShardOf([]byte(key), true)
		if err != nil {
			t.Fatal(err)
		}
		return sh.Group
	}
	// on checks that key's row is on the group the map names, alone, with value v ("" = on no server).
	on := func(table, key, v string) {
		t.Helper()
		groups, got := rowsOn(t, servers, table, key)
		if v == "" {
			if len(groups) != 0 {
				t.Fatalf("%s %q is on %v, want deleted", table, key, groups)
			}
			return
		}
		if g := want(table, key); len(groups) != 1 || groups[0] != g || got != v {
			t.Fatalf("%s %q is on %v with %q, want on %s alone with %q", table, key, groups, got, g, v)
		}
	}
	addr := s.mcLn.Addr().String()
	mc := memcache.New(addr)
	mc.Timeout = 10 * time.Second

	// Sync: sets land on their shard, gets and a multi-get across shards answer them.
	var keys []string
	seen := map[string]bool{}
	for i := range 20 {
		k := "user" + strconv.Itoa(i)
		keys = append(keys, "@@kv."+k)
		seen[want("kv", k)] = true
		if err := mc.Set(&memcache.Item{Key: "@@kv." + k, Value: []byte("v" + strconv.Itoa(i)), Flags: uint32(i)}); err != nil {
			t.Fatalf("set %s: %v", k, err)
		}
		on("kv", k, "v"+strconv.Itoa(i))
	}
	if !seen["s1"] || !seen["s2"] {
		t.Fatalf("20 keys all on one shard: %v", seen)
	}
	for i, k := range keys[:3] {
		it, err := mc.Get(k)
		if err != nil || string(it.Value) != "v"+strconv.Itoa(i) || it.Flags != uint32(i) {
			t.Fatalf("get %s: %v, %v", k, it, err)
		}
	}
	got, err := mc.GetMulti(append(keys, "@@kv.missing"))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(keys) {
		t.Fatalf("multi-get of %d keys found %d", len(keys), len(got))
	}
	for i, k := range keys {
		if it := got[k]; it == nil || string(it.Value) != "v"+strconv.Itoa(i) || it.Flags != uint32(i) {
			t.Fatalf("multi-get %s: %+v", k, it)
		}
	}
	// Request order: a raw multi-get's VALUE lines come in the order of its keys, whatever their shards.
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	r := bufio.NewReader(conn)
	send := func(line string) {
		t.Helper()
		conn.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.WriteString(conn, line); err != nil {
			t.Fatal(err)
		}
	}
	readLine := func() string {
		t.Helper()
		l, err := r.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimRight(l, "\r\n")
	}
	order := []int{7, 0, 13, 2, 19, 5}
	line := "get"
	for _, i := range order {
		line += " " + keys[i]
	}
	send(line + "\r\n")
	for _, i := range order {
		if l := readLine(); !strings.HasPrefix(l, "VALUE "+keys[i]+" ") {
			t.Fatalf("multi-get reply %q, want the VALUE of %s", l, keys[i])
		}
		readLine()
	}
	if l := readLine(); l != "END" {
		t.Fatalf("multi-get ends with %q", l)
	}

	// Delete, add, incr: each on its shard.
	if err := mc.Delete(keys[4]); err != nil {
		t.Fatal(err)
	}
	on("kv", "user4", "")
	if err := mc.Add(&memcache.Item{Key: keys[4], Value: []byte("40")}); err != nil {
		t.Fatal(err)
	}
	if n, err := mc.Increment(keys[4], 2); err != nil || n != 42 {
		t.Fatalf("incr: %d, %v", n, err)
	}
	on("kv", "user4", "42")

	// A key a hash mapping cannot route (not an integer): CLIENT_ERROR naming why, and the connection goes on.
	send("set @@nums.abc 0 0 1\r\nx\r\n")
	if l := readLine(); !strings.HasPrefix(l, "CLIENT_ERROR ") || !strings.Contains(l, "not an integer") {
		t.Fatalf("set of a key with no shard: %q", l)
	}
	send("get @@nums.abc\r\n")
	if l := readLine(); !strings.HasPrefix(l, "CLIENT_ERROR ") || !strings.Contains(l, "not an integer") {
		t.Fatalf("get of a key with no shard: %q", l)
	}
	for _, k := range []string{"1", "2", "3", "29999"} {
		send("set @@nums." + k + " 0 0 2\r\nn" + k[:1] + "\r\n")
		if l := readLine(); l != "STORED" {
			t.Fatalf("set @@nums.%s after the error: %q", k, l)
		}
		on("nums", k, "n"+k[:1])
	}
	send("get @@nums.1 @@nums.29999\r\n")
	for _, want := range []string{"VALUE @@nums.1 0 2", "n1", "VALUE @@nums.29999 0 2", "n2", "END"} {
		if l := readLine(); l != want {
			t.Fatalf("multi-get after the error: %q, want %q", l, want)
		}
	}

	// Write-behind: acknowledged at once, answered from the queue, written to its shard within the window.
	wbKeys := []string{"5", "999", "1000", "123456"}
	for _, k := range wbKeys {
		if err := mc.Set(&memcache.Item{Key: "@@wb." + k, Value: []byte("w" + k)}); err != nil {
			t.Fatal(err)
		}
		if it, err := mc.Get("@@wb." + k); err != nil || string(it.Value) != "w"+k {
			t.Fatalf("get @@wb.%s: %v, %v", k, it, err)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for _, k := range wbKeys {
		for {
			groups, _ := rowsOn(t, servers, "wb", k)
			if len(groups) > 0 || time.Now().After(deadline) {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		on("wb", k, "w"+k)
	}
	if want("wb", "999") != "s1" || want("wb", "1000") != "s2" {
		t.Fatalf("range_int map: 999 on %s, 1000 on %s", want("wb", "999"), want("wb", "1000"))
	}
	if err := mc.Delete("@@wb.1000"); err != nil {
		t.Fatal(err)
	}
	on("wb", "1000", "")
	send("set @@wb.x1 0 0 1\r\nx\r\n")
	if l := readLine(); !strings.HasPrefix(l, "CLIENT_ERROR ") || !strings.Contains(l, "not an integer") {
		t.Fatalf("async set of a key with no shard: %q", l)
	}
	send("version\r\n")
	if l := readLine(); !strings.HasPrefix(l, "VERSION ") {
		t.Fatalf("version after the error: %q", l)
	}

	// A reload applies to the next command: under the new map every kv key is on s2, and wb keys from 1 on.
	var moved string
	for i := 0; moved == ""; i++ {
		if k := "r" + strconv.Itoa(i); want("kv", k) == "s1" {
			moved = k
		}
	}
	sc := cfg.ShardConfig()
	sc.Mappings[0].Shards = []shard.ShardConfig{{Name: "-", Group: "s2"}}
	sc.Mappings[2].Shards = []shard.ShardConfig{{Name: "low", Group: "s1", To: "1"}, {Name: "high", Group: "s2", From: "1"}}
	m2, err := shard.FromConfig(sc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.shards.holder.Store(m2); err != nil {
		t.Fatal(err)
	}
	m = s.shards.holder.Load()
	if err := mc.Set(&memcache.Item{Key: "@@kv." + moved, Value: []byte("after")}); err != nil {
		t.Fatal(err)
	}
	on("kv", moved, "after")
	if want("kv", moved) != "s2" {
		t.Fatalf("under the new map %s is on %s", moved, want("kv", moved))
	}
	if err := mc.Set(&memcache.Item{Key: "@@wb.5", Value: []byte("moved")}); err != nil {
		t.Fatal(err)
	}
	if it, err := mc.Get("@@wb.5"); err != nil || string(it.Value) != "moved" {
		t.Fatalf("get @@wb.5 after the reload: %v, %v", it, err)
	}
	deadline = time.Now().Add(10 * time.Second)
	for {
		var v string
		err := servers["s2"].QueryRow("SELECT v FROM wb WHERE k = '5'").Scan(&v)
		if err == nil && v == "moved" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("@@wb.5 set after the reload is not on s2: %q, %v", v, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// rowsOn returns the servers (by group) whose table holds key, and the value there.
func rowsOn(t *testing.T, servers map[string]*sql.DB, table, key string) (groups []string, value string) {
	t.Helper()
	for name, db := range servers {
		var v string
		switch err := db.QueryRow("SELECT v FROM "+table+" WHERE k = ?", key).Scan(&v); {
		case errors.Is(err, sql.ErrNoRows):
		case err != nil:
			t.Fatal(err)
		default:
			groups, value = append(groups, name), v
		}
	}
	return groups, value
}
