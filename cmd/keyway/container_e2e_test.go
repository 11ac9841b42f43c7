package main

// Containers end to end: gomemcache against keyway, table rows read back
// through SQL direct to MariaDB.

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bradfitz/gomemcache/memcache"

	"github.com/keywaydb/keyway/internal/testenv"
)

// startContainers starts MariaDB with the InnoDB plugin's demo table and a
// keyway whose container "aaa" (policies as given) and "default" map to it.
func startContainers(t *testing.T, policy string) (*testenv.Process, *sql.DB) {
	kw, db, _, _ := startContainersWithSQL(t, policy)
	return kw, db
}

// startContainersWithSQL is startContainers with the SQL door on too; it
// returns the SQL door's address and the MariaDB.
func startContainersWithSQL(t *testing.T, policy string) (*testenv.Process, *sql.DB, string, *testenv.MariaDB) {
	t.Helper()
	m, db, sqlAddr, path := setupContainers(t, policy, "")
	kw := startKeywaySQL(t, sqlAddr, "--config", path)
	return kw, db, sqlAddr, m
}

// startKeywaySQL starts keyway with args and waits for its SQL door too.
func startKeywaySQL(t *testing.T, sqlAddr string, args ...string) *testenv.Process {
	t.Helper()
	kw := testenv.NewKeyway(t, args...)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := testenv.WaitForPort(ctx, sqlAddr); err != nil {
		t.Fatalf("SQL door: %v\n%s", err, kw.Output())
	}
	return kw
}

