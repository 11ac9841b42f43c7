package sqlproxy

import (
	"errors"
	"io"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/keywaydb/keyway/internal/mysqlwire"
	"github.com/keywaydb/keyway/internal/testenv"
)

// preAuthConn dials addr and reads keyway's greeting (or its ERR), as a client that has not logged in yet.
func preAuthConn(t *testing.T, addr string) (*mysqlwire.Conn, []byte) {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	c := mysqlwire.NewConn(nc)
	t.Cleanup(func() { c.Close() })
	_ = nc.SetDeadline(time.Now().Add(5 * time.Second))
	p, err := c.ReadPacket()
	if err != nil {
		t.Fatalf("greeting: %v", err)
	}
	return c, append([]byte(nil), p...)
}

// readAnySeq reads one physical packet from nc whatever its sequence id (a test that wrote raw bytes cannot keep a
// Conn's counter right).
func readAnySeq(nc net.Conn) ([]byte, error) {
	var h [4]byte
	if _, err := io.ReadFull(nc, h[:]); err != nil {
		return nil, err
	}
	p := make([]byte, int(h[0])|int(h[1])<<8|int(h[2])<<16)
	_, err := io.ReadFull(nc, p)
	return p, err
}

// expectErrThenClose reads one packet, checks it is ERR code, and checks the server then closes the connection,
// all within d.
func expectErrThenClose(t *testing.T, c *mysqlwire.Conn, code uint16, d time.Duration) *mysqlwire.Error {
	t.Helper()
	_ = c.SetDeadline(time.Now().Add(d))
	p, err := readAnySeq(c.NetConn())
	if err != nil {
		t.Fatalf("want ERR %d within %v, got %v", code, d, err)
	}
	e := parseErr(p)
	if e == nil || e.Code != code {
		t.Fatalf("want ERR %d, got %q", code, p)
	}
	var one [1]byte
	if _, err := c.NetConn().Read(one[:]); !errors.Is(err, io.EOF) {
		t.Fatalf("after ERR %d: want the connection closed, got %v", code, err)
	}
	return e
}

// TestPreAuthPacketBound: before login a client may send only a packet as large as a handshake response can be.
// A header announcing a 16 MiB − 1 packet (continued: 60 MB in all) gets ER_NET_PACKET_TOO_LARGE and a close at
// once, without keyway waiting for (and buffering) the body.
func TestPreAuthPacketBound(t *testing.T) {
	m := mariadb(t)
	_, addr := startProxy(t, testConfig(m.Addr))
	c, greeting := preAuthConn(t, addr)
	if greeting[0] != 10 {
		t.Fatalf("greeting %q", greeting)
	}
	// The handshake response carries sequence id 1; 0xffffff says "more follows".
	if _, err := c.NetConn().Write([]byte{0xff, 0xff, 0xff, 1}); err != nil {
		t.Fatal(err)
	}
	e := expectErrThenClose(t, c, mysqlwire.ERNetPacketTooLarge, 2*time.Second)
	if e.State != "08S01" {
		t.Fatalf("state %q", e.State)
	}
	// A real client with the largest connection attributes a driver sends still logs in.
	db := open(t, "app", "secret", addr, "connectionAttributes=k1:"+string(make20k('a'))+",k2:"+string(make20k('b')))
	if err := db.Ping(); err != nil {
		t.Fatalf("login with 40 KB of connection attributes: %v", err)
	}
}

func make20k(b byte) []byte {
	p := make([]byte, 20000)
	for i := range p {
		p[i] = b
	}
	return p
}

