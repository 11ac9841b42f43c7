package server

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/bradfitz/gomemcache/memcache"

	"github.com/keywaydb/keyway/internal/config"
	"github.com/keywaydb/keyway/internal/container"
	"github.com/keywaydb/keyway/internal/shard"
	"github.com/keywaydb/keyway/internal/testenv"
)

// TestShardedCachingContainer: a container with get = "caching" on a sharded table, each shard group with its own
// binlog follower. Repeated gets and multi-gets of keys of both shards are answered from the cache (no read reaches
// either shard's table); a write made directly on one shard's server is seen once that shard's follower reads it;
// when one shard's follower stops and its gate no longer vouches, that shard's keys go to its server (and a direct
// write there is seen at once) while the other shard's keys are still answered from the cache.
func TestShardedCachingContainer(t *testing.T) {
	farm := testenv.NewShards(t, 2)
	direct := shardKVTables(t, farm)
	s, err := Start(shardedCachingConfig(t, farm, ""), Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		s.Stop(ctx)
	}()
	ct := shardedContainer(t, s, "kv")
	// Both shards' followers vouch before the copies are served.
	fresh := func(g string) bool { gate := s.validity.LookupGate(g); return gate != nil && gate.Serves() }
	waitShardsVouch(t, s, "s1", "s2")

	mc := memcache.New(s.mcLn.Addr().String())
	mc.Timeout = 10 * time.Second
	// keyOn is a key the map puts on group g, set to its own name through keyway.
	m := s.shards.holder.Load()
	keyOn := map[string]string{}
	for i := 0; keyOn["s1"] == "" || keyOn["s2"] == ""; i++ {
		k := "user" + strconv.Itoa(i)
		sh, err := m.Table("test", "kv").ShardOf([]byte(k), true)
		if err != nil {
			t.Fatal(err)
		}
		if keyOn[sh.Group] == "" {
			keyOn[sh.Group] = k
			if err := mc.Set(&memcache.Item{Key: "@@kv." + k, Value: []byte(k)}); err != nil {
				t.Fatal(err)
			}
		}
	}
	part := map[string]*container.Container{}
	for g, k := range keyOn {
		p, err := ct.PartFor(context.Background(), []byte(k))
		if err != nil {
			t.Fatal(err)
		}
		part[g] = p
	}
	reads := func() map[string]uint64 {
		return map[string]uint64{"s1": part["s1"].Reads(), "s2": part["s2"].Reads()}
	}
	get := func(g string) string {
		t.Helper()
		it, err := mc.Get("@@kv." + keyOn[g])
		if err != nil {
			t.Fatalf("get %s (on %s): %v", keyOn[g], g, err)
		}
		return string(it.Value)
	}
	multiGet := func() {
		t.Helper()
		got, err := mc.GetMulti([]string{"@@kv." + keyOn["s1"], "@@kv." + keyOn["s2"]})
		if err != nil || len(got) != 2 {
			t.Fatalf("multi-get: %v, %v", got, err)
		}
	}
	// wantReads checks that each group's part sent n reads to its table since before.
	wantReads := func(what string, before map[string]uint64, n map[string]uint64) {
		t.Helper()
		now := reads()
		for _, g := range []string{"s1", "s2"} {
			if now[g]-before[g] != n[g] {
				t.Errorf("%s: %s's part read its table %d times, want %d", what, g, now[g]-before[g], n[g])
			}
		}
	}

	// The sets kept their rows (set = "caching" writes through): gets and multi-gets of both shards come from the
	// cache, however often.
	before := reads()
	for range 5 {
		for _, g := range []string{"s1", "s2"} {
			if v := get(g); v != keyOn[g] {
				t.Fatalf("get %s: %q", keyOn[g], v)
			}
		}
		multiGet()
	}
	wantReads("repeated gets of copies kept by sets", before, map[string]uint64{"s1": 0, "s2": 0})
	// A row keyway did not write is filled once, then served from the cache.
	direct["s2"]("UPDATE kv SET v = 'seen' WHERE k = ?", keyOn["s2"]) // invalidates the copy once s2's follower sees it
	var v string
	for deadline := time.Now().Add(10 * time.Second); v != "seen"; time.Sleep(20 * time.Millisecond) {
		if v = get("s2"); v != "seen" && time.Now().After(deadline) {
			t.Fatalf("a direct write on s2 is not seen through keyway: %q (s2's follower %+v)", v, s.validity.LookupGate("s2").Status())
		}
	}
	// The follower applies a commit's invalidations again a moment later (a recheck, within three tenths of
	// max_staleness): the copy filled meanwhile goes once more. Let it pass, and fill again.
	time.Sleep(500 * time.Millisecond)
	get("s2")
	before = reads()
	for range 5 {
		get("s1")
		if v := get("s2"); v != "seen" {
			t.Fatalf("get %s after the direct write: %q", keyOn["s2"], v)
		}
		multiGet()
	}
	wantReads("repeated gets after s2's refill", before, map[string]uint64{"s1": 0, "s2": 0})

	// s1's follower stops: once its last vouch runs out (max_staleness), s1's keys go to s1's server, every time,
	// while s2's keys are still answered from the cache.
	(*s.followerOf.Load())["s1"].Close()
	for deadline := time.Now().Add(10 * time.Second); fresh("s1"); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("s1's gate still vouches with its follower stopped")
		}
	}
	if !fresh("s2") {
		t.Fatalf("s2's gate stopped vouching with s1's follower: %+v", s.validity.LookupGate("s2").Status())
	}
	bypasses := s.engine.Counters().CacheBypasses.Load()
	before = reads()
	for range 3 {
		if v := get("s1"); v != keyOn["s1"] {
			t.Fatalf("get %s with s1 stale: %q", keyOn["s1"], v)
		}
		if v := get("s2"); v != "seen" {
			t.Fatalf("get %s with s1 stale: %q", keyOn["s2"], v)
		}
		multiGet()
	}
	wantReads("gets with s1's follower stopped", before, map[string]uint64{"s1": 6, "s2": 0})
	if n := s.engine.Counters().CacheBypasses.Load() - bypasses; n != 6 {
		t.Errorf("with s1's follower stopped: %d cache bypasses, want 6 (s1's key, by get and multi-get)", n)
	}
	// No follower sees s1's direct writes now, but its keys are read from s1: a direct write there is seen at once.
	direct["s1"]("UPDATE kv SET v = 'direct' WHERE k = ?", keyOn["s1"])
	if v := get("s1"); v != "direct" {
		t.Fatalf("get %s after a direct write on stale s1: %q, want it read from s1", keyOn["s1"], v)
	}
}