// setupContainers starts MariaDB with the tables and writes the config of
// startContainersWithSQL, with aaaExtra added to container "aaa"; it returns
// the SQL door's address and the config's path.
func setupContainers(t *testing.T, policy, aaaExtra string) (*testenv.MariaDB, *sql.DB, string, string) {
	t.Helper()
	m, db := mariaDBWith(t,
		`CREATE TABLE test.demo_test (c1 VARCHAR(32) PRIMARY KEY, c2 VARCHAR(1024), c3 INT UNSIGNED, c4 BIGINT UNSIGNED, c5 INT UNSIGNED)`,
		`CREATE TABLE test.kv (k VARCHAR(64) PRIMARY KEY, v VARCHAR(255))`,
		`CREATE TABLE test.multi (k VARCHAR(32) PRIMARY KEY, color VARCHAR(16), qty INT, note TEXT)`,
	)
	sqlAddr := freeAddr(t)
	cfg := fmt.Sprintf(`
[sql]
listen = %[3]q

[[sql.users]]
name = "app"
password = "secret"
auth_plugin = "mysql_native_password"

[[groups]]
name = "main"
primary = %[1]q
user = "app"
password = "secret"

[[containers]]
name = "aaa"
table = "test.demo_test"
key = "c1"
values = ["c2"]
flags = "c3"
cas = "c4"
expiry = "c5"
get = %[2]q
set = %[2]q
delete = %[2]q
%[4]s

[[containers]]
name = "multi"
table = "test.multi"
key = "k"
values = ["color", "qty", "note"]
get = %[2]q
set = %[2]q
delete = %[2]q

[[containers]]
name = "default"
table = "test.kv"
key = "k"
values = ["v"]
get = "db_only"
set = "db_only"
delete = "db_only"
`, m.Addr, policy, sqlAddr, aaaExtra)
	path := filepath.Join(t.TempDir(), "keyway.toml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return m, db, sqlAddr, path
}

// TestSQLDoorWriteInvalidatesMemcacheRow: with the caching policy, an UPDATE
// through the SQL door is seen by the next memcache get, in autocommit and
// inside a transaction.
func TestSQLDoorWriteInvalidatesMemcacheRow(t *testing.T) {
	kw, _, sqlAddr, _ := startContainersWithSQL(t, "caching")
	mc := memcache.New(kw.Addr)
	through, err := sql.Open("mysql", "app:secret@tcp("+sqlAddr+")/test")
	if err != nil {
		t.Fatal(err)
	}
	defer through.Close()
	get := setAndCache(t, kw, mc, "@@aaa.k", "v1")
	if _, err := through.Exec("UPDATE demo_test SET c2 = 'v2' WHERE c1 = 'k'"); err != nil {
		t.Fatal(err)
	}
	get("v2")
	tx, err := through.Begin()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec("UPDATE test.demo_test SET c2 = 'v3' WHERE c1 = 'k'"); err != nil {
		t.Fatal(err)
	}
	get("v2") // not committed yet: other readers see v2, and may cache it
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	get("v3")
}

func TestContainersThroughGomemcache(t *testing.T) {
	for _, policy := range []string{"db_only", "caching"} {
		t.Run(policy, func(t *testing.T) {
			kw, db := startContainers(t, policy)
			mc := memcache.New(kw.Addr)
			row := func(key string) (value string, flags uint32, ok bool) {
				t.Helper()
				err := db.QueryRow(`SELECT c2, c3 FROM test.demo_test WHERE c1 = ?`, key).Scan(&value, &flags)
				if err == sql.ErrNoRows {
					return "", 0, false
				}
				if err != nil {
					t.Fatal(err)
				}
				return value, flags, true
			}
			must := func(err error) {
				t.Helper()
				if err != nil {
					t.Fatalf("%v\nkeyway:\n%s", err, kw.Output())
				}
			}
			must(mc.Set(&memcache.Item{Key: "@@aaa.AA", Value: []byte("HELLO, HELLO"), Flags: 8}))
			if v, f, ok := row("AA"); !ok || v != "HELLO, HELLO" || f != 8 {
				t.Fatalf("row after set: %q %d %v", v, f, ok)
			}
			it, err := mc.Get("@@aaa.AA")
			must(err)
			if string(it.Value) != "HELLO, HELLO" || it.Flags != 8 {
				t.Fatalf("get: %q %d", it.Value, it.Flags)
			}
			// A write through SQL is seen by the next get once the local copy is gone:
			// db_only always reads the table; caching is invalidated by keyway's own writes.
			must(mc.Append(&memcache.Item{Key: "@@aaa.AA", Value: []byte("!")}))
			it, err = mc.Get("@@aaa.AA")
			must(err)
			if string(it.Value) != "HELLO, HELLO!" {
				t.Fatalf("get after append: %q", it.Value)
			}
			if err := mc.Add(&memcache.Item{Key: "@@aaa.AA", Value: []byte("x")}); err != memcache.ErrNotStored {
				t.Fatalf("add existing: %v", err)
			}
			must(mc.Set(&memcache.Item{Key: "@@aaa.n", Value: []byte("41")}))
			n, err := mc.Increment("@@aaa.n", 1)
			must(err)
			if v, _, _ := row("n"); n != 42 || v != "42" {
				t.Fatalf("incr: %d, row %q", n, v)
			}
			// cas: a stale cas id loses, in SQL.
			c1, err := mc.Get("@@aaa.n")
			must(err)
			c2 := *c1
			c1.Value = []byte("100")
			must(mc.CompareAndSwap(c1))
			c2.Value = []byte("200")
			if err := mc.CompareAndSwap(&c2); err != memcache.ErrCASConflict {
				t.Fatalf("stale cas: %v", err)
			}
			if v, _, _ := row("n"); v != "100" {
				t.Fatalf("row after cas: %q", v)
			}
			must(mc.Delete("@@aaa.AA"))
			if _, _, ok := row("AA"); ok {
				t.Fatal("row still there after delete")
			}
			if _, err := mc.Get("@@aaa.AA"); err != memcache.ErrCacheMiss {
				t.Fatalf("get after delete: %v", err)
			}
			// Keys without a prefix use the container named default.
			must(mc.Set(&memcache.Item{Key: "plain", Value: []byte("v")}))
			var v string
			must(db.QueryRow(`SELECT v FROM test.kv WHERE k = 'plain'`).Scan(&v))
			if v != "v" {
				t.Fatalf("default container row: %q", v)
			}
			// A multi-get across containers: one IN query per container.
			m, err := mc.GetMulti([]string{"@@aaa.n", "plain", "@@aaa.missing", "absent"})
			must(err)
			if len(m) != 2 || string(m["@@aaa.n"].Value) != "100" || string(m["plain"].Value) != "v" {
				t.Fatalf("GetMulti: %v", m)
			}
			// Expired rows are misses; exptimes reach the expiry column.
			must(mc.Set(&memcache.Item{Key: "@@aaa.gone", Value: []byte("v"), Expiration: -1}))
			if _, err := mc.Get("@@aaa.gone"); err != memcache.ErrCacheMiss {
				t.Fatalf("get of a set with a past exptime: %v", err)
			}
			_, err = db.Exec(`INSERT INTO test.demo_test VALUES ('past', 'v', 0, 1, UNIX_TIMESTAMP() - 10), ('future', 'v', 0, 2, UNIX_TIMESTAMP() + 1000)`)
			must(err)
			if _, err := mc.Get("@@aaa.past"); err != memcache.ErrCacheMiss {
				t.Fatalf("get of a row past its expiry: %v", err)
			}
			must(mc.Touch("@@aaa.future", 100))
			var exp int64
			must(db.QueryRow(`SELECT c5 - UNIX_TIMESTAMP() FROM test.demo_test WHERE c1 = 'future'`).Scan(&exp))
			if exp < 98 || exp > 100 {
				t.Fatalf("expiry column after touch 100: now + %d", exp)
			}
			must(mc.Touch("@@aaa.future", -1))
			if _, err := mc.Get("@@aaa.future"); err != memcache.ErrCacheMiss {
				t.Fatalf("get after touch with a past exptime: %v", err)
			}

			// Keys are compared as the key column compares them: under its
			// case-insensitive collation "Case" and "CASE" are one row, and
			// writing either invalidates the cached copy read through the other.
			must(mc.Set(&memcache.Item{Key: "@@aaa.Case", Value: []byte("v1")}))
			if it, err := mc.Get("@@aaa.case"); err != nil || string(it.Value) != "v1" {
				t.Fatalf("get case after set Case: %v %v", it, err)
			}
			must(mc.Set(&memcache.Item{Key: "@@aaa.CASE", Value: []byte("v2")}))
			if it, err := mc.Get("@@aaa.case"); err != nil || string(it.Value) != "v2" {
				t.Fatalf("get case after set CASE: %v %v", it, err)
			}

			// Several value columns: the value is split on "|" and joined back.
			must(mc.Set(&memcache.Item{Key: "@@multi.x", Value: []byte("red|7|a long note")}))
			var color, note string
			var qty int
			must(db.QueryRow(`SELECT color, qty, note FROM test.multi WHERE k = 'x'`).Scan(&color, &qty, &note))
			if color != "red" || qty != 7 || note != "a long note" {
				t.Fatalf("multi row: %q %d %q", color, qty, note)
			}
			it, err = mc.Get("@@multi.x")
			must(err)
			if string(it.Value) != "red|7|a long note" {
				t.Fatalf("multi get: %q", it.Value)
			}
			if err := mc.Set(&memcache.Item{Key: "@@multi.y", Value: []byte("blue|many|x")}); err == nil || !strings.Contains(err.Error(), "qty") {
				t.Fatalf("a non-number for the INT column: %v", err)
			}

			// An unknown container is an error, not a silent local key.
			if err := mc.Set(&memcache.Item{Key: "@@nope.k", Value: []byte("v")}); err == nil || !strings.Contains(err.Error(), "container") {
				t.Fatalf("unknown container: %v", err)
			}
		})
	}
}

// TestContainerGroupCommit: concurrent sets through keyway all become rows.
func TestContainerGroupCommit(t *testing.T) {
	kw, db := startContainers(t, "caching")
	var wg sync.WaitGroup
	var mu sync.Mutex
	acked := 0
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			mc := memcache.New(kw.Addr)
			for i := 0; i < 50; i++ {
				if err := mc.Set(&memcache.Item{Key: fmt.Sprintf("@@aaa.w%d-%d", w, i), Value: []byte("v")}); err != nil {
					t.Errorf("set: %v", err)
					return
				}
				mu.Lock()
				acked++
				mu.Unlock()
			}
		}(w)
	}
	wg.Wait()
	var rows int
	if err := db.QueryRow(`SELECT COUNT(*) FROM test.demo_test`).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows != acked || acked != 800 {
		t.Fatalf("%d acknowledged sets, %d rows", acked, rows)
	}
}

