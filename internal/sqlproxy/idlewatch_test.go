package sqlproxy

import (
	"context"
	"database/sql"
	"errors"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/keywaydb/keyway/internal/backend"
	"github.com/keywaydb/keyway/internal/testenv"
)

// TestPinnedIdlePastWaitTimeout: a go-sql-driver pool's connection pinned by SET wait_timeout = 2 idles past it;
// the server closes keyway's backend connection, keyway closes the client's at once, so the driver's liveness
// check sees it closed and the next BEGIN succeeds on a fresh connection: the same as direct to MariaDB, which
// the test runs alongside as the reference.
func TestPinnedIdlePastWaitTimeout(t *testing.T) {
	m := mariadb(t)
	_, addr := startProxy(t, testConfig(m.Addr))
	var wg sync.WaitGroup
	for _, c := range []struct{ name, addr string }{{"direct", m.Addr}, {"through keyway", addr}} {
		db := open(t, "app", "secret", c.addr, "")
		wg.Go(func() {
			db.SetMaxOpenConns(1) // one connection: the BEGIN gets the one that idled, if the driver keeps it
			if _, err := db.Exec("SET SESSION wait_timeout = 2"); err != nil {
				t.Errorf("%s: SET wait_timeout: %v", c.name, err)
				return
			}
			time.Sleep(3 * time.Second)
			tx, err := db.Begin()
			if err != nil {
				t.Errorf("%s: BEGIN after idling past wait_timeout: %v", c.name, err)
				return
			}
			defer tx.Rollback()
			var timeout int
			if err := tx.QueryRow("SELECT @@session.wait_timeout").Scan(&timeout); err != nil || timeout == 2 {
				t.Errorf("%s: in the new transaction wait_timeout = %d, %v; want a fresh session's", c.name, timeout, err)
			}
			if err := tx.Commit(); err != nil {
				t.Errorf("%s: COMMIT: %v", c.name, err)
			}
		})
	}
	wg.Wait()
}

// TestPinnedBackendKilledClosesClient: the server kills a pinned session's backend connection while the session
// is idle; the client's connection is closed without the client sending anything. An unpinned session's is not
// watched and stays open: its next statement after staleAfter runs on a new backend connection (freshBackend).
func TestPinnedBackendKilledClosesClient(t *testing.T) {
	m := mariadb(t)
	_, addr := startProxy(t, testConfig(m.Addr))
	root, err := sql.Open("mysql", m.RootDSN)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	backendID := func(rc *rawClient) string {
		t.Helper()
		res, err := rc.query("SELECT CONNECTION_ID()")
		if err != nil || len(res) != 1 {
			t.Fatalf("CONNECTION_ID(): %v %v", res, err)
		}
		return res[0]
	}

	pinned := newRawClient(t, addr, "app", "secret", 0)
	if _, err := pinned.query("SET @kept = 1"); err != nil { // a user variable: the session is pinned
		t.Fatal(err)
	}
	free := newRawClient(t, addr, "app", "secret", 0)
	pinnedID, freeID := backendID(pinned), backendID(free)
	// CONNECTION_ID() pins (pipeline.go's pinTable); COM_RESET_CONNECTION, on the same backend connection,
	// unpins the free session again.
	if err := free.c.WriteCommand(0x1f, nil); err != nil {
		t.Fatal(err)
	}
	if p, err := free.c.ReadPacket(); err != nil || p[0] != 0 {
		t.Fatalf("COM_RESET_CONNECTION: %x %v", p, err)
	}
	mustExec(t, root, "KILL CONNECTION "+pinnedID)
	mustExec(t, root, "KILL CONNECTION "+freeID)

	_ = pinned.c.SetDeadline(time.Now().Add(10 * time.Second))
	if p, err := pinned.c.ReadPacket(); !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("pinned session after its backend connection was killed: read %q, %v; want its connection closed", p, err)
	}
	time.Sleep(staleAfter) // the idle time after which a session looks at its backend connection before using it
	if res, err := free.query("SELECT 7"); err != nil || len(res) != 1 || res[0] != "7" {
		t.Fatalf("unpinned session after its backend connection was killed: %v %v; want a new one to answer", res, err)
	}
}

// TestIdleWatchRacesCommands: a pinned session's commands arrive around the moment its idle watch starts, so
// the session stops a watch that is starting or waiting; every command is answered on the session's own backend
// connection (run it with -race).
func TestIdleWatchRacesCommands(t *testing.T) {
	m := mariadb(t)
	_, addr := startProxy(t, testConfig(m.Addr))
	db := open(t, "app", "secret", addr, "")
	conn, err := db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx := context.Background()
	if _, err := conn.ExecContext(ctx, "SET @n = 0"); err != nil {
		t.Fatal(err)
	}
	for i := range 40 {
		// Pauses from half a tick to three ticks: the watcher starts after one to two; some commands come before
		// it, some as it starts, some while it waits.
		time.Sleep(idleWatchTick/2 + time.Duration(i%20)*idleWatchTick/8)
		var n int
		if err := conn.QueryRowContext(ctx, "SELECT @n := @n + 1").Scan(&n); err != nil || n != i+1 {
			t.Fatalf("command %d: @n = %d, %v; want %d on the same session", i+1, n, err, i+1)
		}
	}
}

// TestIdleWatchTLSBackend: over TLS to the backend, a pinned session idle long enough to be watched keeps its
// connection and state (nothing the server sent after the handshake is taken for a close), and the server's close
// still closes the client's connection.
func TestIdleWatchTLSBackend(t *testing.T) {
	ca, cert, key := testenv.CertAuthority(t, t.TempDir())
	m := testenv.NewMariaDBWith(t, testenv.MariaDBOptions{SSLCert: cert, SSLKey: key, SSLCA: ca})
	c := testConfig(m.Addr)
	c.Groups[0].TLS = backend.TLSRequired
	_, addr := startProxy(t, c)
	rc := newRawClient(t, addr, "app", "secret", 0)
	if _, err := rc.query("SET @kept = 42"); err != nil {
		t.Fatal(err)
	}
	if res, err := rc.query("SELECT VARIABLE_VALUE FROM information_schema.SESSION_STATUS WHERE VARIABLE_NAME = 'Ssl_cipher'"); err != nil || len(res) != 1 || res[0] == "" {
		t.Fatalf("the backend connection is not TLS: Ssl_cipher %q, %v", res, err)
	}
	time.Sleep(4 * idleWatchTick) // idle past the two looks after which a watcher waits on the backend socket
	if res, err := rc.query("SELECT @kept"); err != nil || len(res) != 1 || res[0] != "42" {
		t.Fatalf("after idling: @kept = %q, %v; want the session's own connection", res, err)
	}
	res, err := rc.query("SELECT CONNECTION_ID()")
	if err != nil || len(res) != 1 {
		t.Fatalf("CONNECTION_ID(): %v %v", res, err)
	}
	root, err := sql.Open("mysql", m.RootDSN)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	mustExec(t, root, "KILL CONNECTION "+res[0])
	_ = rc.c.SetDeadline(time.Now().Add(10 * time.Second))
	if p, err := rc.c.ReadPacket(); !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("after the server killed the TLS backend connection: read %q, %v; want the client's connection closed", p, err)
	}
}
