package backend

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/keywaydb/keyway/internal/mysqlwire"
	"github.com/keywaydb/keyway/internal/testenv"
)

func TestMain(m *testing.M) {
	code := testenv.RunWithSharedMariaDB(m)
	stopTLSMariaDB()
	os.Exit(code)
}

// mariadb is the package's shared MariaDB (each test uses its own tables).
func mariadb(t testing.TB) *testenv.MariaDB { return testenv.SharedMariaDB(t) }

func newGroup(t *testing.T, primary string, mutate func(*GroupOptions)) *Group {
	o := GroupOptions{Name: "main", Primary: Member{Network: "tcp", Address: primary}, User: "app", Password: "secret",
		MaxOpen: 2, HealthInterval: 50 * time.Millisecond, ConnectTimeout: time.Second}
	if mutate != nil {
		mutate(&o)
	}
	g := NewGroup(o)
	t.Cleanup(g.Close)
	return g
}

// query runs a one-column text query on a backend connection and returns the first row's value.
func query(t *testing.T, c *Conn, q string) string {
	t.Helper()
	if err := c.WriteCommand(0x03, []byte(q)); err != nil {
		t.Fatal(err)
	}
	p, err := c.ReadPacket()
	if err != nil {
		t.Fatal(err)
	}
	if p[0] == mysqlwire.HeaderERR {
		t.Fatalf("%s: %v", q, mysqlwire.ParseError(p))
	}
	if p[0] == mysqlwire.HeaderOK {
		return ""
	}
	deprecate := c.Capabilities&mysqlwire.ClientDeprecateEOF != 0
	skip := 1
	if !deprecate {
		skip = 2
	}
	for range skip { // one column definition (+ EOF)
		if _, err := c.ReadPacket(); err != nil {
			t.Fatal(err)
		}
	}
	var val string
	for {
		p, err := c.ReadPacket()
		if err != nil {
			t.Fatal(err)
		}
		if p[0] == mysqlwire.HeaderEOF && len(p) < 0xffffff {
			return val
		}
		if val == "" {
			if p[0] == 0xfb {
				val = "NULL"
			} else {
				n, k, _ := mysqlwire.ReadLenEnc(p)
				val = string(p[k : k+int(n)])
			}
		}
	}
}

func TestPoolResetAndReuse(t *testing.T) {
	m := mariadb(t)
	g := newGroup(t, m.Addr, nil)
	p := g.Pool(PoolKey{User: "app", Caps: mysqlwire.ClientDeprecateEOF}, "secret")
	ctx := context.Background()
	c, err := p.Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if c.Capabilities&mysqlwire.ClientDeprecateEOF == 0 {
		t.Fatal("DEPRECATE_EOF not negotiated")
	}
	id := query(t, c, "SELECT CONNECTION_ID()")
	// A clean connection goes back with its state (the SQL door records it: state.go) and no reset.
	query(t, c, "SET @y = 6")
	c.Release()
	c, err = p.Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := query(t, c, "SELECT @y"); got != "6" {
		t.Fatalf("a clean connection was reset: @y = %s", got)
	}
	// A dirty one (state keyway does not carry) is reset before it serves again, and tracks state again.
	query(t, c, "SET @x = 5")
	query(t, c, "BEGIN")
	c.MarkDirty()
	c.Release()
	st := p.Stats()
	if st.Open != 1 || st.Idle != 1 || st.InUse != 0 {
		t.Fatalf("after release: %+v", st)
	}
	c, err = p.Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := query(t, c, "SELECT CONNECTION_ID()"); got != id {
		t.Fatalf("not reused: %s vs %s", got, id)
	}
	if got := query(t, c, "SELECT @x"); got != "NULL" {
		t.Fatalf("user variable survived the reset: %s", got)
	}
	if got := query(t, c, "SELECT @@in_transaction"); got != "0" {
		t.Fatalf("transaction survived the reset: %s", got)
	}
	if got := query(t, c, "SELECT @@session_track_system_variables"); got != "*" {
		t.Fatalf("session tracking after the reset: %s", got)
	}
	// A broken connection is closed, not pooled.
	c.MarkBroken()
	c.Release()
	if st := p.Stats(); st.Open != 0 || st.Idle != 0 {
		t.Fatalf("broken connection pooled: %+v", st)
	}
}

func TestPoolMaxOpenWaits(t *testing.T) {
	m := mariadb(t)
	g := newGroup(t, m.Addr, func(c *GroupOptions) { c.MaxOpen = 1; c.ConnectTimeout = 300 * time.Millisecond })
	p := g.Pool(PoolKey{User: "app"}, "secret")
	c, err := p.Get(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	// Exhausted: times out with a clear error.
	_, err = p.Get(context.Background())
	if err == nil || !strings.Contains(err.Error(), "max_open") {
		t.Fatalf("want a max_open error, got %v", err)
	}
	// A waiter gets the released connection.
	got := make(chan error, 1)
	go func() {
		c2, err := p.Get(context.Background())
		if err == nil {
			c2.Release()
		}
		got <- err
	}()
	time.Sleep(50 * time.Millisecond)
	c.Release()
	if err := <-got; err != nil {
		t.Fatalf("waiter: %v", err)
	}
	if st := p.Stats(); st.Waits != 2 || st.Open != 1 {
		t.Fatalf("stats %+v", st)
	}
}

func TestUnavailable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	g := newGroup(t, addr, nil)
	_, err = g.Pool(PoolKey{User: "app"}, "secret").Get(context.Background())
	var ue *UnavailableError
	if !errors.As(err, &ue) || !strings.HasPrefix(err.Error(), "keyway: backend group main ("+addr+") unavailable: ") {
		t.Fatalf("got %v", err)
	}
	if ok, _ := g.Healthy(); ok {
		t.Fatal("healthy with nothing listening")
	}
}