// shardedCachingTOML is a keyway with the memcache door, a global group and two shard groups, and container kv with
// get = "caching" on test.kv, sharded by xxhash over s1 and s2 (mapping kv: "-80" on s1, "80-" on s2).
// Placeholders: TOML put first (a [store] table, say), then the farm's groups (farmGroups).
const shardedCachingTOML = `%s
[memcache]
listen = "127.0.0.1:0"
[sql]
listen = ""
[cache]
max_staleness = "1s"
%s[sharding]
global = "global"
[[shard_maps]]
name = "kv"
kind = "xxhash"
tables = [{ table = "test.kv", column = "k" }]
shards = [{ name = "-80", group = "s1" }, { name = "80-", group = "s2" }]
[[containers]]
name = "kv"
table = "test.kv"
key = "k"
values = ["v"]
get = "caching"
set = "caching"
delete = "caching"
`

// shardedCachingConfig is shardedCachingTOML in front of farm, with extra put first: the global group with
// invalidate = "none", each shard group with its own binlog follower.
func shardedCachingConfig(t *testing.T, farm *testenv.Shards, extra string) config.Config {
	t.Helper()
	cfg, err := config.Parse([]byte(fmt.Sprintf(shardedCachingTOML, extra,
		farmGroups(farm, "invalidate = \"none\"\n", "invalidate = \"binlog\"\n"))))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// shardedContainer is s's container name, which must be sharded.
func shardedContainer(t *testing.T, s *Server, name string) *container.Container {
	t.Helper()
	for _, tb := range s.containers.tables {
		if tb.Name == name {
			if !tb.C.Sharded() {
				t.Fatalf("container %s is not sharded", name)
			}
			return tb.C
		}
	}
	t.Fatalf("no container %s", name)
	return nil
}

// waitShardsVouch waits until the freshness gate of each of groups serves copies (until then reads bypass them).
func waitShardsVouch(t *testing.T, s *Server, groups ...string) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		all := true
		for _, g := range groups {
			if gate := s.validity.LookupGate(g); gate == nil || !gate.Serves() {
				all = false
			}
		}
		if all {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the shards' followers do not vouch: %+v", s.validity.Gates())
		}
	}
}

