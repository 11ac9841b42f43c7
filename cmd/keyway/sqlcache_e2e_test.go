package main

// The SQL door's result cache end to end: point selects, text and prepared,
// are answered from the cache with the bytes MariaDB sent, and never stale:
// a write through keyway is read back at once, a direct write within
// max_staleness, and nothing is served from the cache inside a transaction.

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/bradfitz/gomemcache/memcache"

	"github.com/keywaydb/keyway/internal/testenv"
)

type sqlCacheStats struct {
	Hits, Misses, Stores int64
	Fresh                bool
	Bypasses             map[string]int64
}

func cacheStats(t *testing.T, admin string) sqlCacheStats {
	t.Helper()
	resp, err := http.Get("http://" + admin + "/status")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st struct {
		SQLCache *sqlCacheStats `json:"sql_cache"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil || st.SQLCache == nil {
		t.Fatalf("/status sql_cache: %v %+v", err, st)
	}
	return *st.SQLCache
}

// waitCacheFresh waits until keyway's binlog follower vouches for its caches (until then reads bypass them).
func waitCacheFresh(t *testing.T, kw *testenv.Process, admin string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	// The admin listener may open after the door a caller waited for.
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	if err := testenv.WaitForPort(ctx, admin); err != nil {
		t.Fatalf("admin listener: %v\n%s", err, kw.Output())
	}
	for !cacheStats(t, admin).Fresh {
		if time.Now().After(deadline) {
			t.Fatalf("the cache never became fresh\n%s", kw.Output())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// sqlThrough opens the app user's database test through keyway's SQL door at sqlAddr, closed at cleanup.
func sqlThrough(t *testing.T, sqlAddr string) *sql.DB {
	t.Helper()
	db, err := sql.Open("mysql", "app:secret@tcp("+sqlAddr+")/test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// rowsOf runs q on db and returns every row as strings (NULL as "<nil>").
func rowsOf(t *testing.T, db interface {
	Query(string, ...any) (*sql.Rows, error)
}, q string, args ...any) [][]string {
	t.Helper()
	rows, err := db.Query(q, args...)
	if err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	defer rows.Close()
	cols, _ := rows.Columns()
	var out [][]string
	for rows.Next() {
		vals := make([]sql.NullString, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			t.Fatal(err)
		}
		row := make([]string, len(cols))
		for i, v := range vals {
			row[i] = "<nil>"
			if v.Valid {
				row[i] = v.String
			}
		}
		out = append(out, row)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestSQLResultCache(t *testing.T) {
	kw, direct, admin, sqlAddr := startCachingWithAdmin(t)
	through := sqlThrough(t, sqlAddr)
	through.SetMaxOpenConns(1) // one session, so the transaction below is the one the statements run in
	for _, q := range []string{
		"CREATE TABLE test.pt (id INT PRIMARY KEY, c VARCHAR(20) CHARACTER SET latin1, u VARCHAR(20) CHARACTER SET utf8mb4, d DECIMAL(10,3), ts DATETIME(3), n INT NULL)",
		"INSERT INTO test.pt VALUES (1, 'a', 'ü€', 12.5, '2026-01-02 03:04:05.678', NULL), (2, 'b', 'x', -1, '2000-01-01', 7)",
	} {
		if _, err := direct.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	waitCacheFresh(t, kw, admin)
	const text = "SELECT * FROM pt WHERE id = 1"
	const prepared = "SELECT * FROM pt WHERE id = ?"
	want := rowsOf(t, direct, text)
	before := cacheStats(t, admin)
	for range 3 {
		if got := rowsOf(t, through, text); !reflect.DeepEqual(got, want) {
			t.Fatalf("text through keyway = %v, direct %v", got, want)
		}
		if got := rowsOf(t, through, prepared, 1); !reflect.DeepEqual(got, want) {
			t.Fatalf("prepared through keyway = %v, direct %v", got, want)
		}
	}
	after := cacheStats(t, admin)
	if after.Hits-before.Hits < 4 || after.Stores-before.Stores < 2 {
		t.Fatalf("cache before %+v after %+v: want the repeats answered from the cache", before, after)
	}

	// SHOW KEYWAY CACHE and CANDIDATES answer through the SQL door, and /candidates on the admin listener.
	report := map[string]string{}
	for _, r := range rowsOf(t, through, "SHOW KEYWAY CACHE") {
		report[r[0]] = r[1]
	}
	if report["sql_cache_hits_total"] == "" || report["sql_cache_hits_total"] == "0" || report[`binlog_following{group=main}`] != "1" {
		t.Fatalf("SHOW KEYWAY CACHE = %v", report)
	}
	found := false
	for _, r := range rowsOf(t, through, "SHOW KEYWAY CANDIDATES") {
		if strings.Contains(r[1], "pt") && strings.Contains(r[1], "id") {
			found = found || (r[5] == "yes" && r[6] == "yes")
		}
	}
	if !found {
		t.Fatalf("SHOW KEYWAY CANDIDATES lacks the point select as key-value and cached: %v", rowsOf(t, through, "SHOW KEYWAY CANDIDATES"))
	}
	resp, err := http.Get("http://" + admin + "/candidates")
	if err != nil {
		t.Fatal(err)
	}
	var cands []struct {
		Query  string
		Cached bool
	}
	if err := json.NewDecoder(resp.Body).Decode(&cands); err != nil || len(cands) == 0 {
		t.Fatalf("/candidates: %v %v", cands, err)
	}
	resp.Body.Close()

	// A write through keyway is read back at once.
	if _, err := through.Exec("UPDATE pt SET c = 'w' WHERE id = 1"); err != nil {
		t.Fatal(err)
	}
	if got := rowsOf(t, through, prepared, 1); got[0][1] != "w" {
		t.Fatalf("after a write through keyway: %v", got)
	}
	if got := rowsOf(t, through, text); got[0][1] != "w" {
		t.Fatalf("after a write through keyway (text): %v", got)
	}
	// A direct write is seen within max_staleness.
	if _, err := direct.Exec("UPDATE pt SET c = 'z' WHERE id = 1"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(maxStaleness + 100*time.Millisecond)
	if got := rowsOf(t, through, prepared, 1); got[0][1] != "z" {
		t.Fatalf("after a direct write: %v", got)
	}
	if got := rowsOf(t, through, text); got[0][1] != "z" {
		t.Fatalf("after a direct write (text): %v", got)
	}

	// Inside a transaction nothing comes from the cache: it sees its own uncommitted write, and others do not.
	tx, err := through.Begin()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec("UPDATE pt SET c = 'tx' WHERE id = 1"); err != nil {
		t.Fatal(err)
	}
	hits := cacheStats(t, admin).Hits
	if got := rowsOf(t, tx, text); got[0][1] != "tx" {
		t.Fatalf("inside the transaction: %v", got)
	}
	if cacheStats(t, admin).Hits != hits {
		t.Fatal("a statement inside a transaction was answered from the cache")
	}
	if got := rowsOf(t, direct, text); got[0][1] != "z" {
		t.Fatalf("uncommitted data visible: %v", got)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	if got := rowsOf(t, through, text); got[0][1] != "z" {
		t.Fatalf("after rollback: %v", got)
	}

	// A session that changed its state (time_zone changes what TIMESTAMP columns read) is not answered from the
	// cache: its statements go to its own connection.
	if _, err := through.Exec("SET time_zone = '+05:00'"); err != nil {
		t.Fatal(err)
	}
	hits = cacheStats(t, admin).Hits
	rowsOf(t, through, text)
	rowsOf(t, through, prepared, 1)
	if cacheStats(t, admin).Hits != hits {
		t.Fatal("a session with its own time_zone was answered from the cache")
	}
}

// TestSQLResultCacheTTLOnly: a group with invalidate = "ttl" has no binlog follower, and the SQL result cache still
// runs for it: point selects are cached for max_staleness (no default_ttl here), so a direct write shows through
// keyway within that, and keyway says so at startup.
func TestSQLResultCacheTTLOnly(t *testing.T) {
	m, direct := mariaDBWith(t, "CREATE TABLE test.tt (id INT PRIMARY KEY, c VARCHAR(20))", "INSERT INTO test.tt VALUES (1, 'one')")
	sqlAddr, admin := freeAddr(t), freeAddr(t)
	path := filepath.Join(t.TempDir(), "keyway.toml")
	if err := os.WriteFile(path, []byte(fmt.Sprintf(`
[sql]
listen = %q

[[sql.users]]
name = "app"
password = "secret"
auth_plugin = "mysql_native_password"

[[groups]]
name = "main"
primary = %q
user = "app"
password = "secret"
invalidate = "ttl"
`, sqlAddr, m.Addr)), 0o600); err != nil {
		t.Fatal(err)
	}
	kw := startKeywaySQL(t, sqlAddr, "--config", path, "--admin-listen", admin)
	through := sqlThrough(t, sqlAddr)
	read := func() string {
		t.Helper()
		var c string
		if err := through.QueryRow("SELECT c FROM tt WHERE id = 1").Scan(&c); err != nil {
			t.Fatal(err)
		}
		return c
	}
	before := cacheStats(t, admin)
	for range 3 {
		read()
	}
	if hits := cacheStats(t, admin).Hits - before.Hits; hits < 2 {
		t.Fatalf("%d cache hits of 3 point selects on a TTL-only group, want 2\n%s", hits, kw.Output())
	}
	if _, err := direct.Exec("UPDATE test.tt SET c = 'two' WHERE id = 1"); err != nil {
		t.Fatal(err)
	}
	changed := time.Now()
	for read() != "two" {
		// Generous against a loaded machine: without expiry the new value never shows at all.
		if time.Since(changed) > 5*time.Second {
			t.Fatal("a direct write was not seen through keyway within max_staleness (1s) (nor 4s after)")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !strings.Contains(kw.Output(), "TTL-only SQL caching") {
		t.Errorf("keyway did not say at startup that the group is cached by ttl:\n%s", kw.Output())
	}
}

// TestCachingContainerTTLOnly: a caching container on a group with invalidate = "ttl" keeps its copies for the
// group's ttl (max_staleness here), so a direct write shows through the memcache door within that.
func TestCachingContainerTTLOnly(t *testing.T) {
	m, direct := mariaDBWith(t, "CREATE TABLE test.tk (k VARCHAR(32) PRIMARY KEY, v VARCHAR(20))", "INSERT INTO test.tk VALUES ('a', 'one')")
	mcAddr := freeAddr(t)
	path := filepath.Join(t.TempDir(), "keyway.toml")
	if err := os.WriteFile(path, []byte(fmt.Sprintf(`
[memcache]
listen = %q

[[groups]]
name = "main"
primary = %q
user = "app"
password = "secret"
invalidate = "ttl"

[[containers]]
name = "tk"
table = "test.tk"
key = "k"
values = ["v"]
get = "caching"
set = "caching"
delete = "caching"
`, mcAddr, m.Addr)), 0o600); err != nil {
		t.Fatal(err)
	}
	kw := testenv.NewKeyway(t, "--config", path)
	mc := memcache.New(kw.Addr)
	if v := mcValue(t, mc, "@@tk.a"); v != "one" {
		t.Fatalf("@@tk.a = %q", v)
	}
	if _, err := direct.Exec("UPDATE test.tk SET v = 'two' WHERE k = 'a'"); err != nil {
		t.Fatal(err)
	}
	changed := time.Now()
	for mcValue(t, mc, "@@tk.a") != "two" {
		// Generous against a loaded machine: without a ttl on the copy the new value never shows at all.
		if time.Since(changed) > 5*time.Second {
			t.Fatalf("a direct write was not seen through a caching container on a TTL-only group within max_staleness (1s) (nor 4s after)\n%s", kw.Output())
		}
		time.Sleep(50 * time.Millisecond)
	}
}