// TestHandshakeSlots: connections still logging in are bounded (Options.MaxHandshakes); past the bound a new one
// gets ER_CON_COUNT_ERROR and is closed; a silent client loses its slot at the handshake deadline
// (Options.HandshakeTimeout), told so with ER_NET_READ_INTERRUPTED, and the next client logs in.
func TestHandshakeSlots(t *testing.T) {
	m := mariadb(t)
	_, addr := startProxyOpts(t, testConfig(m.Addr).with(t, func(o *Options) { o.MaxHandshakes, o.HandshakeTimeout = 1, 700*time.Millisecond }))
	silent, _ := preAuthConn(t, addr) // holds the one slot, says nothing

	err := open(t, "app", "secret", addr, "").Ping()
	var me *mysql.MySQLError
	if !errors.As(err, &me) || me.Number != mysqlwire.ERConCount {
		t.Fatalf("second client while the slot is held: want 1040, got %v", err)
	}
	_, p := preAuthConn(t, addr)
	if e := parseErr(p); e == nil || e.Code != mysqlwire.ERConCount {
		t.Fatalf("raw client while the slot is held: want ERR 1040 instead of a greeting, got %q", p)
	}

	start := time.Now()
	expectErrThenClose(t, silent, mysqlwire.ERNetReadInterrupted, 3*time.Second)
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("silent client held its slot for %v", d)
	}
	waitFor(t, func() bool { return open(t, "app", "secret", addr, "").Ping() == nil })
}

// TestClientsGrown: Options.OnClientsGrown hears each new high of connected clients, rounded up to ClientsStep,
// once and in rising order, before the client is greeted; clients that leave and come back within the high make
// no call (the server gives Go's heap room for the most clients it has held).
func TestClientsGrown(t *testing.T) {
	m := mariadb(t)
	var mu sync.Mutex
	var highs []int64
	_, addr := startProxyOpts(t, testConfig(m.Addr).with(t, func(o *Options) {
		o.MaxHandshakes = 2 * ClientsStep
		o.OnClientsGrown = func(n int64) { mu.Lock(); highs = append(highs, n); mu.Unlock() }
	}))
	got := func() []int64 { mu.Lock(); defer mu.Unlock(); return slices.Clone(highs) }
	conns := make([]*mysqlwire.Conn, 0, ClientsStep+1)
	for range ClientsStep {
		c, _ := preAuthConn(t, addr)
		conns = append(conns, c)
	}
	if h := got(); !slices.Equal(h, []int64{ClientsStep}) {
		t.Fatalf("%d clients: highs %v, want [%d]", ClientsStep, h, ClientsStep)
	}
	c, _ := preAuthConn(t, addr)
	conns = append(conns, c)
	if h := got(); !slices.Equal(h, []int64{ClientsStep, 2 * ClientsStep}) {
		t.Fatalf("%d clients: highs %v, want [%d %d]", ClientsStep+1, h, ClientsStep, 2*ClientsStep)
	}
	for _, c := range conns {
		c.Close()
	}
	for range 3 {
		c, _ := preAuthConn(t, addr)
		c.Close()
	}
	if h := got(); !slices.Equal(h, []int64{ClientsStep, 2 * ClientsStep}) {
		t.Fatalf("clients back within the high: highs %v, want no new call", h)
	}
}

