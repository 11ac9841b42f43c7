package main

// Write-behind containers (write = "async") end to end: gomemcache against
// keyway, rows read back through SQL direct to MariaDB.

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bradfitz/gomemcache/memcache"
)

// eventually polls cond every 20 ms for up to 15 s.
func eventually(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		ok, got := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: still %s after 15s", what, got)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// tableValue reads c2 of key in the demo table ("<no row>" when missing).
func tableValue(t *testing.T, db *sql.DB, key string) string {
	t.Helper()
	var v string
	err := db.QueryRow(`SELECT c2 FROM test.demo_test WHERE c1 = ?`, key).Scan(&v)
	if err == sql.ErrNoRows {
		return "<no row>"
	}
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestAsyncContainerOrdering: an async set is readable at once and reaches the
// table; commands and SQL statements that depend on the row act after it.
// The long window keeps each set queued while the next step runs, so each
// step fails if it does not wait for the queue.
func TestAsyncContainerOrdering(t *testing.T) {
	_, db, sqlAddr, path := setupContainers(t, "caching", `write = "async"
write_window = "3s"`)
	admin := freeAddr(t)
	kw := startKeywaySQL(t, sqlAddr, "--config", path, "--data-dir", t.TempDir(), "--durability", "sync", "--admin-listen", admin)
	mc := memcache.New(kw.Addr)
	mc.Timeout = 20 * time.Second
	through, err := sql.Open("mysql", "app:secret@tcp("+sqlAddr+")/test")
	if err != nil {
		t.Fatal(err)
	}
	defer through.Close()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%v\nkeyway:\n%s", err, kw.Output())
		}
	}
	get := func(key, want string) {
		t.Helper()
		it, err := mc.Get("@@aaa." + key)
		if err != nil || string(it.Value) != want {
			t.Fatalf("get %s = %v %v, want %q\nkeyway:\n%s", key, it, err, want, kw.Output())
		}
	}

	// Read your write before the table has it.
	must(mc.Set(&memcache.Item{Key: "@@aaa.a", Value: []byte("v1"), Flags: 5}))
	get("a", "v1")
	items, err := mc.GetMulti([]string{"@@aaa.a", "@@aaa.none"})
	must(err)
	if len(items) != 1 || string(items["@@aaa.a"].Value) != "v1" || items["@@aaa.a"].Flags != 5 {
		t.Fatalf("multi-get with a queued row: %v", items)
	}

	// A SELECT through the SQL door sees the queued set.
	var v string
	must(through.QueryRow("SELECT c2 FROM demo_test WHERE c1 = 'a'").Scan(&v))
	if v != "v1" {
		t.Fatalf("SELECT through the SQL door after an async set: %q", v)
	}

	// An SQL UPDATE through the SQL door runs after the queued set, not before
	// it (where it would match no row and then be overwritten).
	res, err := through.Exec("UPDATE demo_test SET c2 = 'from sql' WHERE c1 = 'a'")
	must(err)
	if n, _ := res.RowsAffected(); n != 1 {
		t.Fatalf("UPDATE matched %d rows: the queued set was not in the table first", n)
	}
	get("a", "from sql")

	// incr and delete wait for the row's queued set.
	must(mc.Set(&memcache.Item{Key: "@@aaa.a", Value: []byte("v2")}))
	// ... also as a prepared statement.
	must(through.QueryRow("SELECT c2 FROM demo_test WHERE c1 = ?", "a").Scan(&v))
	if v != "v2" {
		t.Fatalf("prepared SELECT after an async set: %q", v)
	}
	res, err = through.Exec("UPDATE demo_test SET c2 = 'from sql' WHERE c1 = 'a'")
	must(err)

	must(mc.Set(&memcache.Item{Key: "@@aaa.n", Value: []byte("5")}))
	n, err := mc.Increment("@@aaa.n", 3)
	must(err)
	if n != 8 {
		t.Fatalf("incr after a queued set = %d, want 8", n)
	}
	must(mc.Set(&memcache.Item{Key: "@@aaa.d", Value: []byte("doomed")}))
	must(mc.Delete("@@aaa.d"))
	if _, err := mc.Get("@@aaa.d"); err != memcache.ErrCacheMiss {
		t.Fatalf("get after delete: %v", err)
	}

	// A value the column cannot hold is refused before it is acknowledged.
	err = mc.Set(&memcache.Item{Key: "@@aaa.big", Value: []byte(strings.Repeat("x", 1025))})
	if err == nil || !strings.Contains(err.Error(), "c2") {
		t.Fatalf("set of a value too long for c2: %v", err)
	}

	// Later sets land too, and nothing overwrites the SQL door's write.
	for i := 0; i < 50; i++ {
		must(mc.Set(&memcache.Item{Key: fmt.Sprintf("@@aaa.k%d", i), Value: []byte(fmt.Sprint("v", i))}))
	}
	eventually(t, "queued sets in the table", func() (bool, string) {
		v := tableValue(t, db, "k49")
		return v == "v49", v
	})
	time.Sleep(3500 * time.Millisecond) // past another window: any stale write of "a" would have landed

	// /status shows the queue at work.
	resp, err := http.Get("http://" + admin + "/status")
	must(err)
	var status struct {
		Containers map[string]struct {
			Write       string
			WriteBehind struct{ Pending, Written int } `json:"write_behind"`
		}
	}
	must(json.NewDecoder(resp.Body).Decode(&status))
	resp.Body.Close()
	if aaa := status.Containers["aaa"]; aaa.Write != "async" || aaa.WriteBehind.Pending != 0 || aaa.WriteBehind.Written < 52 {
		t.Errorf("/status containers.aaa = %+v", aaa)
	}
	for key, want := range map[string]string{"a": "from sql", "n": "8", "d": "<no row>", "big": "<no row>", "k0": "v0", "k17": "v17"} {
		if got := tableValue(t, db, key); got != want {
			t.Errorf("row %s = %q, want %q", key, got, want)
		}
	}
}

