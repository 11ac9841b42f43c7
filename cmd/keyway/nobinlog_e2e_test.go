package main

// A group whose MariaDB runs without a binlog (Debian's default): nothing sees its direct writes, so a caching
// container must not serve copies that nothing keeps valid. With invalidate unset its reads go to MySQL; with
// invalidate = "ttl" copies are served for at most the ttl.

import (
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bradfitz/gomemcache/memcache"

	"github.com/keywaydb/keyway/internal/testenv"
)

// noBinlogKeyway starts a MariaDB with log_bin off and the table test.kv, and writes a keyway config with a
// caching container "default" on it, the SQL door and the admin listener on, and extra appended to the group. It
// returns a start function (each call starts keyway on the same data directory), the direct database, and the
// SQL door's and admin's addresses.
func noBinlogKeyway(t *testing.T, groupExtra, cacheExtra string) (start func() *testenv.Process, db *sql.DB, sqlAddr, admin string) {
	t.Helper()
	m := testenv.NewMariaDBWith(t, testenv.MariaDBOptions{NoBinlog: true})
	db, err := sql.Open("mysql", m.AppDSN)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	var logBin int
	if err := db.QueryRow("SELECT @@log_bin").Scan(&logBin); err != nil || logBin != 0 {
		t.Fatalf("@@log_bin = %d (%v), want 0", logBin, err)
	}
	if _, err := db.Exec("CREATE TABLE test.kv (k VARCHAR(64) PRIMARY KEY, v VARCHAR(255))"); err != nil {
		t.Fatal(err)
	}
	sqlAddr, admin = freeAddr(t), freeAddr(t)
	dir := t.TempDir()
	cfg := fmt.Sprintf(`
[sql]
listen = %q

[[sql.users]]
name = "app"
password = "secret"
auth_plugin = "mysql_native_password"

[admin]
listen = %q

[store]
data_dir = %q

[cache]
%s

[[groups]]
name = "main"
primary = %q
user = "app"
password = "secret"
%s

[[containers]]
name = "default"
table = "test.kv"
key = "k"
values = ["v"]
get = "caching"
set = "caching"
delete = "caching"
`, sqlAddr, admin, filepath.Join(dir, "data"), cacheExtra, m.Addr, groupExtra)
	path := filepath.Join(dir, "keyway.toml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return func() *testenv.Process { return startKeywaySQL(t, sqlAddr, "--config", path) }, db, sqlAddr, admin
}

// cacheState is SHOW KEYWAY CACHE's rows through the SQL door, by name.
func cacheState(t *testing.T, sqlAddr string) map[string]string {
	t.Helper()
	through, err := sql.Open("mysql", "app:secret@tcp("+sqlAddr+")/test")
	if err != nil {
		t.Fatal(err)
	}
	defer through.Close()
	rows, err := through.Query("SHOW KEYWAY CACHE")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var name, v string
		if err := rows.Scan(&name, &v); err != nil {
			t.Fatal(err)
		}
		out[name] = v
	}
	return out
}

// groupCache is /status's cache fields of the one group.
type groupCache struct {
	Mode    string `json:"cache_mode"`
	Fresh   bool   `json:"cache_fresh"`
	Serving bool   `json:"cache_serving"`
	Reason  string `json:"cache_reason"`
}

func statusGroupCache(t *testing.T, admin string) groupCache {
	t.Helper()
	var st struct {
		Groups []groupCache `json:"groups"`
	}
	if body := adminStatus(t, admin, &st); len(st.Groups) != 1 {
		t.Fatalf("/status groups: %s", body)
	}
	return st.Groups[0]
}

// mcGet fails the test unless key reads want through the memcache door.
func mcGet(t *testing.T, kw *testenv.Process, mc *memcache.Client, key, want string) {
	t.Helper()
	it, err := mc.Get(key)
	if err != nil || string(it.Value) != want {
		t.Fatalf("memcache get %s = %v %v, want %q\nkeyway:\n%s", key, it, err, want, kw.Output())
	}
}