// TestRequireTLS: with Options.RequireTLS a client that does not switch to TLS is refused with ERR 1045 (as
// MariaDB refuses a REQUIRE SSL account) before any password exchange, whatever the name; over TLS it logs in.
func TestRequireTLS(t *testing.T) {
	m := mariadb(t)
	cfg := testConfig(m.Addr)
	if _, err := New(cfg.with(t, func(o *Options) { o.RequireTLS = true })); err == nil || !strings.Contains(err.Error(), "tls_cert") {
		t.Fatalf("RequireTLS without a certificate: want an error naming tls_cert, got %v", err)
	}
	cfg.SQL.TLSCert, cfg.SQL.TLSKey = testenv.SelfSignedCert(t, t.TempDir())
	var logs testenv.SyncBuffer
	_, addr := startProxyOpts(t, cfg.with(t, func(o *Options) {
		o.RequireTLS = true
		o.Logger = slog.New(slog.NewTextHandler(io.MultiWriter(&logs, testWriter{t}), &slog.HandlerOptions{Level: slog.LevelInfo}))
	}))
	for _, u := range []struct{ user, pass string }{{"app", "secret"}, {"sha", "shapass"}, {"app", "wrong"}, {"nobody", "x"}} {
		err := open(t, u.user, u.pass, addr, "tls=false").Ping()
		var me *mysql.MySQLError
		if !errors.As(err, &me) || me.Number != mysqlwire.ERAccessDenied || string(me.SQLState[:]) != "28000" ||
			!strings.HasPrefix(me.Message, "Access denied for user '"+u.user+"'@'127.0.0.1' (using password: YES)") ||
			!strings.Contains(me.Message, "TLS") {
			t.Fatalf("%s without TLS: want 1045 saying TLS is required, got %v", u.user, err)
		}
		got, _ := loginTranscript(t, addr, u.user, u.pass)
		if got != "greeting err:1045" {
			t.Fatalf("%s without TLS: keyway ran authentication before refusing: %s", u.user, got)
		}
	}
	// The refusals are logged as failed logins, naming the user and why (the log's bucket keeps the first 10). The
	// line follows the ERR the client reads, so it may come a moment later.
	waitFor(t, func() bool { return len(logLines(&logs, `msg="sql: failed login"`)) >= 8 })
	if lines := logLines(&logs, `msg="sql: failed login"`); len(lines) != 8 || !strings.Contains(lines[0], "no TLS, and sql.require_tls is set") ||
		!strings.Contains(lines[0], "Access denied for user 'app'@'127.0.0.1'") {
		t.Fatalf("want 8 failed-login lines saying TLS is required, got %d:\n%s", len(lines), logs.String())
	}
	for _, u := range []struct{ user, pass string }{{"app", "secret"}, {"sha", "shapass"}} {
		var n int
		if err := open(t, u.user, u.pass, addr, "tls=skip-verify").QueryRow("SELECT 6 * 7").Scan(&n); err != nil || n != 42 {
			t.Fatalf("%s over TLS: %d %v", u.user, n, err)
		}
	}
	if err := open(t, "app", "wrong", addr, "tls=skip-verify").Ping(); err == nil {
		t.Fatal("wrong password over TLS logged in")
	}
}

// loginFrom logs in as user from the loopback address local and returns the handshake error.
func loginFrom(t *testing.T, local, addr, user, password string) error {
	t.Helper()
	d := net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}}
	nc, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	_ = nc.SetDeadline(time.Now().Add(10 * time.Second))
	_, err = mysqlwire.ClientHandshake(mysqlwire.NewConn(nc), &mysqlwire.ClientConfig{User: user, Password: password, DB: "test"})
	return err
}