// TestAsyncContainerOutlivesMySQLAndSIGKILL: with MySQL hung, async sets are
// still acknowledged from the local store and served; keyway is then killed,
// MySQL comes back, and the restarted keyway writes every acknowledged set
// from its journal.
func TestAsyncContainerOutlivesMySQLAndSIGKILL(t *testing.T) {
	m, db, sqlAddr, path := setupContainers(t, "caching", `write = "async"
write_window = "20ms"`)
	args := []string{"--config", path, "--data-dir", t.TempDir(), "--durability", "sync"}
	kw := startKeywaySQL(t, sqlAddr, args...)
	mc := memcache.New(kw.Addr)
	mc.Timeout = 20 * time.Second
	for i := 0; i < 20; i++ {
		if err := mc.Set(&memcache.Item{Key: fmt.Sprintf("@@aaa.up%d", i), Value: []byte("up")}); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "sets while MySQL is up", func() (bool, string) {
		v := tableValue(t, db, "up19")
		return v == "up", v
	})

	mariadbd := m.Process().Cmd.Process
	if err := mariadbd.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	resumed := false
	defer func() {
		if !resumed {
			mariadbd.Signal(syscall.SIGCONT)
		}
	}()
	const n = 200
	for i := 0; i < n; i++ {
		key := fmt.Sprintf("@@aaa.down%d", i)
		if err := mc.Set(&memcache.Item{Key: key, Value: []byte(fmt.Sprint("d", i)), Flags: 3}); err != nil {
			t.Fatalf("async set with MySQL hung: %v\nkeyway:\n%s", err, kw.Output())
		}
	}
	if it, err := mc.Get("@@aaa.down7"); err != nil || string(it.Value) != "d7" || it.Flags != 3 {
		t.Fatalf("get with MySQL hung: %v %v", it, err)
	}
	if err := kw.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := mariadbd.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	resumed = true

	kw = startKeywaySQL(t, sqlAddr, args...)
	eventually(t, "journaled sets after restart", func() (bool, string) {
		var c int
		if err := db.QueryRowContext(context.Background(), `SELECT COUNT(*) FROM test.demo_test WHERE c1 LIKE 'down%'`).Scan(&c); err != nil {
			t.Fatal(err)
		}
		return c == n, fmt.Sprintf("%d of %d rows", c, n)
	})
	for i := 0; i < n; i++ {
		if v := tableValue(t, db, fmt.Sprintf("down%d", i)); v != fmt.Sprint("d", i) {
			t.Fatalf("down%d = %q after restart", i, v)
		}
	}
	if it, err := memcache.New(kw.Addr).Get("@@aaa.down199"); err != nil || string(it.Value) != "d199" {
		t.Fatalf("get after restart: %v %v", it, err)
	}
}