func TestLoginError(t *testing.T) {
	m := mariadb(t)
	g := newGroup(t, m.Addr, nil)
	_, err := g.Pool(PoolKey{User: "app"}, "wrong").Get(context.Background())
	var le *LoginError
	if !errors.As(err, &le) || !strings.Contains(err.Error(), "1045") {
		t.Fatalf("got %v", err)
	}
	if st := g.Pool(PoolKey{User: "app"}, "wrong").Stats(); st.Errors != 1 || st.Open != 0 {
		t.Fatalf("stats %+v", st)
	}
}

func TestMinIdleAndMonitor(t *testing.T) {
	m := mariadb(t)
	g := newGroup(t, m.Addr, func(c *GroupOptions) { c.MinIdle = 2; c.MaxOpen = 4; c.IdleTimeout = 200 * time.Millisecond })
	p := g.Pool(PoolKey{User: "app"}, "secret")
	deadline := time.Now().Add(5 * time.Second)
	for p.Stats().Idle < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("min_idle not reached: %+v", p.Stats())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if info := g.ServerInfo(); info == nil || !strings.Contains(info.Version, "MariaDB") {
		t.Fatalf("server info %+v", info)
	}
	if ok, err := g.Healthy(); !ok {
		t.Fatalf("unhealthy: %v", err)
	}
	// Unix socket primary.
	gs := newGroup(t, m.Socket, func(o *GroupOptions) { o.Primary.Network = "unix" })
	c, err := gs.Pool(PoolKey{User: "app"}, "secret").Get(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if got := query(t, c, "SELECT 1"); got != "1" {
		t.Fatalf("unix socket: %q", got)
	}
	c.Release()
}

// TestMonitorWithWrongPassword: a server that refuses the monitoring account is answering, so the group stays up;
// the refusal is logged once, not at every health check (it flapped "backend down"/"backend up" with client logins).
func TestMonitorWithWrongPassword(t *testing.T) {
	m := mariadb(t)
	var logs testenv.SyncBuffer
	g := newGroup(t, m.Addr, func(o *GroupOptions) {
		o.Password = "wrong"
		o.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	})
	time.Sleep(10 * 50 * time.Millisecond) // ten health checks
	if up, err := g.Healthy(); !up {
		t.Fatalf("a server that refuses the monitor's password was marked down: %v", err)
	}
	out := logs.String()
	if n := strings.Count(out, "refuses the group's account"); n != 1 {
		t.Errorf("the refusal was logged %d times, want once:\n%s", n, out)
	}
	if !strings.Contains(out, "fix the group's account (user, password) in [[groups]]") {
		t.Errorf("the refusal does not say the fix:\n%s", out)
	}
	if strings.Contains(out, "backend down") {
		t.Errorf("logged backend down:\n%s", out)
	}
}

// TestOutageLogsChangesOfState: a server that goes away for many health checks and comes back is two lines in the
// log, down (with the error's message) and up again (with the failed attempts counted), not one a check.
func TestOutageLogsChangesOfState(t *testing.T) {
	relay := testenv.NewRelay(t, mariadb(t).Addr)
	relay.Up(t)
	var logs testenv.SyncBuffer
	g := newGroup(t, relay.Addr, func(o *GroupOptions) {
		o.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	})
	waitHealthy := func(want bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for up, _ := g.Healthy(); up != want; up, _ = g.Healthy() {
			if time.Now().After(deadline) {
				t.Fatalf("the group's health did not become %v:\n%s", want, logs.String())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	// The monitor logged in (it read the budget on its connection): the outage starts from a group that is up.
	for deadline := time.Now().Add(10 * time.Second); g.MaxConnections() == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the monitor did not log in")
		}
	}
	waitHealthy(true)
	logs.Reset()
	relay.Down()
	waitHealthy(false)
	// Many health checks fail (HealthInterval is 50ms), and a client's dials meanwhile (those fail fast: the
	// group's own failures are what is counted).
	for range 10 {
		if _, err := g.Pool(PoolKey{User: "app"}, "secret").Get(context.Background()); err == nil {
			t.Fatal("a connection to a group that is down")
		}
		time.Sleep(50 * time.Millisecond)
	}
	relay.Up(t)
	waitHealthy(true)
	out := logs.String()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], "backend down") || !strings.Contains(lines[0], " err=") ||
		!strings.Contains(lines[1], "backend up again") {
		t.Fatalf("want two lines, down with its error and up again:\n%s", out)
	}
	var failed int
	if i := strings.Index(lines[1], "failed_attempts="); i < 0 {
		t.Fatalf("up again without the failed attempts counted: %s", lines[1])
	} else if _, err := fmt.Sscan(lines[1][i+len("failed_attempts="):], &failed); err != nil || failed < 2 {
		t.Fatalf("failed_attempts %d (%v), want the health checks that failed counted: %s", failed, err, lines[1])
	}
}