// TestContainerMySQLDown: with MySQL gone, caching gets still serve what is
// cached; misses and writes get SERVER_ERROR with the reason, and nothing is
// acknowledged.
// TestContainerMySQLDown: with MySQL down the binlog follower is disconnected, so keyway cannot vouch for a
// cached row and does not serve it (the "never knowingly stale"): reads and writes get a server error,
// and the server keeps running.
func TestContainerMySQLDown(t *testing.T) {
	kw, _, _, m := startContainersWithSQL(t, "caching")
	mc := memcache.New(kw.Addr)
	mc.Timeout = 20 * time.Second
	if err := mc.Set(&memcache.Item{Key: "@@aaa.hot", Value: []byte("v")}); err != nil {
		t.Fatal(err)
	}
	if _, err := mc.Get("@@aaa.hot"); err != nil { // cached now
		t.Fatal(err)
	}
	if err := m.Stop(); err != nil {
		t.Fatal(err)
	}
	serverError := func(err error) bool {
		return err != nil && (strings.Contains(err.Error(), "SERVER_ERROR") || strings.Contains(err.Error(), "server error"))
	}
	time.Sleep(maxStaleness + 100*time.Millisecond) // the follower's last vouch runs out
	if it, err := mc.Get("@@aaa.hot"); !serverError(err) {
		t.Fatalf("cached get with MySQL down: %v %v, want a server error (no follower vouches for the copy)", it, err)
	}
	if _, err := mc.Get("@@aaa.cold"); !serverError(err) {
		t.Fatalf("miss with MySQL down: %v, want a server error", err)
	}
	if err := mc.Set(&memcache.Item{Key: "@@aaa.new", Value: []byte("v")}); err == nil {
		t.Fatal("set acknowledged with MySQL down")
	}
	// The server is still up for what needs no MySQL.
	if line, _ := dialText(t, kw.Addr).do("version"); !strings.HasPrefix(line, "VERSION ") {
		t.Fatalf("version after failed commands: %q", line)
	}
}

