package testenv

import (
	"bufio"
	"database/sql"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"
)

func TestFreePort(t *testing.T) {
	p, err := FreePort()
	if err != nil {
		t.Fatal(err)
	}
	if p <= 0 || p > 65535 {
		t.Fatalf("FreePort() = %d", p)
	}
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
	if err != nil {
		t.Fatalf("port %d from FreePort is not bindable: %v", p, err)
	}
	l.Close()
}

func TestMemcached(t *testing.T) {
	m := NewMemcached(t, "-m", "64")
	c, err := net.DialTimeout("tcp", m.Addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte("version\r\n")); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(line, "VERSION 1.6") {
		t.Fatalf("version reply %q, want VERSION 1.6.x", line)
	}
}

func TestStopLeavesNoProcess(t *testing.T) {
	Need(t, "memcached")
	m, err := StartMemcached(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	pid := m.Process().Cmd.Process.Pid
	if err := m.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := m.Stop(); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
	if err := syscall.Kill(pid, 0); err != syscall.ESRCH {
		t.Fatalf("memcached pid %d still exists after Stop (kill 0: %v)", pid, err)
	}
	if _, err := net.DialTimeout("tcp", m.Addr, time.Second); err == nil {
		t.Fatalf("%s still accepts connections after Stop", m.Addr)
	}
}

func TestKillReportsUnexpectedExit(t *testing.T) {
	Need(t, "memcached")
	m, err := StartMemcached(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	p := m.Process()
	// Simulate a crash nobody asked for; Stop must report it.
	syscall.Kill(p.Cmd.Process.Pid, syscall.SIGKILL)
	<-p.Done()
	if err := m.Stop(); err == nil || !strings.Contains(err.Error(), "unexpectedly") {
		t.Fatalf("Stop after a crash = %v, want an unexpected-exit error", err)
	}
}

func TestMariaDB(t *testing.T) {
	m := NewMariaDB(t)
	db, err := sql.Open("mysql", m.AppDSN)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := t.Context()

	var one int
	if err := db.QueryRowContext(ctx, "SELECT 1").Scan(&one); err != nil {
		t.Fatalf("SELECT 1 as app over TCP (%s): %v", m.AppDSN, err)
	}
	if one != 1 {
		t.Fatalf("SELECT 1 = %d", one)
	}
	var logBin int
	var format, user, database string
	if err := db.QueryRowContext(ctx, "SELECT @@log_bin, @@binlog_format, CURRENT_USER(), DATABASE()").
		Scan(&logBin, &format, &user, &database); err != nil {
		t.Fatal(err)
	}
	if logBin != 1 || format != "ROW" {
		t.Fatalf("@@log_bin=%d @@binlog_format=%q, want 1 and ROW", logBin, format)
	}
	if user != "app@%" && user != "app@localhost" {
		t.Fatalf("CURRENT_USER() = %q, want app", user)
	}
	if database != "test" {
		t.Fatalf("DATABASE() = %q, want test", database)
	}

	// The app account may create tables and read the binlog position (what a
	// binlog follower needs).
	if _, err := db.ExecContext(ctx, "CREATE TABLE kv (k VARCHAR(250) PRIMARY KEY, v BLOB)"); err != nil {
		t.Fatal(err)
	}
	rows, err := db.QueryContext(ctx, "SHOW MASTER STATUS")
	if err != nil {
		t.Fatal(err)
	}
	if !rows.Next() {
		t.Fatal("SHOW MASTER STATUS returned no row: binlog is off")
	}
	rows.Close()

	var anon int
	root, err := sql.Open("mysql", m.RootDSN)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	if err := root.QueryRowContext(ctx, "SELECT COUNT(*) FROM mysql.user WHERE User = ''").Scan(&anon); err != nil {
		t.Fatalf("root over the socket (%s): %v", m.RootDSN, err)
	}
	if anon != 0 {
		t.Fatalf("%d anonymous accounts left", anon)
	}

	// Close the pools first: closing after Stop logs broken pipes.
	db.Close()
	root.Close()
	dir := filepath.Dir(m.DataDir) // the server's own directory, holding DataDir
	if err := m.Stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("MariaDB dir %s still exists after Stop (stat: %v)", dir, err)
	}
}

// standIn writes a shell script that plays `keyway serve -l HOST -p PORT`
// with body and returns its path.
func standIn(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "keyway")
	script := "#!/bin/sh\n[ \"$1\" = serve ] && [ \"$2\" = -l ] && [ \"$4\" = -p ] || { echo \"bad args: $*\" >&2; exit 2; }\n" + body + "\n"
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestStartKeywayBinaryWithStandIn(t *testing.T) {
	Need(t, "memcached")
	mc, err := LookPath("memcached")
	if err != nil {
		t.Fatal(err)
	}
	// memcached stands in for keyway's memcache door; the script insists on
	// the extra argument being passed through after -l and -p.
	bin := standIn(t, `[ "$6" = --extra ] || { echo "missing --extra: $*" >&2; exit 2; }
u=""; [ "$(id -u)" = 0 ] && u="-u root"
exec `+mc+` $u -l "$3" -p "$5" -U 0`)
	p, err := StartKeywayBinary(t.Context(), bin, "--extra")
	if err != nil {
		t.Fatal(err)
	}
	if err := WaitForPort(t.Context(), p.Addr); err != nil {
		t.Fatal(err)
	}
	if err := p.Stop(); err != nil {
		t.Fatal(err)
	}
	if !p.Exited() {
		t.Fatal("process not reaped after Stop")
	}
}

func TestStartKeywayBinaryReportsOutput(t *testing.T) {
	bin := standIn(t, `echo "keyway: config: boom" >&2; exit 1`)
	_, err := StartKeywayBinary(t.Context(), bin)
	if err == nil || !strings.Contains(err.Error(), "boom") {
		t.Fatalf("StartKeywayBinary of a failing binary = %v, want its stderr in the error", err)
	}
}
