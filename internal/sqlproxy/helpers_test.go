package sqlproxy

import (
	"context"
	"crypto/tls"
	"database/sql"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"
	"github.com/keywaydb/keyway/internal/backend"
	"github.com/keywaydb/keyway/internal/testenv"
)

func TestMain(m *testing.M) { os.Exit(testenv.RunWithSharedMariaDB(m)) }

// mariadb is the package's shared MariaDB (each test uses its own tables).
func mariadb(t testing.TB) *testenv.MariaDB { return testenv.SharedMariaDB(t) }

// testSetup mirrors the config sections the SQL door is built from, so tests read like keyway.toml.
type testSetup struct {
	SQL struct {
		TLSCert, TLSKey  string
		AllowLocalInfile bool
		Users            []User
	}
	Groups []backend.GroupOptions
}

// testConfig is a setup with users app (mysql_native_password) and sha (caching_sha2_password, logging in to the
// backend as app) on group main at addr.
func testConfig(addr string) testSetup {
	var c testSetup
	c.SQL.Users = []User{
		{Name: "app", Password: "secret", AuthPlugin: "mysql_native_password"},
		{Name: "sha", Password: "shapass", AuthPlugin: "caching_sha2_password", BackendUser: "app", BackendPassword: "secret"},
	}
	c.Groups = []backend.GroupOptions{{
		Name: "main", Primary: backend.Member{Network: "tcp", Address: addr}, User: "app", Password: "secret",
		HealthInterval: 100 * time.Millisecond, ConnectTimeout: 2 * time.Second, MaxOpen: 8,
	}}
	return c
}

// options builds the SQL door's Options from c, with a topology closed when the test ends.
func (c testSetup) options(t testing.TB) Options {
	t.Helper()
	topo, err := backend.NewTopology(c.Groups)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(topo.Close)
	// Sessions spin as keyway's on Linux do (internal/server sets it), so every test runs through the spins.
	o := Options{Topology: topo, Users: c.SQL.Users, AllowLocalInfile: c.SQL.AllowLocalInfile, Logger: testLogger(t),
		Spin: 20 * time.Microsecond}
	if c.SQL.TLSCert != "" {
		cert, err := tls.LoadX509KeyPair(c.SQL.TLSCert, c.SQL.TLSKey)
		if err != nil {
			t.Fatal(err)
		}
		o.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	}
	return o
}

// with is c's Options changed by set.
func (c testSetup) with(t testing.TB, set func(*Options)) Options {
	o := c.options(t)
	set(&o)
	return o
}

// startProxy serves a Server built from cfg on a loopback port and returns it with its address.
func startProxy(t testing.TB, cfg testSetup, tweak ...func(*Server)) (*Server, string) {
	t.Helper()
	return startProxyOpts(t, cfg.options(t), tweak...)
}

// startProxyOpts is startProxy with every Option (a nil Logger logs to the test).
func startProxyOpts(t testing.TB, o Options, tweak ...func(*Server)) (*Server, string) {
	t.Helper()
	if o.Logger == nil {
		o.Logger = testLogger(t)
	}
	s, err := New(o)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	for _, f := range tweak {
		f(s)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return s, ln.Addr().String()
}

// open connects go-sql-driver to addr as user, database test; params are extra DSN parameters
// ("multiStatements=true&tls=skip-verify").
func open(t testing.TB, user, password, addr, params string) *sql.DB {
	t.Helper()
	dsn := fmt.Sprintf("%s:%s@tcp(%s)/test?timeout=5s&readTimeout=30s&writeTimeout=30s", user, password, addr)
	if params != "" {
		dsn += "&" + params
	}
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// proxyDB starts MariaDB (shared) and a proxy in front of it and returns a client as app.
func proxyDB(t testing.TB, params string) (*sql.DB, string, *Server) {
	t.Helper()
	m := mariadb(t)
	s, addr := startProxy(t, testConfig(m.Addr))
	return open(t, "app", "secret", addr, params), addr, s
}

func mustExec(t testing.TB, db interface {
	Exec(string, ...any) (sql.Result, error)
}, q string, args ...any) {
	t.Helper()
	if _, err := db.Exec(q, args...); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

// testLogger logs to the test at debug level when KEYWAY_TEST_DEBUG is set.
func testLogger(t testing.TB) *slog.Logger {
	level := slog.LevelWarn
	if os.Getenv("KEYWAY_TEST_DEBUG") != "" {
		level = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: level}))
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