// TestContainersThroughPHPMemcached: php-memcached (libmemcached) over the
// text and binary protocols does set/get/incr/decr/cas/add/delete on table
// rows; the rows read through SQL match.
func TestContainersThroughPHPMemcached(t *testing.T) {
	testenv.Need(t, "php")
	for _, write := range []string{"sync", "async"} {
		t.Run(write, func(t *testing.T) {
			m, db, sqlAddr, path := setupContainers(t, "caching", fmt.Sprintf("write = %q", write))
			kw := startKeywaySQL(t, sqlAddr, "--config", path, "--data-dir", t.TempDir(), "--durability", "sync")
			host, port, _ := strings.Cut(kw.Addr, ":")
			for _, proto := range []string{"text", "binary"} {
				args := []string{"testdata/containers.php", host, port, proto, proto + "-", sqlAddr, m.Addr}
				rows := fmt.Sprintf(`{"%[1]s-a":"changed","%[1]s-n":"0"}`, proto)
				want := `{"set":true,"get":"hello","set_n":true,"incr":15,"decr":0,"cas_ok":true,"cas_stale":false,` +
					`"cas_stale_code":true,"after_cas":"changed","add_existing":false,"set_d":true,"delete":true,` +
					`"get_deleted":false,"get_deleted_notfound":true,"sql_keyway":` + rows + `,"sql_direct":` + rows + `}`
				if write == "async" {
					// Direct to MariaDB an async set may still be queued; through
					// the SQL door it is always seen.
					args = args[:len(args)-1]
					want = strings.TrimSuffix(want, `,"sql_direct":`+rows+`}`) + `}`
				}
				out, err := exec.Command("php", args...).CombinedOutput()
				if err != nil {
					t.Fatalf("php: %v\n%s", err, out)
				}
				if strings.TrimSpace(string(out)) != want {
					t.Fatalf("php-memcached %s:\n got %s\nwant %s\nkeyway:\n%s", proto, out, want, kw.Output())
				}
				eventually(t, "rows direct", func() (bool, string) {
					a, n, d := tableValue(t, db, proto+"-a"), tableValue(t, db, proto+"-n"), tableValue(t, db, proto+"-d")
					got := fmt.Sprintf("a=%s n=%s d=%s", a, n, d)
					return got == "a=changed n=0 d=<no row>", got
				})
			}
		})
	}
}

