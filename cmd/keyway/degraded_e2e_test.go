package main

// Starting with MySQL down.

import (
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bradfitz/gomemcache/memcache"

	"github.com/keywaydb/keyway/internal/testenv"
)

// TestStartWithMySQLDown: keyway starts while its container's MySQL is
// unreachable. Plain keys are served from the local store; the container's
// journal (async sets acknowledged before a SIGKILL) answers reads of its
// rows; other table keys answer SERVER_ERROR naming the group, and writes are
// not acknowledged. When MySQL becomes reachable the container is checked and
// serves within seconds, without a restart, and the journal reaches the
// table (a mixed-case key too: replay keeps the journal's key). The log says
// each transition once.
func TestStartWithMySQLDown(t *testing.T) {
	m := testenv.NewMariaDB(t)
	db, err := sql.Open("mysql", m.AppDSN)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	for _, q := range []string{
		`CREATE TABLE test.demo_test (c1 VARCHAR(32) PRIMARY KEY, c2 VARCHAR(1024), c3 INT UNSIGNED, c4 BIGINT UNSIGNED, c5 INT UNSIGNED)`,
		`INSERT INTO test.demo_test (c1, c2, c3, c4, c5) VALUES ('cold', 'from the table', 0, 0, 0)`,
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	r := testenv.NewRelay(t, m.Addr)
	// No "default" container: keys without @@ live in the local store.
	cfg := fmt.Sprintf(`
[[groups]]
name = "main"
primary = %q
user = "app"
password = "secret"

[[containers]]
name = "aaa"
group = "main"
table = "test.demo_test"
key = "c1"
values = ["c2"]
flags = "c3"
cas = "c4"
expiry = "c5"
get = "caching"
set = "caching"
delete = "caching"
write = "async"
write_window = "20ms"
`, r.Addr)
	path := filepath.Join(t.TempDir(), "keyway.toml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	args := []string{"--config", path, "--data-dir", t.TempDir(), "--durability", "sync"}

	// A first run leaves acknowledged writes in the journal: MySQL goes away
	// under it, it acknowledges async sets, and it is killed.
	r.Up(t)
	kw := testenv.NewKeyway(t, args...)
	mc := memcache.New(kw.Addr)
	mc.Timeout = 20 * time.Second
	if err := mc.Set(&memcache.Item{Key: "@@aaa.first", Value: []byte("up")}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a set while MySQL is up", func() (bool, string) {
		v := tableValue(t, db, "first")
		return v == "up", v
	})
	r.Down()
	for _, k := range []string{"journaled", "Mixed"} {
		if err := mc.Set(&memcache.Item{Key: "@@aaa." + k, Value: []byte("j-" + k)}); err != nil {
			t.Fatalf("async set with MySQL away: %v\n%s", err, kw.Output())
		}
	}
	if err := kw.Kill(); err != nil {
		t.Fatal(err)
	}

	// The second run starts with MySQL still away.
	kw = testenv.NewKeyway(t, args...)
	// The follower cannot start; the log says so, not that the binlog is unusable (it is fine).
	if out := kw.Output(); !strings.Contains(out, "the binlog follower could not start") || strings.Contains(out, "no usable binlog") {
		t.Errorf("start-up with the primary away does not say that the follower could not start:\n%s", out)
	}
	text := dialText(t, kw.Addr)
	if line, _ := text.do("set plain 0 0 5", "local"); line != "STORED" {
		t.Fatalf("plain set with MySQL down: %q\n%s", line, kw.Output())
	}
	if line, data := text.do("get plain"); line != "VALUE plain 0 5" || data != "local" {
		t.Fatalf("plain get with MySQL down: %q %q", line, data)
	}
	if line, data := text.do("get @@aaa.journaled"); !strings.HasPrefix(line, "VALUE ") || data != "j-journaled" {
		t.Fatalf("journaled row with MySQL down: %q %q, want the journal's value", line, data)
	}
	wantDown := func(what, line string) {
		t.Helper()
		if !strings.HasPrefix(line, "SERVER_ERROR ") || !strings.Contains(line, `container "aaa"`) ||
			!strings.Contains(line, "backend group main ("+r.Addr+") unavailable") {
			t.Fatalf("%s with MySQL down: %q, want SERVER_ERROR naming the container and group main", what, line)
		}
	}
	line, _ := text.do("get @@aaa.cold")
	wantDown("table get", line)
	line, _ = text.do("set @@aaa.new 0 0 1", "x")
	wantDown("table set", line)
	line, _ = text.do("delete @@aaa.cold")
	wantDown("table delete", line)

	r.Up(t)
	eventually(t, "table get after MySQL came back", func() (bool, string) {
		line, data := text.do("get @@aaa.cold")
		return data == "from the table", line + " " + data
	})
	for _, k := range []string{"journaled", "Mixed"} {
		eventually(t, "journaled "+k+" in the table", func() (bool, string) {
			v := tableValue(t, db, k)
			return v == "j-"+k, v
		})
	}
	if line, _ := text.do("set @@aaa.new 0 0 1", "x"); line != "STORED" {
		t.Fatalf("table set after MySQL came back: %q", line)
	}
	if line, data := text.do("get plain"); data != "local" {
		t.Fatalf("plain get after MySQL came back: %q %q", line, data)
	}
	out := kw.Output()
	for _, msg := range []string{"container waiting for its backend", "container checked, serving"} {
		if n := strings.Count(out, msg); n != 1 {
			t.Errorf("log has %q %d times, want once:\n%s", msg, n, out)
		}
	}
}