// TestAuthFailureThrottle: with Options.MaxAuthFailures, a client address that failed that many logins within
// the window gets ER_HOST_IS_BLOCKED instead of a greeting (even with the right password), other addresses are
// unaffected, and the address may try again once the window has let failures drain.
func TestAuthFailureThrottle(t *testing.T) {
	m := mariadb(t)
	_, addr := startProxyOpts(t, testConfig(m.Addr).with(t, func(o *Options) { o.MaxAuthFailures = 3 }),
		// 3 failures per 20 s: the burst below must land within ~6 s to block (robust on a loaded machine), and
		// one failure drains in ~7 s.
		func(s *Server) { s.throttle.window = 20 * time.Second })
	for i := range 3 {
		err := loginFrom(t, "127.0.0.1", addr, "app", "wrong")
		var me *mysqlwire.Error
		if !errors.As(err, &me) || me.Code != mysqlwire.ERAccessDenied {
			t.Fatalf("failure %d: want 1045, got %v", i+1, err)
		}
	}
	err := loginFrom(t, "127.0.0.1", addr, "app", "secret")
	var me *mysqlwire.Error
	if !errors.As(err, &me) || me.Code != mysqlwire.ERHostIsBlocked || !strings.Contains(me.Message, "Host '127.0.0.1' is blocked") {
		t.Fatalf("after 3 failures: want 1129 naming the host, got %v", err)
	}
	// go-sql-driver shows the same error.
	if err := open(t, "app", "secret", addr, "").Ping(); !errors.As(err, new(*mysql.MySQLError)) ||
		!strings.Contains(err.Error(), "1129") {
		t.Fatalf("go-sql-driver after 3 failures: want 1129, got %v", err)
	}
	if err := loginFrom(t, "127.0.0.2", addr, "app", "secret"); err != nil {
		t.Fatalf("another address is not blocked: %v", err)
	}
	// Let go once a failure has drained (about 7 s); allow three times that on a loaded machine.
	for deadline := time.Now().Add(30 * time.Second); loginFrom(t, "127.0.0.1", addr, "app", "secret") != nil; {
		if time.Now().After(deadline) {
			t.Fatal("127.0.0.1 still blocked 30 s after its failures")
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestAuthFailuresUnlimitedByDefault: without MaxAuthFailures, failures never block.
func TestAuthFailuresUnlimitedByDefault(t *testing.T) {
	m := mariadb(t)
	_, addr := startProxy(t, testConfig(m.Addr))
	for range 20 {
		_ = loginFrom(t, "127.0.0.1", addr, "app", "wrong")
	}
	if err := loginFrom(t, "127.0.0.1", addr, "app", "secret"); err != nil {
		t.Fatalf("after 20 failures without a limit: %v", err)
	}
}

// TestFailedLoginsLogged: each failed login is logged at warn with the user, the client's address and the reason,
// never the password; the line that blocks an address (MaxAuthFailures) says so; past loginLogBurst per address
// the lines stop (and the last one says so), while the failures still count.
func TestFailedLoginsLogged(t *testing.T) {
	m := mariadb(t)
	var logs testenv.SyncBuffer
	_, addr := startProxyOpts(t, testConfig(m.Addr).with(t, func(o *Options) {
		o.MaxAuthFailures = 3
		o.Logger = slog.New(slog.NewTextHandler(io.MultiWriter(&logs, testWriter{t}), &slog.HandlerOptions{Level: slog.LevelInfo}))
	}), func(s *Server) { s.throttle.window = time.Hour }) // nothing drains during the test
	_ = loginFrom(t, "127.0.0.1", addr, "app", "wrong-pw-1")
	_ = loginFrom(t, "127.0.0.1", addr, "nobody", "wrong-pw-2")
	_ = loginFrom(t, "127.0.0.1", addr, "sha", "wrong-pw-3")
	_ = loginFrom(t, "127.0.0.1", addr, "app", "secret") // blocked before the handshake: not a login, not logged
	if err := loginFrom(t, "127.0.0.2", addr, "app", "secret"); err != nil {
		t.Fatalf("another address: %v", err)
	}
	lines := logLines(&logs, `msg="sql: failed login"`)
	if len(lines) != 3 {
		t.Fatalf("want 3 failed-login lines, got %d:\n%s", len(lines), logs.String())
	}
	for i, want := range []string{
		`level=WARN msg="sql: failed login" user=app remote=127.0.0.1 reason="wrong password"`,
		`level=WARN msg="sql: failed login" user=nobody remote=127.0.0.1 reason="no such user"`,
		`level=WARN msg="sql: failed login" user=sha remote=127.0.0.1 reason="wrong password" blocked=`,
	} {
		if !strings.Contains(lines[i], want) {
			t.Errorf("line %d: %s\nwant it to contain %s", i+1, lines[i], want)
		}
	}
	if strings.Contains(logs.String(), "wrong-pw") || strings.Contains(logs.String(), "secret") {
		t.Fatalf("a password reached the log:\n%s", logs.String())
	}

	// Without MaxAuthFailures nothing blocks, so the log's own bucket bounds the lines per address.
	var quiet testenv.SyncBuffer
	_, addr = startProxyOpts(t, testConfig(m.Addr).with(t, func(o *Options) {
		o.Logger = slog.New(slog.NewTextHandler(&quiet, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}), func(s *Server) { s.loginLog.window = time.Hour })
	for range loginLogBurst + 5 {
		_ = loginFrom(t, "127.0.0.1", addr, "app", "wrong")
	}
	lines = logLines(&quiet, `msg="sql: failed login"`)
	if len(lines) != loginLogBurst || !strings.Contains(lines[len(lines)-1], "further failed logins from this address are not logged") {
		t.Fatalf("want %d failed-login lines, the last saying the rest are not logged; got %d:\n%s", loginLogBurst, len(lines), quiet.String())
	}
}

// logLines are the lines of b containing s.
func logLines(b *testenv.SyncBuffer, s string) []string {
	var out []string
	for _, l := range strings.Split(b.String(), "\n") {
		if strings.Contains(l, s) {
			out = append(out, l)
		}
	}
	return out
}
