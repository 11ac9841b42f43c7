package main

// keyway check against real MariaDB servers: a good configuration, and one whose every group is broken in its own
// way, each problem with its exact message.

import (
	"bytes"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/keywaydb/keyway/internal/testenv"
)

// runKeywayCheck runs `keyway check --config` on text and returns its stdout and exit code.
func runKeywayCheck(t *testing.T, text string) (string, int) {
	t.Helper()
	bin, err := testenv.KeywayBinary()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "keyway.toml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(bin, "check", "--config", path)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	code := 0
	if ee, ok := errors.AsType[*exec.ExitError](err); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	t.Logf("keyway check (exit %d):\n%s%s", code, stdout.String(), stderr.String())
	return stdout.String(), code
}

func rootExec(t *testing.T, dsn string, stmts ...string) {
	t.Helper()
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, s := range stmts {
		if _, err := db.Exec(s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
}

func TestCheck(t *testing.T) {
	m := testenv.NewMariaDB(t)
	rootExec(t, m.RootDSN,
		"CREATE TABLE test.kv (k VARCHAR(64) PRIMARY KEY, v TEXT)",
		// Its own schema: MariaDB's initial grants let every account write in test.
		"CREATE DATABASE lim",
		"CREATE TABLE lim.kv (k VARCHAR(64) PRIMARY KEY, v TEXT)",
		"CREATE USER 'limited'@'%' IDENTIFIED BY 'pw'",
		"GRANT SELECT ON lim.kv TO 'limited'@'%'")
	// A server whose binlog caching cannot use.
	stmt := testenv.NewMariaDB(t)
	rootExec(t, stmt.RootDSN, "SET GLOBAL binlog_format = 'STATEMENT'")
	// A server as Debian's package starts it: no binlog.
	nobin := testenv.NewMariaDBWith(t, testenv.MariaDBOptions{NoBinlog: true})
	down := freeAddr(t) // nothing listens there

	t.Run("good", func(t *testing.T) {
		out, code := runKeywayCheck(t, fmt.Sprintf(`
[[groups]]
name = "main"
primary = %q
user = "app"
password = "secret"

[[containers]]
name = "kv"
table = "test.kv"
key = "k"
values = ["v"]
`, m.Addr))
		want := "ok: the configuration is valid and its 1 backend group(s) and 1 container(s) are usable\n"
		if code != 0 || out != want {
			t.Fatalf("exit %d, output:\n%s\nwant exit 0 and:\n%s", code, out, want)
		}
	})

	t.Run("broken", func(t *testing.T) {
		out, code := runKeywayCheck(t, fmt.Sprintf(`
[sql]
listen = "127.0.0.1:0"

[[sql.users]]
name = "web"
password = "x"
backend_user = "app"
backend_password = "not-it"
group = "main"

[[groups]]
name = "main"
primary = %[1]q
user = "app"
password = "secret"

[[groups]]
name = "down"
primary = %[2]q
user = "app"
password = "secret"

[[groups]]
name = "badpw"
primary = %[1]q
user = "app"
password = "wrong"

[[groups]]
name = "stmt"
primary = %[3]q
user = "app"
password = "secret"

[[groups]]
name = "limited"
primary = %[1]q
user = "limited"
password = "pw"

[[groups]]
name = "nobin"
primary = %[4]q
user = "app"
password = "secret"

[[containers]]
name = "bad"
table = "test.kv"
key = "k"
values = ["nope"]

[[containers]]
name = "lim"
group = "limited"
table = "lim.kv"
key = "k"
values = ["v"]
`, m.Addr, down, stmt.Addr, nobin.Addr))
		// Each way out of a binlog the follower cannot use: fix the server, or invalidate = "ttl" or "none".
		orWithout := `; or do without a follower: set invalidate = "ttl" on the group (cached copies live for their ttl, so a write made ` +
			`directly in MySQL shows through keyway after it at most), or invalidate = "none" (cached copies learn only of ` +
			`writes made through keyway)`
		want := []string{
			`group "main": primary ` + m.Addr + ` refuses user "app": Error 1045 (28000): Access denied for user 'app'@'localhost' (using password: YES): fix sql.users "web" (backend_user, backend_password)`,
			`group "main": container "bad" (test.kv): value column "nope" does not exist`,
			`group "down": primary ` + down + ` is unreachable: dial tcp ` + down + `: connect: connection refused`,
			`group "badpw": primary ` + m.Addr + ` refuses user "app": Error 1045 (28000): Access denied for user 'app'@'localhost' (using password: YES): fix the group's account (user, password) in [[groups]]`,
			`group "stmt": binlog follower: binlog_format is STATEMENT: keyway needs ROW (SET GLOBAL binlog_format=ROW, and binlog_format=ROW in the server's config)` + orWithout,
			"group \"limited\": container \"lim\" (lim.kv): 'limited'@'%' lacks privileges the container needs on `lim`.`kv`: INSERT, UPDATE, DELETE; grant them with: GRANT INSERT, UPDATE, DELETE ON `lim`.`kv` TO 'limited'@'%'",
			`group "limited": binlog follower: the account "limited" lacks REPLICATION SLAVE and REPLICATION CLIENT: GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO it (or set binlog_user and binlog_password on the group)` + orWithout,
			`group "nobin": binlog follower: the binary log is off: start the server with log_bin (--log-bin), binlog_format=ROW` + orWithout,
		}
		if got := strings.Split(strings.TrimSuffix(out, "\n"), "\n"); code != 1 || strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Fatalf("exit %d, output:\n%s\nwant exit 1 and:\n%s", code, out, strings.Join(want, "\n"))
		}
	})

	t.Run("invalid", func(t *testing.T) {
		// A config that does not validate is reported as serve reports it, without connecting anywhere.
		out, code := runKeywayCheck(t, "[memcache]\nmax_connections = 0\nnmae = 1\n")
		want := "unknown key memcache.nmae: [memcache] allows listen, memory_limit, max_connections, max_item_size, write_timeout, max_inflight_bytes, tls_cert, tls_key, auth_file\n"
		if code != 1 || !strings.Contains(out, want) || !strings.Contains(out, "memcache.max_connections (-c) = 0") {
			t.Fatalf("exit %d, output:\n%s\nwant exit 1 with:\n%s", code, out, want)
		}
	})
}

// TestServeWrongPasswordSaysTheFix: keyway serve with a group whose password the server refuses stops with one line
// that names the container once and says the fix, as keyway check does. (The health check's warning that may come
// before it, with the same fix, is TestMonitorWithWrongPassword's.)
func TestServeWrongPasswordSaysTheFix(t *testing.T) {
	m := testenv.NewMariaDB(t)
	rootExec(t, m.RootDSN, "CREATE TABLE test.kv (k VARCHAR(64) PRIMARY KEY, v TEXT)")
	bin, err := testenv.KeywayBinary()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "keyway.toml")
	if err := os.WriteFile(path, []byte(fmt.Sprintf(`
[memcache]
listen = "127.0.0.1:0"

[[groups]]
name = "main"
primary = %q
user = "app"
password = "wrong"

[[containers]]
name = "default"
table = "test.kv"
key = "k"
values = ["v"]
`, m.Addr)), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin, "serve", "--config", path).CombinedOutput()
	if ee, ok := errors.AsType[*exec.ExitError](err); !ok || ee.ExitCode() != 1 {
		t.Fatalf("keyway serve: %v, want exit status 1; output:\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	last := lines[len(lines)-1]
	want := `keyway serve: group "main": container "default" (test.kv): primary ` + m.Addr + ` refuses user "app": Error 1045 (28000): ` +
		`Access denied for user 'app'@'localhost' (using password: YES): fix the group's account (user, password) in [[groups]]`
	if last != want {
		t.Fatalf("the last line is\n%s\nwant\n%s", last, want)
	}
}
