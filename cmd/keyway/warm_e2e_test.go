package main

// Warm restart end to end (issue 10 §6, package warm): after a clean stop and a start on the same data_dir, the
// SQL result cache and a caching container answer from what they held before the restart, a row changed while
// keyway was down is never served stale, and a binlog purged past the saved checkpoint starts the caches empty.
//
// To tell a restored copy from a fresh read, the tests change rows with sql_log_bin = 0: such a change never
// reaches the binlog, so only a read that goes to MariaDB sees it.

import (
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/bradfitz/gomemcache/memcache"

	"github.com/keywaydb/keyway/internal/testenv"
)

type warmRig struct {
	t                     *testing.T
	m                     *testenv.MariaDB
	direct, root          *sql.DB
	args                  []string
	sqlAddr, admin, mcKey string
}

func newWarmRig(t *testing.T) *warmRig {
	m, direct, sqlAddr, path := setupContainers(t, "caching", "")
	root, err := sql.Open("mysql", m.RootDSN+"?multiStatements=true")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { root.Close() })
	for _, q := range []string{
		"CREATE TABLE test.wr (id INT PRIMARY KEY, v VARCHAR(20))",
		"INSERT INTO test.wr VALUES (1, 'one'), (2, 'two'), (3, 'three')",
		"CREATE TABLE test.wr2 (id INT PRIMARY KEY, v VARCHAR(20))",
		"INSERT INTO test.wr2 VALUES (2, 'two')",
		"INSERT INTO test.demo_test (c1, c2) VALUES ('k1', 'v1'), ('k2', 'v2')",
	} {
		if _, err := direct.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	r := &warmRig{t: t, m: m, direct: direct, root: root, sqlAddr: sqlAddr, admin: freeAddr(t)}
	r.args = []string{"--config", path, "--data-dir", t.TempDir(), "--durability", "sync", "--admin-listen", r.admin}
	return r
}

// start starts keyway and waits until the caches may be served.
func (r *warmRig) start() *testenv.Process {
	kw := startKeywaySQL(r.t, r.sqlAddr, r.args...)
	waitCacheFresh(r.t, kw, r.admin)
	return kw
}

// hidden changes rows without the binlog hearing of it.
func (r *warmRig) hidden(q string) {
	r.t.Helper()
	if _, err := r.root.Exec("SET sql_log_bin = 0; " + q + "; SET sql_log_bin = 1"); err != nil {
		r.t.Fatal(err)
	}
}

// selectV reads v of row id of table (wr or wr2).
func (r *warmRig) selectV(db *sql.DB, table string, id int) string {
	r.t.Helper()
	var v string
	if err := db.QueryRow("SELECT v FROM "+table+" WHERE id = ?", id).Scan(&v); err != nil {
		r.t.Fatal(err)
	}
	return v
}

func mcValue(t *testing.T, mc *memcache.Client, key string) string {
	t.Helper()
	it, err := mc.Get(key)
	if err != nil {
		t.Fatalf("get %s: %v", key, err)
	}
	return string(it.Value)
}

// fill reads every row through both doors, so both caches hold them.
func (r *warmRig) fill(kw *testenv.Process, through *sql.DB) {
	mc := memcache.New(kw.Addr)
	for range 2 {
		for id := 1; id <= 3; id++ {
			r.selectV(through, "wr", id)
		}
		r.selectV(through, "wr2", 2)
		mcValue(r.t, mc, "@@aaa.k1")
		mcValue(r.t, mc, "@@aaa.k2")
	}
}