// TestNoBinlogReadsGoToMySQL: with log_bin off and invalidate unset, a direct UPDATE is seen at the next get,
// SHOW KEYWAY CACHE and /status say not fresh and why, start-up says how to turn the cache on, and a restart
// restores no copy.
func TestNoBinlogReadsGoToMySQL(t *testing.T) {
	start, db, sqlAddr, admin := noBinlogKeyway(t, "", "")
	kw := start()
	mc := memcache.New(kw.Addr)
	if err := mc.Set(&memcache.Item{Key: "k", Value: []byte("hello")}); err != nil {
		t.Fatal(err)
	}
	mcGet(t, kw, mc, "k", "hello")
	mcGet(t, kw, mc, "k", "hello") // a caching container would serve this one from its copy
	if _, err := db.Exec("UPDATE test.kv SET v = 'CHANGED' WHERE k = 'k'"); err != nil {
		t.Fatal(err)
	}
	mcGet(t, kw, mc, "k", "CHANGED")

	rows := cacheState(t, sqlAddr)
	if v := rows["cache_fresh{group=main,mode=off}"]; v != "0" {
		t.Errorf("SHOW KEYWAY CACHE cache_fresh{group=main,mode=off} = %q, want 0; rows %v", v, rows)
	}
	if v := rows["cache_state{group=main}"]; !strings.HasPrefix(v, "not fresh: no usable binlog") || !strings.Contains(v, `invalidate = "ttl"`) {
		t.Errorf("SHOW KEYWAY CACHE cache_state{group=main} = %q, want not fresh, the reason and the fix", v)
	}
	if gc := statusGroupCache(t, admin); gc.Mode != "off" || gc.Fresh || gc.Serving || !strings.Contains(gc.Reason, "binary log is off") {
		t.Errorf("/status group cache %+v, want mode off, not fresh, not serving, the reason", gc)
	}
	if out := kw.Output(); !strings.Contains(out, "read MySQL every time") || !strings.Contains(out, "turn the binlog on") || !strings.Contains(out, `invalidate = \"ttl\"`) {
		t.Errorf("start-up does not say why the cache is off and how to turn it on:\n%s", out)
	}

	if err := kw.Stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("UPDATE test.kv SET v = 'AFTER' WHERE k = 'k'"); err != nil {
		t.Fatal(err)
	}
	kw = start()
	mc = memcache.New(kw.Addr)
	mcGet(t, kw, mc, "k", "AFTER")
	mcGet(t, kw, mc, "k", "AFTER")
	if out := kw.Output(); !strings.Contains(out, "no cached copy restored") || strings.Contains(out, "cached copies restored") {
		t.Errorf("the warm restart's log does not say that it restored nothing:\n%s", out)
	}
}

// TestNoBinlogTTL: with log_bin off and invalidate = "ttl", copies are served (a direct UPDATE is not seen at
// once) and none outlives the ttl.
func TestNoBinlogTTL(t *testing.T) {
	const ttl = 2 * time.Second
	start, db, sqlAddr, admin := noBinlogKeyway(t, `invalidate = "ttl"`, `default_ttl = "2s"`)
	kw := start()
	mc := memcache.New(kw.Addr)
	if err := mc.Set(&memcache.Item{Key: "k", Value: []byte("hello")}); err != nil {
		t.Fatal(err)
	}
	mcGet(t, kw, mc, "k", "hello")
	filled := time.Now()
	if _, err := db.Exec("UPDATE test.kv SET v = 'CHANGED' WHERE k = 'k'"); err != nil {
		t.Fatal(err)
	}
	if time.Since(filled) < ttl-500*time.Millisecond {
		mcGet(t, kw, mc, "k", "hello") // the copy, as ttl caching promises
	}
	time.Sleep(time.Until(filled.Add(ttl + time.Second))) // a copy's expiry is rounded to whole seconds
	mcGet(t, kw, mc, "k", "CHANGED")

	rows := cacheState(t, sqlAddr)
	if v := rows["cache_state{group=main}"]; !strings.HasPrefix(v, `not fresh: invalidate = "ttl"`) {
		t.Errorf("SHOW KEYWAY CACHE cache_state{group=main} = %q, want not fresh for the ttl", v)
	}
	if gc := statusGroupCache(t, admin); gc.Mode != "ttl" || gc.Fresh || !gc.Serving {
		t.Errorf("/status group cache %+v, want mode ttl, not fresh, serving", gc)
	}
}

