package main

// Key-level SQL entries end to end: a point select on an integer key value depends on that row only, so a direct
// write of another row (seen in the binlog) leaves it cached, a write of its row drops it, and a write through
// the memcache door, which knows its row only by the container's key, drops every key-level entry of the table.

import (
	"strings"
	"testing"
	"time"

	"github.com/bradfitz/gomemcache/memcache"
)

func TestSQLResultCacheKeyLevel(t *testing.T) {
	kw, direct, admin, sqlAddr := startCachingWithAdmin(t)
	through := sqlThrough(t, sqlAddr)
	for _, q := range []string{
		"CREATE TABLE test.kl (id INT PRIMARY KEY, v VARCHAR(20))",
		"INSERT INTO test.kl VALUES (1, 'one'), (2, 'two'), (3, 'three')",
		"INSERT INTO test.demo_test (c1, c2, c3) VALUES ('m', 'em', 7)",
	} {
		if _, err := direct.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	waitCacheFresh(t, kw, admin)
	text := func() string { // a literal key
		var v string
		if err := through.QueryRow("SELECT v FROM kl WHERE id = 1").Scan(&v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	prepared := func() string { // an integer parameter
		var v string
		if err := through.QueryRow("SELECT v FROM kl WHERE id = ?", 1).Scan(&v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	inList := func() string { // an IN list of literal keys
		rows := rowsOf(t, through, "SELECT v FROM kl WHERE id IN (3, 1) ORDER BY id")
		var vs []string
		for _, r := range rows {
			vs = append(vs, r[0])
		}
		return strings.Join(vs, ",")
	}
	// waitApplied waits until the follower has applied every commit made so far.
	waitApplied := func() {
		t.Helper()
		want := binlogStatus(t, admin).Commits
		deadline := time.Now().Add(10 * time.Second)
		// One more commit after the ones that matter: once the follower counted it, it applied them.
		if _, err := direct.Exec("INSERT INTO test.kv VALUES ('marker', 'x') ON DUPLICATE KEY UPDATE v = UUID()"); err != nil {
			t.Fatal(err)
		}
		for binlogStatus(t, admin).Commits <= want {
			if time.Now().After(deadline) {
				t.Fatal("the follower did not apply the last commit")
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	for range 2 {
		text()
		prepared()
		inList()
	}
	before := cacheStats(t, admin)
	if _, err := direct.Exec("UPDATE test.kl SET v = 'TWO' WHERE id = 2"); err != nil {
		t.Fatal(err)
	}
	waitApplied()
	if text() != "one" || prepared() != "one" || inList() != "one,three" {
		t.Fatal("wrong value for row 1")
	}
	if hits := cacheStats(t, admin).Hits - before.Hits; hits != 3 {
		t.Fatalf("%d hits after a direct write of another row, want 3: the entries depend on the whole table", hits)
	}

	// A direct write of the row itself drops both entries (seen within max_staleness).
	if _, err := direct.Exec("UPDATE test.kl SET v = 'ONE' WHERE id = 1"); err != nil {
		t.Fatal(err)
	}
	waitApplied()
	if v, w, l := text(), prepared(), inList(); v != "ONE" || w != "ONE" || l != "ONE,three" {
		t.Fatalf("after a direct write of row 1: text %q, prepared %q, IN list %q, want ONE", v, w, l)
	}

	// A set through the memcache door knows its row by c1 only: an entry keyed by c3 must not outlive it. (The
	// binlog reports the change under c3 too, usually before the next read; the write's own invalidation is what
	// makes it certain, and package validity's tests check that part alone.)
	byC3 := func() string {
		var v string
		if err := through.QueryRow("SELECT c2 FROM demo_test WHERE c3 = 7").Scan(&v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	byC3()
	if byC3() != "em" {
		t.Fatal("wrong value by c3")
	}
	if err := memcache.New(kw.Addr).Set(&memcache.Item{Key: "@@aaa.m", Value: []byte("new"), Flags: 7}); err != nil {
		t.Fatal(err)
	}
	if v := byC3(); v != "new" {
		t.Fatalf("SELECT by c3 right after a memcache set of the row = %q, want new: read-your-writes across doors", v)
	}
}

// TestSQLResultCacheSkipsViews: a view's rows change with the table under it, and the binlog names only that
// table, so a point select on a view is never kept until invalidated: a direct write of the base table shows
// through the view at once. With a ttl hint it is cached for that long, as asked.
func TestSQLResultCacheSkipsViews(t *testing.T) {
	kw, direct, admin, sqlAddr := startCachingWithAdmin(t)
	through := sqlThrough(t, sqlAddr)
	for _, q := range []string{
		"CREATE TABLE test.vb (id INT PRIMARY KEY, v VARCHAR(20))",
		"INSERT INTO test.vb VALUES (1, 'one')",
		"CREATE VIEW test.vv AS SELECT * FROM test.vb",
	} {
		if _, err := direct.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	waitCacheFresh(t, kw, admin)
	read := func(q string) string {
		t.Helper()
		var v string
		if err := through.QueryRow(q).Scan(&v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	const onView = "SELECT v FROM vv WHERE id = 1"
	before := cacheStats(t, admin)
	for range 3 {
		read(onView)
	}
	if st := cacheStats(t, admin); st.Stores != before.Stores || st.Hits != before.Hits {
		t.Fatalf("a point select on a view was cached: before %+v after %+v", before, st)
	} else if n := st.Bypasses["untrusted_table"] - before.Bypasses["untrusted_table"]; n != 3 {
		t.Fatalf("%d bypasses counted as untrusted_table, want 3: %+v", n, st.Bypasses)
	}
	if _, err := direct.Exec("UPDATE test.vb SET v = 'two' WHERE id = 1"); err != nil {
		t.Fatal(err)
	}
	if v := read(onView); v != "two" {
		t.Fatalf("through the view after a direct write of its table: %q, want two", v)
	}
	const hinted = "SELECT /*+ keyway cache ttl=60 */ v FROM vv WHERE id = 1"
	read(hinted)
	if v := read(hinted); v != "two" || cacheStats(t, admin).Hits == before.Hits {
		t.Fatalf("a ttl hint on a view: %q, hits %+v: want it cached", v, cacheStats(t, admin))
	}
}
