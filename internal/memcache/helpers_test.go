package memcache

import (
	"bufio"
	"context"
	"database/sql"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/keywaydb/keyway/internal/engine"
	"github.com/keywaydb/keyway/internal/store"
	"github.com/keywaydb/keyway/internal/testenv"
)

// newTestServer starts an in-process door on a free loopback port over a
// fresh 64 MiB memory-only store and returns its address.
func newTestServer(t testing.TB) string {
	t.Helper()
	st, err := store.Open(store.Options{MemoryLimit: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return serveTest(t, NewServer(engine.New(st, engine.Options{MaxItemSize: 1 << 20}), Options{MaxConnections: 64}))
}

// serveTest serves srv on a free loopback port until the test ends and
// returns the address.
func serveTest(t testing.TB, srv *Server) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return ln.Addr().String()
}

// testClient is a raw protocol client for transcripts.
type testClient struct {
	t  testing.TB
	nc net.Conn
	br *bufio.Reader
}

func dialTest(t testing.TB, addr string) *testClient {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	return &testClient{t: t, nc: nc, br: bufio.NewReader(nc)}
}

func (c *testClient) send(s string) {
	c.t.Helper()
	if _, err := c.nc.Write([]byte(s)); err != nil {
		c.t.Fatal(err)
	}
}

// expect reads len(want) bytes and compares.
func (c *testClient) expect(want string) {
	c.t.Helper()
	c.nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	got := make([]byte, len(want))
	n, err := readFull(c.br, got)
	if err != nil || string(got) != want {
		c.t.Fatalf("got %q (err %v), want %q", got[:n], err, want)
	}
}

// expectClosed checks the server closed the connection.
func (c *testClient) expectClosed() {
	c.t.Helper()
	c.nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	rest, err := c.br.ReadString('\n')
	if err == nil {
		c.t.Fatalf("connection still open; read %q", rest)
	}
	if strings.Contains(err.Error(), "timeout") {
		c.t.Fatalf("connection not closed: %v", err)
	}
}

func readFull(br *bufio.Reader, b []byte) (int, error) {
	n := 0
	for n < len(b) {
		m, err := br.Read(b[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// newTableRig is what a door over containers needs: a private MariaDB, where stmts run as root first, a pool for the
// containers (as the app account), and an engine over a fresh memory-only store. Both pools close with the test.
func newTableRig(t *testing.T, stmts ...string) (root, db *sql.DB, eng *engine.Engine) {
	t.Helper()
	return newTableRigOn(t, testenv.NewMariaDB(t), stmts...)
}

// newTableRigOn is newTableRig over m.
func newTableRigOn(t *testing.T, m *testenv.MariaDB, stmts ...string) (root, db *sql.DB, eng *engine.Engine) {
	t.Helper()
	root, err := sql.Open("mysql", m.RootDSN)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { root.Close() })
	for _, q := range stmts {
		if _, err := root.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	db, err = sql.Open("mysql", m.AppDSN)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	st, err := store.Open(store.Options{MemoryLimit: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return root, db, engine.New(st, engine.Options{MaxItemSize: 1 << 20})
}