// TestMigrateInnodbMemcache: a site coming from the InnoDB memcached plugin
// keeps its configuration: keyway reads innodb_memcache (as created by the
// plugin's innodb_memcached_config.sql) and serves the plugin's own demo.
func TestMigrateInnodbMemcache(t *testing.T) {
	m, db := mariaDBWith(t, append(innodbMemcacheSchema(),
		`CREATE TABLE test.demo_test (c1 VARCHAR(32), c2 VARCHAR(1024), c3 INT, c4 BIGINT UNSIGNED, c5 INT, PRIMARY KEY (c1))`,
		`INSERT INTO innodb_memcache.containers VALUES ('aaa', 'test', 'demo_test', 'c1', 'c2', 'c3', 'c4', 'c5', 'PRIMARY')`,
		`INSERT INTO test.demo_test VALUES ('AA', 'HELLO, HELLO', 8, 0, 0)`,
	)...)
	kw := startMigrated(t, m)
	mc := memcache.New(kw.Addr)
	it, err := mc.Get("@@aaa.AA")
	if err != nil || string(it.Value) != "HELLO, HELLO" || it.Flags != 8 {
		t.Fatalf("the plugin's demo: get @@aaa.AA = %v, %v\nkeyway:\n%s", it, err, kw.Output())
	}
	if err := mc.Set(&memcache.Item{Key: "@@aaa.BB", Value: []byte("WORLD")}); err != nil {
		t.Fatal(err)
	}
	var v string
	if err := db.QueryRow(`SELECT c2 FROM test.demo_test WHERE c1 = 'BB'`).Scan(&v); err != nil || v != "WORLD" {
		t.Fatalf("row BB = %q, %v", v, err)
	}
	// The plugin's walk-through uses plain keys: with no container named "default", they go to the first one.
	if it, err := mc.Get("AA"); err != nil || string(it.Value) != "HELLO, HELLO" {
		t.Fatalf("get AA (no @@) = %v, %v: want the first container's row, as the plugin answers", it, err)
	}
	if err := mc.Set(&memcache.Item{Key: "CC", Value: []byte("PLAIN")}); err != nil {
		t.Fatal(err)
	}
	if err := db.QueryRow(`SELECT c2 FROM test.demo_test WHERE c1 = 'CC'`).Scan(&v); err != nil || v != "PLAIN" {
		t.Fatalf("set CC (no @@): row CC = %q, %v", v, err)
	}
}