// shardKVTables creates table kv (the container's) on each shard of farm, and returns by group ("s1", "s2") a
// function that runs a statement directly on that shard's server, with the binlog on.
func shardKVTables(t *testing.T, farm *testenv.Shards) map[string]func(q string, args ...any) {
	t.Helper()
	direct := map[string]func(q string, args ...any){}
	for i, m := range farm.Shards {
		g := "s" + strconv.Itoa(i+1)
		db := openTestDB(t, m.AppDSN)
		if _, err := db.Exec("CREATE TABLE kv (k VARCHAR(64) PRIMARY KEY, v VARCHAR(100))"); err != nil {
			t.Fatal(err)
		}
		direct[g] = func(q string, args ...any) {
			t.Helper()
			if _, err := db.Exec(q, args...); err != nil {
				t.Fatalf("%s on %s: %v", q, g, err)
			}
		}
	}
	return direct
}

// TestShardedCachingContainerWarmRestart: a warm restart of a caching container on a table sharded over two shard
// groups. Rows of both shards are read through the memcache door (so the one row cache holds copies of both);
// keyway stops cleanly and saves them with each shard follower's checkpoint. While it is down a row of s1 is
// changed on s1's server (binlogged); the other rows, one on s1 and two on s2, are left alone. After a start on the
// same data_dir: the changed row is never served stale (s1's follower replays from its saved checkpoint and drops
// the restored copy) and is read back with its new value from s1, while the untouched rows of both shards are
// served from the restored copies: neither shard's part sends them to its table.
func TestShardedCachingContainerWarmRestart(t *testing.T) {
	farm := testenv.NewShards(t, 2)
	direct := shardKVTables(t, farm)
	cfg := shardedCachingConfig(t, farm, fmt.Sprintf("[store]\ndata_dir = %q\ndurability = \"sync\"\n", t.TempDir()))

	// Two keys per shard group, by the map keyway will route by, each row written on its shard's server before
	// keyway starts (its followers start after these commits: nothing to replay).
	m, err := shard.FromConfig(cfg.ShardConfig())
	if err != nil {
		t.Fatal(err)
	}
	keys := map[string][]string{}
	for i := 0; len(keys["s1"]) < 2 || len(keys["s2"]) < 2; i++ {
		k := "user" + strconv.Itoa(i)
		sh, err := m.Table("test", "kv").ShardOf([]byte(k), true)
		if err != nil {
			t.Fatal(err)
		}
		if len(keys[sh.Group]) < 2 {
			keys[sh.Group] = append(keys[sh.Group], k)
			direct[sh.Group]("INSERT INTO kv VALUES (?, ?)", k, "old "+k)
		}
	}
	changed := keys["s1"][0]
	untouched := []string{keys["s1"][1], keys["s2"][0], keys["s2"][1]}

	var logs testenv.SyncBuffer
	start := func() *Server {
		t.Helper()
		s, err := Start(cfg, Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	stop := func(s *Server) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := s.Stop(ctx); err != nil {
			t.Errorf("stop: %v", err)
		}
	}
	// reads is how often each shard group's part of container kv sent a read to its table (copies served from the
	// row cache are not counted: container.Container.Reads).
	reads := func(s *Server) map[string]uint64 {
		t.Helper()
		ct := shardedContainer(t, s, "kv")
		out := map[string]uint64{}
		for g, ks := range keys {
			p, err := ct.PartFor(context.Background(), []byte(ks[0]))
			if err != nil {
				t.Fatal(err)
			}
			out[g] = p.Reads()
		}
		return out
	}
	get := func(mc *memcache.Client, k string) string {
		t.Helper()
		it, err := mc.Get("@@kv." + k)
		if err != nil {
			t.Fatalf("get %s: %v", k, err)
		}
		return string(it.Value)
	}
	// logged is the rows count of the log line that says msg, or -1 when there is none.
	logged := func(msg string) int {
		sub := regexp.MustCompile(regexp.QuoteMeta(msg) + `[^\n]* rows=(\d+)`).FindStringSubmatch(logs.String())
		if sub == nil {
			return -1
		}
		n, _ := strconv.Atoi(sub[1])
		return n
	}

	s := start()
	waitShardsVouch(t, s, "s1", "s2")
	mc := memcache.New(s.mcLn.Addr().String())
	mc.Timeout = 10 * time.Second
	// Every key is read through the door until a whole round is answered without a read of either shard's table:
	// the row cache then holds copies of both shards.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		before := reads(s)
		for _, ks := range keys {
			for _, k := range ks {
				if v := get(mc, k); v != "old "+k {
					t.Fatalf("get %s before the restart: %q", k, v)
				}
			}
		}
		if now := reads(s); now["s1"] == before["s1"] && now["s2"] == before["s2"] && before["s1"] > 0 && before["s2"] > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the rows of both shards are not answered from the cache: reads %v", reads(s))
		}
	}
	stop(s)
	if n := logged("cached copies saved"); n != 4 {
		t.Fatalf("the stop saved %d copies, want the 4 rows (2 per shard):\n%s", n, logs.String())
	}

	// While keyway is down: one row of s1 changes on s1's server, in its binlog.
	direct["s1"]("UPDATE kv SET v = ? WHERE k = ?", "new "+changed, changed)

	logs.Reset()
	s = start()
	defer stop(s)
	mc = memcache.New(s.mcLn.Addr().String())
	mc.Timeout = 10 * time.Second
	// Never stale, whether s1's follower vouches yet (the read then goes to s1) or not.
	if v := get(mc, changed); v != "new "+changed {
		t.Fatalf("get %s right after the restart = %q: the copy saved before the change was served", changed, v)
	}
	// The untouched rows' copies were restored: 3 of them, and the changed row's too unless s1's follower had
	// already replayed its change when the copies were put back.
	if n := logged("cached copies restored"); n != 3 && n != 4 {
		t.Fatalf("the restart restored %d copies, want the 3 untouched rows' (and maybe the changed row's):\n%s", n, logs.String())
	}
	t.Logf("copies restored: %d", logged("cached copies restored"))
	waitShardsVouch(t, s, "s1", "s2")
	before, bypasses := reads(s), s.engine.Counters().CacheBypasses.Load()
	for range 3 {
		for _, k := range untouched {
			if v := get(mc, k); v != "old "+k {
				t.Fatalf("get %s after the restart = %q, want %q", k, v, "old "+k)
			}
		}
	}
	if now := reads(s); now["s1"] != before["s1"] || now["s2"] != before["s2"] {
		t.Fatalf("reads of the untouched rows after the restart went to the tables (reads %v, then %v): the restored copies were not served\n%s",
			before, now, logs.String())
	}
	if n := s.engine.Counters().CacheBypasses.Load() - bypasses; n != 0 {
		t.Fatalf("%d cache bypasses reading the untouched rows with both shards' followers vouching", n)
	}
	if now := reads(s); now["s2"] != 0 {
		t.Fatalf("s2's part read its table %d times since the restart: its rows were not served from the restored copies", now["s2"])
	}
	// The changed row, now that s1's follower vouches: still its new value, read from s1 (its copy was dropped).
	if v := get(mc, changed); v != "new "+changed {
		t.Fatalf("get %s after the restart = %q, want %q", changed, v, "new "+changed)
	}
	if reads(s)["s1"] == 0 {
		t.Fatalf("the changed row of s1 was never read from s1 after the restart")
	}
}
