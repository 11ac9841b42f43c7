package sqlproxy

// Logins with the account settings a user starts with: a user without auth_plugin logs in with its backend's own
// default plugin, so MariaDB's client library never loads its external caching_sha2_password plugin (whose loading
// races between threads connecting at once); a user set to caching_sha2_password still logs in with every client.

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keywaydb/keyway/internal/mysqlwire"
	"github.com/keywaydb/keyway/internal/testenv"
)

// withDefaultUser is c with user dflt/dpass, configured without an auth plugin, logging in to the backend as app.
func withDefaultUser(c testSetup) testSetup {
	c.SQL.Users = append(c.SQL.Users, User{Name: "dflt", Password: "dpass", BackendUser: "app", BackendPassword: "secret"})
	return c
}

// loginLog is a logger for the proxy that also counts its failed-login lines.
type loginLog struct {
	t      testing.TB
	mu     sync.Mutex
	failed []string
}

func (l *loginLog) Write(p []byte) (int, error) {
	line := strings.TrimRight(string(p), "\n")
	l.t.Log(line)
	if strings.Contains(line, "failed login") {
		l.mu.Lock()
		l.failed = append(l.failed, line)
		l.mu.Unlock()
	}
	return len(p), nil
}

func (l *loginLog) failures() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.failed...)
}

func TestServerPlugin(t *testing.T) {
	for _, c := range []struct {
		version string // "" = no handshake seen yet
		want    string
	}{
		{"", mysqlwire.NativePassword}, // unknown: the plugin keyway's greeting names
		{"10.11.14-MariaDB-0+deb12u2-log", mysqlwire.NativePassword},
		{"5.5.5-10.6.21-MariaDB", mysqlwire.NativePassword},
		{"11.8.3-MariaDB", mysqlwire.NativePassword},
		{"5.7.44-log", mysqlwire.NativePassword},
		{"8.0.36", mysqlwire.CachingSha2Password},
		{"8.4.5", mysqlwire.CachingSha2Password},
		{"9.3.0", mysqlwire.CachingSha2Password},
		{"10.0.1", mysqlwire.CachingSha2Password}, // a MySQL 10, should there be one
	} {
		var info *mysqlwire.ServerInfo
		if c.version != "" {
			info = &mysqlwire.ServerInfo{Version: c.version}
		}
		if got := serverPlugin(info); got != c.want {
			t.Errorf("server %q: default plugin %s, want %s", c.version, got, c.want)
		}
	}
}

// TestDefaultPluginFollowsBackend: against MariaDB, a user without auth_plugin logs in as a direct login would,
// with mysql_native_password and no plugin switch, and so does a name without an account (the decoy); with the
// backend down when keyway starts (its flavor unknown) the login goes as far as it can, and once the backend is
// up the next login succeeds.
func TestDefaultPluginFollowsBackend(t *testing.T) {
	m := mariadb(t)
	fw := testenv.NewRelay(t, m.Addr) // down until Up: keyway starts without having seen the backend
	c := withDefaultUser(testConfig(fw.Addr))
	c.SQL.Users = c.SQL.Users[2:] // dflt alone: an unknown name must look like it
	_, addr := startProxy(t, c)
	if got, _ := loginTranscript(t, addr, "dflt", "dpass"); got != "greeting err:1105" {
		t.Errorf("backend down: login transcript %q, want the password accepted without a switch, then ERR 1105", got)
	}
	if got, _ := loginTranscript(t, addr, "nobody", "dpass"); got != "greeting err:1045" {
		t.Errorf("backend down: unknown user's transcript %q, want %q", got, "greeting err:1045")
	}
	fw.Up(t)
	waitFor(t, func() bool {
		got, err := loginTranscript(t, addr, "dflt", "dpass")
		return got == "greeting ok" && err == nil
	})
	if got, _ := loginTranscript(t, addr, "nobody", "dpass"); got != "greeting err:1045" {
		t.Errorf("unknown user's transcript %q, want %q (no switch, as for dflt)", got, "greeting err:1045")
	}
	var n int
	if err := open(t, "dflt", "dpass", addr, "").QueryRow("SELECT 42").Scan(&n); err != nil || n != 42 {
		t.Fatalf("go-sql-driver as dflt: %d, %v", n, err)
	}
}