// TestContainerSetsSurviveSIGKILL: every set acknowledged before keyway is
// killed is a row: sync container writes are acknowledged after COMMIT.
func TestContainerSetsSurviveSIGKILL(t *testing.T) {
	kw, db := startContainers(t, "caching")
	var mu sync.Mutex
	var acked []string
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			mc := memcache.New(kw.Addr)
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				key := fmt.Sprintf("w%d-%d", w, i)
				if err := mc.Set(&memcache.Item{Key: "@@aaa." + key, Value: []byte(key)}); err != nil {
					return // keyway died under us: not acknowledged
				}
				mu.Lock()
				acked = append(acked, key)
				mu.Unlock()
			}
		}(w)
	}
	for {
		mu.Lock()
		n := len(acked)
		mu.Unlock()
		if n >= 500 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := kw.Kill(); err != nil {
		t.Fatal(err)
	}
	close(stop)
	wg.Wait()
	for _, key := range acked {
		var v string
		if err := db.QueryRow(`SELECT c2 FROM test.demo_test WHERE c1 = ?`, key).Scan(&v); err != nil || v != key {
			t.Fatalf("acknowledged set of %s lost after SIGKILL: %q %v", key, v, err)
		}
	}
	t.Logf("%d acknowledged container sets were all rows after SIGKILL", len(acked))
}

// innodbMemcacheSchema is the InnoDB plugin's innodb_memcached_config.sql without its container rows: the
// configuration schema an [migrate] innodb_memcache import reads. Append the tables and rows of a test.
func innodbMemcacheSchema() []string {
	return []string{
		`CREATE DATABASE innodb_memcache`,
		`CREATE TABLE innodb_memcache.cache_policies (policy_name VARCHAR(40) PRIMARY KEY,
			get_policy ENUM('innodb_only','cache_only','caching','disabled') NOT NULL,
			set_policy ENUM('innodb_only','cache_only','caching','disabled') NOT NULL,
			delete_policy ENUM('innodb_only','cache_only','caching','disabled') NOT NULL,
			flush_policy ENUM('innodb_only','cache_only','caching','disabled') NOT NULL)`,
		`CREATE TABLE innodb_memcache.config_options (name VARCHAR(50) PRIMARY KEY, value VARCHAR(50))`,
		`CREATE TABLE innodb_memcache.containers (name VARCHAR(50) NOT NULL PRIMARY KEY, db_schema VARCHAR(250) NOT NULL,
			db_table VARCHAR(250) NOT NULL, key_columns VARCHAR(250) NOT NULL, value_columns VARCHAR(250),
			flags VARCHAR(250) NOT NULL DEFAULT '0', cas_column VARCHAR(250), expire_time_column VARCHAR(250),
			unique_idx_name_on_key VARCHAR(250) NOT NULL)`,
		`INSERT INTO innodb_memcache.cache_policies VALUES ('cache_policy', 'innodb_only', 'innodb_only', 'innodb_only', 'innodb_only')`,
		`INSERT INTO innodb_memcache.config_options VALUES ('separator', '|'), ('table_map_delimiter', '.')`,
	}
}

// mariaDBWith starts MariaDB and runs stmts on it as the app user; the pool it returns closes at cleanup.
func mariaDBWith(t *testing.T, stmts ...string) (*testenv.MariaDB, *sql.DB) {
	t.Helper()
	m := testenv.NewMariaDB(t)
	db, err := sql.Open("mysql", m.AppDSN)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	for _, q := range stmts {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	return m, db
}

// startMigrated starts keyway serving the containers [migrate] reads from m's innodb_memcache schema.
func startMigrated(t *testing.T, m *testenv.MariaDB) *testenv.Process {
	t.Helper()
	cfg := fmt.Sprintf("[[groups]]\nname = \"main\"\nprimary = %q\nuser = \"app\"\npassword = \"secret\"\n\n[migrate]\ninnodb_memcache = \"main\"\n", m.Addr)
	path := filepath.Join(t.TempDir(), "keyway.toml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return testenv.NewKeyway(t, "--config", path)
}