func TestWarmRestart(t *testing.T) {
	r := newWarmRig(t)
	kw := r.start()
	through := sqlThrough(t, r.sqlAddr)
	r.fill(kw, through)
	if err := kw.Stop(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(kw.Output(), "cached copies saved") {
		t.Fatalf("no snapshot saved at stop:\n%s", kw.Output())
	}
	// While keyway is down: wr2 and k2 change in the binlog, wr and k1 change where the binlog cannot see. (SQL
	// results depend on whole tables, container rows on their key.)
	for _, q := range []string{"UPDATE test.wr2 SET v = 'TWO' WHERE id = 2", "UPDATE test.demo_test SET c2 = 'V2' WHERE c1 = 'k2'"} {
		if _, err := r.direct.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	r.hidden("UPDATE test.wr SET v = 'hidden' WHERE id IN (1, 3); UPDATE test.demo_test SET c2 = 'hidden' WHERE c1 = 'k1'")

	kw = r.start()
	through.SetMaxIdleConns(0) // a new session after the restart
	before := cacheStats(t, r.admin)
	// Restored and still valid: answered from the cache, so the hidden change does not show.
	if v := r.selectV(through, "wr", 1); v != "one" {
		t.Fatalf("row 1 after a warm restart = %q, want the cached %q (was the cache restored?)\n%s", v, "one", kw.Output())
	}
	if v := r.selectV(through, "wr", 3); v != "three" {
		t.Fatalf("row 3 after a warm restart = %q, want the cached %q", v, "three")
	}
	after := cacheStats(t, r.admin)
	if after.Hits-before.Hits != 2 {
		t.Fatalf("cache before %+v after %+v: want two hits on restored entries", before, after)
	}
	mc := memcache.New(kw.Addr)
	if v := mcValue(t, mc, "@@aaa.k1"); v != "v1" {
		t.Fatalf("@@aaa.k1 after a warm restart = %q, want the restored copy %q", v, "v1")
	}
	// Changed in the binlog while keyway was down: never the saved copy.
	if v := r.selectV(through, "wr2", 2); v != "TWO" {
		t.Fatalf("row 2 after a warm restart = %q, want the value committed while keyway was down", v)
	}
	if v := mcValue(t, mc, "@@aaa.k2"); v != "V2" {
		t.Fatalf("@@aaa.k2 after a warm restart = %q, want the value committed while keyway was down", v)
	}
	if !strings.Contains(kw.Output(), "cached copies restored") {
		t.Fatalf("no restore in the log:\n%s", kw.Output())
	}
}

// TestWarmRestartBinlogPurged: when the binlog no longer holds the saved checkpoint, the caches start empty and
// the log says why.
func TestWarmRestartBinlogPurged(t *testing.T) {
	r := newWarmRig(t)
	kw := r.start()
	through := sqlThrough(t, r.sqlAddr)
	r.fill(kw, through)
	if err := kw.Stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := r.direct.Exec("UPDATE test.wr2 SET v = 'TWO' WHERE id = 2"); err != nil {
		t.Fatal(err)
	}
	r.hidden("UPDATE test.wr SET v = 'hidden' WHERE id = 1; UPDATE test.demo_test SET c2 = 'hidden' WHERE c1 = 'k1'")
	var file string
	if _, err := r.root.Exec("FLUSH BINARY LOGS"); err != nil {
		t.Fatal(err)
	}
	var pos, doDB, ignoreDB any
	if err := r.root.QueryRow("SHOW MASTER STATUS").Scan(&file, &pos, &doDB, &ignoreDB); err != nil {
		t.Fatal(err)
	}
	// MariaDB purges a log only once its binlog checkpoint is written, which follows FLUSH in the background (PURGE
	// leaves a log it still needs, without an error): ask until the old logs are gone.
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, err := r.root.Exec("PURGE BINARY LOGS TO '" + file + "'"); err != nil {
			t.Fatal(err)
		}
		var first string
		var size any
		if err := r.root.QueryRow("SHOW BINARY LOGS").Scan(&first, &size); err == nil && first == file {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("PURGE BINARY LOGS TO %s left older logs", file)
		}
	}

	kw = r.start()
	through.SetMaxIdleConns(0)
	if v := r.selectV(through, "wr2", 2); v != "TWO" {
		t.Fatalf("row 2 = %q after a restart past a purged binlog: a stale copy was served", v)
	}
	if v := r.selectV(through, "wr", 1); v != "hidden" {
		t.Fatalf("row 1 = %q after a restart past a purged binlog: want a fresh read (the caches start empty)", v)
	}
	if v := mcValue(t, memcache.New(kw.Addr), "@@aaa.k1"); v != "hidden" {
		t.Fatalf("@@aaa.k1 = %q after a restart past a purged binlog: want a fresh read", v)
	}
	if !strings.Contains(kw.Output(), "binlog position lost") {
		t.Fatalf("the log does not say why the caches start empty:\n%s", kw.Output())
	}
}

// TestWriteThroughSurvivesItsEcho: a set on a caching container keeps the row it wrote as the local copy, and the
// binlog's echo of that very write does not drop it (issue 13 §1: the next get is a hit, however much later). A
// change of the row that leaves something else (another value, other flags) still drops it.
func TestWriteThroughSurvivesItsEcho(t *testing.T) {
	r := newWarmRig(t)
	kw := r.start()
	mc := memcache.New(kw.Addr)
	const n = 20
	for i := range n {
		if err := mc.Set(&memcache.Item{Key: fmt.Sprintf("@@aaa.e%d", i), Value: fmt.Appendf(nil, "v%d", i), Flags: 7}); err != nil {
			t.Fatal(err)
		}
	}
	// Long enough for the follower to apply the echoes twice (see binlog.recheckDelay).
	time.Sleep(maxStaleness + 200*time.Millisecond)
	r.hidden("UPDATE test.demo_test SET c2 = 'hidden' WHERE c1 LIKE 'e%'")
	waitCacheFresh(t, kw, r.admin) // a follower late on a busy machine makes reads bypass the copies
	for i := range n {
		if v := mcValue(t, mc, fmt.Sprintf("@@aaa.e%d", i)); v != fmt.Sprintf("v%d", i) {
			t.Fatalf("@@aaa.e%d = %q after its echo: want the copy the set wrote, %q", i, v, fmt.Sprintf("v%d", i))
		}
	}
	// Changes the binlog sees that leave another row: the copies go.
	for _, q := range []string{
		"UPDATE test.demo_test SET c2 = 'direct' WHERE c1 = 'e0'",
		"UPDATE test.demo_test SET c3 = 8 WHERE c1 = 'e1'",
		"UPDATE test.demo_test SET c4 = c4 + 1 WHERE c1 = 'e2'",
	} {
		if _, err := r.direct.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(maxStaleness + 200*time.Millisecond)
	if v := mcValue(t, mc, "@@aaa.e0"); v != "direct" {
		t.Fatalf("@@aaa.e0 = %q after a direct write, want %q", v, "direct")
	}
	for _, k := range []string{"@@aaa.e1", "@@aaa.e2"} {
		if v := mcValue(t, mc, k); v != "hidden" {
			t.Fatalf("%s = %q after a direct write of its flags or CAS: want the row (%q), not the copy", k, v, "hidden")
		}
	}
	if v := mcValue(t, mc, "@@aaa.e3"); v != "v3" {
		t.Fatalf("@@aaa.e3 = %q: a write of other rows dropped its copy", v)
	}
}