// TestLoginsAsDirect: with default account settings, twenty runs of sysbench with 16 threads connecting at once,
// the mariadb CLI, PHP mysqli and PDO, and go-sql-driver all log in through keyway without one failure; a user
// set to caching_sha2_password logs in with each of them too.
func TestLoginsAsDirect(t *testing.T) {
	testenv.Need(t, "sysbench")
	testenv.Need(t, "mariadb")
	testenv.Need(t, "php")
	testenv.NeedPHPModules(t, "mysqli", "pdo_mysql")
	cli, err := testenv.LookPath("mariadb")
	if err != nil {
		t.Fatal(err)
	}
	m := mariadb(t)
	mustExec(t, open(t, "app", "secret", m.Addr, ""), "CREATE DATABASE IF NOT EXISTS kw_logins")
	logs := &loginLog{t: t}
	c := withDefaultUser(testConfig(m.Addr))
	c.Groups[0].MaxOpen = 64 // a session holds its backend connection: 16 threads, and the runs' leftovers closing
	o := c.options(t)
	o.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	_, addr := startProxyOpts(t, o)
	host, port, _ := net.SplitHostPort(addr)

	sysbench := func(port, user, password string, args ...string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		argv := append([]string{"oltp_point_select", "--db-driver=mysql", "--mysql-host=127.0.0.1", "--mysql-port=" + port,
			"--mysql-user=" + user, "--mysql-password=" + password, "--mysql-db=kw_logins", "--tables=1", "--table-size=100"}, args...)
		out, err := exec.CommandContext(ctx, "sysbench", argv...).CombinedOutput()
		if err != nil || strings.Contains(string(out), "FATAL") {
			t.Fatalf("sysbench %s: %v\n%s", strings.Join(argv, " "), err, out)
		}
	}
	sysbench(strconv.Itoa(m.Port), "app", "secret", "prepare") // directly on MariaDB
	t.Cleanup(func() { sysbench(strconv.Itoa(m.Port), "app", "secret", "cleanup") })
	// Each run starts a process whose 16 threads connect at once: libmariadb's plugin loading, if a login asked
	// for caching_sha2_password, would race in every one of them.
	for range 20 {
		sysbench(port, "dflt", "dpass", "--threads=16", "--events=160", "--time=0", "--report-interval=0", "run")
	}
	// caching_sha2_password set explicitly: one thread, since libmariadb's race with many is its own (see README).
	sysbench(port, "sha", "shapass", "--threads=1", "--events=10", "--time=0", "--report-interval=0", "run")

	for _, u := range [][2]string{{"dflt", "dpass"}, {"sha", "shapass"}} {
		user, password := u[0], u[1]
		out, err := exec.Command(cli, "--no-defaults", "-h", host, "-P", port, "-u", user, "-p"+password, "--skip-ssl",
			"-N", "-e", "select 40 + 2").CombinedOutput()
		if err != nil || strings.TrimSpace(string(out)) != "42" {
			t.Errorf("mariadb CLI as %s: %v: %s", user, err, out)
		}
		out, err = exec.Command("php", "-r", phpLogin, host, port, user, password).CombinedOutput()
		if err != nil || string(out) != "mysqli 42\npdo 42\n" {
			t.Errorf("PHP as %s: %v: %s", user, err, out)
		}
		var n int
		if err := open(t, user, password, addr, "").QueryRow("SELECT 40 + 2").Scan(&n); err != nil || n != 42 {
			t.Errorf("go-sql-driver as %s: %d, %v", user, n, err)
		}
	}
	if f := logs.failures(); len(f) > 0 {
		t.Fatalf("%d failed logins:\n%s", len(f), strings.Join(f, "\n"))
	}
}

// phpLogin logs in with mysqli and with PDO (host port user password as arguments) and prints what each read.
var phpLogin = fmt.Sprintf(`
mysqli_report(MYSQLI_REPORT_ERROR | MYSQLI_REPORT_STRICT);
[$_, $host, $port, $user, $password] = $argv;
$m = new mysqli($host, $user, $password, "test", (int)$port);
echo "mysqli ", $m->query(%[1]q)->fetch_row()[0], "\n";
$pdo = new PDO("mysql:host=$host;port=$port;dbname=test", $user, $password, [PDO::ATTR_ERRMODE => PDO::ERRMODE_EXCEPTION]);
echo "pdo ", $pdo->query(%[1]q)->fetchColumn(), "\n";
`, "SELECT 40 + 2")