// TestFreshnessPerGroup: a group without a binlog beside one with a follower. The followed group's copies and SQL
// replies are served; the other group's container reads MySQL every time and its users' point selects bypass the
// result cache. One group's freshness never decides for the other's.
func TestFreshnessPerGroup(t *testing.T) {
	followed, direct := mariaDBWith(t, "CREATE TABLE test.kv (k VARCHAR(64) PRIMARY KEY, v VARCHAR(255))")
	nolog := testenv.NewMariaDBWith(t, testenv.MariaDBOptions{NoBinlog: true})
	directNolog, err := sql.Open("mysql", nolog.AppDSN)
	if err != nil {
		t.Fatal(err)
	}
	defer directNolog.Close()
	if _, err := directNolog.Exec("CREATE TABLE test.kv (k VARCHAR(64) PRIMARY KEY, v VARCHAR(255))"); err != nil {
		t.Fatal(err)
	}
	for _, db := range []*sql.DB{direct, directNolog} {
		if _, err := db.Exec("INSERT INTO test.kv VALUES ('k', 'hello')"); err != nil {
			t.Fatal(err)
		}
	}
	sqlAddr, admin := freeAddr(t), freeAddr(t)
	cfg := fmt.Sprintf(`
[sql]
listen = %q

[[sql.users]]
name = "app"
password = "secret"
auth_plugin = "mysql_native_password"

[[sql.users]]
name = "nologapp"
password = "secret"
auth_plugin = "mysql_native_password"
group = "nolog"
backend_user = "app"
backend_password = "secret"

[admin]
listen = %q

[[groups]]
name = "main"
primary = %q
user = "app"
password = "secret"

[[groups]]
name = "nolog"
primary = %q
user = "app"
password = "secret"

[[containers]]
name = "m"
table = "test.kv"
key = "k"
values = ["v"]
get = "caching"
set = "caching"
delete = "caching"

[[containers]]
name = "n"
group = "nolog"
table = "test.kv"
key = "k"
values = ["v"]
get = "caching"
set = "caching"
delete = "caching"
`, sqlAddr, admin, followed.Addr, nolog.Addr)
	path := filepath.Join(t.TempDir(), "keyway.toml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	kw := startKeywaySQL(t, sqlAddr, "--config", path)
	deadline := time.Now().Add(30 * time.Second)
	for cacheState(t, sqlAddr)["cache_fresh{group=main,mode=binlog}"] != "1" {
		if time.Now().After(deadline) {
			t.Fatalf("group main never fresh: %v\n%s", cacheState(t, sqlAddr), kw.Output())
		}
		time.Sleep(50 * time.Millisecond)
	}

	mc := memcache.New(kw.Addr)
	mcGet(t, kw, mc, "@@m.k", "hello")
	mcGet(t, kw, mc, "@@n.k", "hello")
	before := cacheState(t, sqlAddr)["cache_bypasses_total"]
	mcGet(t, kw, mc, "@@m.k", "hello") // from the copy: main's follower vouches
	if after := cacheState(t, sqlAddr)["cache_bypasses_total"]; after != before {
		t.Errorf("a read of the followed group's container bypassed its copy: bypasses %s -> %s", before, after)
	}
	if _, err := directNolog.Exec("UPDATE test.kv SET v = 'CHANGED' WHERE k = 'k'"); err != nil {
		t.Fatal(err)
	}
	mcGet(t, kw, mc, "@@n.k", "CHANGED") // no follower for nolog: MySQL answers

	query := func(user string) {
		t.Helper()
		db, err := sql.Open("mysql", user+":secret@tcp("+sqlAddr+")/test")
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		for range 2 {
			var v string
			if err := db.QueryRow("SELECT v FROM kv WHERE k = 'k'").Scan(&v); err != nil {
				t.Fatalf("%s: %v", user, err)
			}
		}
	}
	num := func(rows map[string]string, name string) int {
		n, _ := strconv.Atoi(rows[name])
		return n
	}
	const notFresh = "sql_cache_bypasses_total{reason=not_fresh}"
	r0 := cacheState(t, sqlAddr)
	query("app")
	r1 := cacheState(t, sqlAddr)
	if num(r1, "sql_cache_hits_total") <= num(r0, "sql_cache_hits_total") || num(r1, notFresh) != num(r0, notFresh) {
		t.Errorf("the followed group's point select was not answered from the cache: %v -> %v", r0, r1)
	}
	query("nologapp")
	r2 := cacheState(t, sqlAddr)
	if num(r2, notFresh) < num(r1, notFresh)+2 || num(r2, "sql_cache_hits_total") != num(r1, "sql_cache_hits_total") {
		t.Errorf("the unfollowed group's point selects were not sent to MySQL as not fresh: %v -> %v", r1, r2)
	}
}
