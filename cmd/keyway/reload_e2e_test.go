package main

// SIGHUP reloads the SQL door's users: proved by logging in with the new password.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/keywaydb/keyway/internal/testenv"
)

// login logs in to the SQL door as user and runs SELECT 1; it returns the server's error number (0 on success).
func login(t *testing.T, addr, user, password string) uint16 {
	t.Helper()
	cfg := mysql.NewConfig()
	cfg.User, cfg.Passwd, cfg.Net, cfg.Addr = user, password, "tcp", addr
	db, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var one int
	err = db.QueryRowContext(ctx, "SELECT 1").Scan(&one)
	if me, ok := errors.AsType[*mysql.MySQLError](err); ok {
		return me.Number
	}
	if err != nil || one != 1 {
		t.Fatalf("login as %s: %v (%d)", user, err, one)
	}
	return 0
}

func TestSIGHUPReloadsUsers(t *testing.T) {
	m := testenv.NewMariaDB(t)
	addr := freeAddr(t)
	config := func(password string, maxConns int) string {
		return fmt.Sprintf(`
[memcache]
max_connections = %d

[sql]
listen = %q

[[sql.users]]
name = "web"
password = %q
backend_user = "app"
backend_password = "secret"

[[groups]]
name = "main"
primary = %q
user = "app"
password = "secret"
invalidate = "none"
`, maxConns, addr, password, m.Addr)
	}
	path := filepath.Join(t.TempDir(), "keyway.toml")
	if err := os.WriteFile(path, []byte(config("old-pw", 1024)), 0o600); err != nil {
		t.Fatal(err)
	}
	kw := testenv.NewKeyway(t, "--config", path)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := testenv.WaitForPort(ctx, addr); err != nil {
		t.Fatalf("keyway's SQL door: %v\nkeyway:\n%s", err, kw.Output())
	}
	if n := login(t, addr, "web", "old-pw"); n != 0 {
		t.Fatalf("login with the first password: error %d\n%s", n, kw.Output())
	}

	// The new password, and a key that takes a restart.
	if err := os.WriteFile(path, []byte(config("new-pw", 2000)), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := kw.Cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the reload log line", func() (bool, string) {
		return strings.Contains(kw.Output(), "SIGHUP: configuration reloaded"), "no line"
	})
	if n := login(t, addr, "web", "new-pw"); n != 0 {
		t.Fatalf("login with the new password after SIGHUP: error %d\n%s", n, kw.Output())
	}
	if n := login(t, addr, "web", "old-pw"); n != 1045 {
		t.Fatalf("login with the old password after SIGHUP: error %d, want 1045\n%s", n, kw.Output())
	}
	out := kw.Output()
	for _, want := range []string{`applied=sql.users[0].password`,
		`msg="SIGHUP: these keys changed but take a restart; they keep their running values" keys=memcache.max_connections`} {
		if !strings.Contains(out, want) {
			t.Errorf("the log lacks %s:\n%s", want, out)
		}
	}
	if strings.Contains(out, "new-pw") || strings.Contains(out, "old-pw") {
		t.Errorf("the log shows a password:\n%s", out)
	}
}
