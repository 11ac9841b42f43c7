package main

// What keyway's log says: the MySQL driver's own lines go through it, and a clean stop ends it with what was
// flushed.

import (
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bradfitz/gomemcache/memcache"

	"github.com/keywaydb/keyway/internal/testenv"
)

func TestLogDriverLinesAndLastLine(t *testing.T) {
	m := testenv.NewMariaDB(t)
	rootExec(t, m.RootDSN, "CREATE TABLE test.kv (k VARCHAR(64) PRIMARY KEY, v TEXT)")
	dir := t.TempDir()
	path := filepath.Join(dir, "keyway.toml")
	if err := os.WriteFile(path, []byte(fmt.Sprintf(`
[store]
data_dir = %q

[[groups]]
name = "main"
primary = %q
user = "app"
password = "secret"
invalidate = "none"

[[containers]]
name = "kv"
table = "test.kv"
key = "k"
values = ["v"]
write = "async"
write_window = "1m"
`, filepath.Join(dir, "data"), m.Addr)), 0o600); err != nil {
		t.Fatal(err)
	}
	kw := testenv.NewKeyway(t, "--config", path)
	mc := memcache.New(kw.Addr)

	// The driver's pool holds an idle connection (the container's table check). Killed behind its back, it is
	// found bad when next used, and the driver says so: in keyway's log, not in its own format.
	root, err := sql.Open("mysql", m.RootDSN)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	eventually(t, "the driver's line in keyway's log", func() (bool, string) {
		rows, err := root.Query("SELECT ID FROM information_schema.PROCESSLIST WHERE USER = 'app'")
		if err != nil {
			t.Fatal(err)
		}
		var ids []int64
		for rows.Next() {
			var id int64
			if err := rows.Scan(&id); err != nil {
				t.Fatal(err)
			}
			ids = append(ids, id)
		}
		rows.Close()
		for _, id := range ids {
			root.Exec(fmt.Sprintf("KILL %d", id)) // gone already is fine
		}
		if _, err := mc.Get("@@kv.missing"); err != nil && err != memcache.ErrCacheMiss {
			t.Logf("get: %v", err) // a killed connection may cost one get; the next dials anew
		}
		out := kw.Output()
		// The pool's connections check themselves before a request (sockio.WrapPooled): the driver logs the write
		// that the check failed, with nothing written, and retries on a new connection.
		return strings.Contains(out, `component=mysql-driver`) && strings.Contains(out, `closed the connection while it was idle`), "no line"
	})
	if strings.Contains(kw.Output(), "[mysql] ") {
		t.Errorf("a driver line in the driver's own format:\n%s", kw.Output())
	}

	// Three writes wait in the write-behind queue (a window of a minute); a clean stop writes them and says so.
	for i := range 3 {
		if err := mc.Set(&memcache.Item{Key: fmt.Sprintf("@@kv.k%d", i), Value: []byte("v")}); err != nil {
			t.Fatal(err)
		}
	}
	if err := kw.Stop(); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(kw.Output()), "\n")
	last := lines[len(lines)-1]
	want := "level=INFO msg=stopped took="
	wantFlushed := " write_behind_rows_written=3 write_behind_rows_left_in_journal=0 store_items_kept="
	if !strings.Contains(last, want) || !strings.Contains(last, wantFlushed) {
		t.Fatalf("the last line is\n%s\nwant one with %q and %q", last, want, wantFlushed)
	}
	var n int
	if err := root.QueryRow("SELECT COUNT(*) FROM test.kv").Scan(&n); err != nil || n != 3 {
		t.Fatalf("rows in the table after the stop: %d %v", n, err)
	}
}

// TestOutageLogs: with the group's MariaDB stopped for several of the binlog follower's retry periods (and health
// checks, and clients trying both doors meanwhile), keyway logs a few lines, each a change of state once, none with
// a stack trace.
func TestOutageLogs(t *testing.T) {
	m := testenv.NewMariaDB(t)
	rootExec(t, m.RootDSN, "CREATE TABLE test.kv (k VARCHAR(64) PRIMARY KEY, v TEXT)")
	kw, sqlAddr, admin := serveSQLAdmin(t, m.Addr, "", kvContainer)
	eventually(t, "the follower following", func() (bool, string) {
		st := binlogStatus(t, admin)
		return st.State == "following" && st.Fresh, fmt.Sprintf("%+v", st)
	})
	mc := memcache.New(kw.Addr)
	if err := mc.Set(&memcache.Item{Key: "@@kv.a", Value: []byte("1")}); err != nil {
		t.Fatal(err)
	}
	before := len(kw.Output())

	if err := m.Stop(); err != nil {
		t.Fatal(err)
	}
	// Six failed attempts of the follower, its pause doubling from 0.1s to 1.6s, and the health check (every 2s)
	// failed more than once. Clients of both doors get errors meanwhile.
	eventually(t, "six failed attempts of the follower", func() (bool, string) {
		mc.Get("@@kv.a")
		login(t, sqlAddr, "app", "secret")
		n := binlogStatus(t, admin).Reconn
		return n >= 6, fmt.Sprintf("%d reconnects", n)
	})
	out := kw.Output()[before:]
	lines := strings.Split(strings.TrimSpace(out), "\n")
	seen := map[string]bool{}
	for _, l := range lines {
		if strings.Contains(l, `\n`) || strings.Contains(l, `\t`) {
			t.Errorf("a line with a stack trace:\n%s", l)
		}
		msg := l
		if i := strings.Index(l, "msg="); i >= 0 {
			msg = l[i:]
			if j := strings.Index(msg, `" `); j >= 0 {
				msg = msg[:j]
			}
		}
		if seen[msg] {
			t.Errorf("logged more than once: %s", msg)
		}
		seen[msg] = true
	}
	if len(lines) > 6 {
		t.Errorf("%d lines in the outage, want a few:\n%s", len(lines), out)
	}
	t.Logf("logged in the outage:\n%s", out)
}
