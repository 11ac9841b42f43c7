package sqlproxy

import (
	"context"
	"database/sql"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/keywaydb/keyway/internal/testenv"
)

func TestTextQuery(t *testing.T) {
	db, _, _ := proxyDB(t, "")
	var n int
	var s string
	if err := db.QueryRow("SELECT 1 + 1, 'hello'").Scan(&n, &s); err != nil {
		t.Fatal(err)
	}
	if n != 2 || s != "hello" {
		t.Fatalf("got %d %q", n, s)
	}
	var dbname string
	if err := db.QueryRow("SELECT DATABASE()").Scan(&dbname); err != nil || dbname != "test" {
		t.Fatalf("database: %q %v", dbname, err)
	}
	// A statement error is an ERR to the client; the connection stays usable.
	_, err := db.Exec("SELECT * FROM no_such_table")
	var me *mysql.MySQLError
	if !errors.As(err, &me) || me.Number != 1146 {
		t.Fatalf("want error 1146, got %v", err)
	}
	if err := db.Ping(); err != nil {
		t.Fatal(err)
	}
}

func TestPreparedStatements(t *testing.T) {
	db, _, _ := proxyDB(t, "parseTime=true")
	mustExec(t, db, "DROP TABLE IF EXISTS ps")
	mustExec(t, db, "CREATE TABLE ps (id INT PRIMARY KEY, name VARCHAR(20), score DOUBLE, at DATETIME)")
	ins, err := db.Prepare("INSERT INTO ps VALUES (?, ?, ?, ?)")
	if err != nil {
		t.Fatal(err)
	}
	defer ins.Close()
	at := time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC)
	for i := 1; i <= 20; i++ {
		if _, err := ins.Exec(i, "n"+strings.Repeat("x", i%5), float64(i)/2, at); err != nil {
			t.Fatal(err)
		}
	}
	sel, err := db.Prepare("SELECT id, name, score, at FROM ps WHERE id > ? ORDER BY id")
	if err != nil {
		t.Fatal(err)
	}
	defer sel.Close()
	for range 3 {
		rows, err := sel.Query(10)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for rows.Next() {
			var id int
			var name string
			var score float64
			var got time.Time
			if err := rows.Scan(&id, &name, &score, &got); err != nil {
				t.Fatal(err)
			}
			n++
			if id != 10+n || score != float64(id)/2 {
				t.Fatalf("row %d: id %d score %v", n, id, score)
			}
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		rows.Close()
		if n != 10 {
			t.Fatalf("got %d rows, want 10", n)
		}
	}
	// A prepare error is an ERR; the session goes on.
	if _, err := db.Prepare("SELECT FROM WHERE"); err == nil {
		t.Fatal("bad prepare succeeded")
	}
	var v int
	if err := db.QueryRow("SELECT ? + 1", 41).Scan(&v); err != nil || v != 42 {
		t.Fatalf("got %d %v", v, err)
	}
}

func TestTransactions(t *testing.T) {
	db, _, _ := proxyDB(t, "")
	mustExec(t, db, "DROP TABLE IF EXISTS tx")
	mustExec(t, db, "CREATE TABLE tx (id INT PRIMARY KEY) ENGINE=InnoDB")
	tx, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	mustExec(t, tx, "INSERT INTO tx VALUES (1), (2)")
	var n int
	if err := tx.QueryRow("SELECT COUNT(*) FROM tx").Scan(&n); err != nil || n != 2 {
		t.Fatalf("inside: %d %v", n, err)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	if err := db.QueryRow("SELECT COUNT(*) FROM tx").Scan(&n); err != nil || n != 0 {
		t.Fatalf("after rollback: %d %v", n, err)
	}
	tx, err = db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	mustExec(t, tx, "INSERT INTO tx VALUES (3)")
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := db.QueryRow("SELECT COUNT(*) FROM tx").Scan(&n); err != nil || n != 1 {
		t.Fatalf("after commit: %d %v", n, err)
	}
}

func TestMultiStatements(t *testing.T) {
	db, _, _ := proxyDB(t, "multiStatements=true")
	mustExec(t, db, "DROP TABLE IF EXISTS ms; CREATE TABLE ms (id INT); INSERT INTO ms VALUES (1); INSERT INTO ms VALUES (2), (3)")
	rows, err := db.Query("SELECT id FROM ms ORDER BY id; SELECT 'a', 'b' UNION SELECT 'c', 'd'; SELECT COUNT(*) FROM ms")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var sets [][]string
	for {
		var set []string
		cols, _ := rows.Columns()
		for rows.Next() {
			vals := make([]sql.RawBytes, len(cols))
			ptrs := make([]any, len(cols))
			for i := range vals {
				ptrs[i] = &vals[i]
			}
			if err := rows.Scan(ptrs...); err != nil {
				t.Fatal(err)
			}
			var parts []string
			for _, v := range vals {
				parts = append(parts, string(v))
			}
			set = append(set, strings.Join(parts, ","))
		}
		sets = append(sets, set)
		if !rows.NextResultSet() {
			break
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	want := "[[1 2 3] [a,b c,d] [3]]"
	if got := fmtSets(sets); got != want {
		t.Fatalf("got %s, want %s", got, want)
	}
	// An error in the middle ends the reply; the connection goes on.
	if _, err := db.Exec("SELECT 1; SELECT * FROM nope; SELECT 2"); err == nil {
		t.Fatal("want an error")
	}
	var n int
	if err := db.QueryRow("SELECT 7").Scan(&n); err != nil || n != 7 {
		t.Fatalf("after error: %d %v", n, err)
	}
}

func fmtSets(sets [][]string) string {
	var b strings.Builder
	b.WriteString("[")
	for i, s := range sets {
		if i > 0 {
			b.WriteString(" ")
		}
		b.WriteString("[" + strings.Join(s, " ") + "]")
	}
	b.WriteString("]")
	return b.String()
}

// TestLargeResult streams 200k rows of 1000 bytes (~200 MB) through keyway and checks keyway's heap stays small.
func TestLargeResult(t *testing.T) {
	db, _, _ := proxyDB(t, "")
	const nrows = 200000
	var peak atomic.Uint64
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		var ms runtime.MemStats
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			runtime.ReadMemStats(&ms)
			if ms.HeapAlloc > peak.Load() {
				peak.Store(ms.HeapAlloc)
			}
		}
	}()
	rows, err := db.Query("SELECT seq, REPEAT('x', 1000) FROM seq_1_to_200000")
	if err != nil {
		t.Fatal(err)
	}
	var n, bytes int
	var id int
	var v sql.RawBytes
	for rows.Next() {
		if err := rows.Scan(&id, &v); err != nil {
			t.Fatal(err)
		}
		n++
		bytes += len(v)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	rows.Close()
	close(stop)
	<-done
	if n != nrows || bytes != nrows*1000 || id != nrows {
		t.Fatalf("got %d rows, %d bytes, last id %d", n, bytes, id)
	}
	// The whole result is 200 MB; the process (client and keyway together) must stay far below.
	if p := peak.Load(); p > 64<<20 {
		t.Fatalf("heap peaked at %d MiB while streaming: the result is being held", p>>20)
	}
	t.Logf("heap peak %d MiB", peak.Load()>>20)
}

func TestWrongPassword(t *testing.T) {
	m := mariadb(t)
	_, addr := startProxy(t, testConfig(m.Addr))
	for _, u := range []string{"app", "sha", "nobody"} {
		err := open(t, u, "wrong", addr, "").Ping()
		var me *mysql.MySQLError
		if !errors.As(err, &me) || me.Number != 1045 || me.SQLState != [5]byte{'2', '8', '0', '0', '0'} {
			t.Fatalf("%s: want 1045 (28000), got %v", u, err)
		}
		if !strings.Contains(me.Message, "Access denied for user '"+u+"'@'127.0.0.1' (using password: YES)") {
			t.Fatalf("%s: message %q", u, me.Message)
		}
	}
}

func TestAuthPlugins(t *testing.T) {
	m := mariadb(t)
	certFile, keyFile := testenv.SelfSignedCert(t, t.TempDir())
	cfg := testConfig(m.Addr)
	cfg.SQL.TLSCert, cfg.SQL.TLSKey = certFile, keyFile
	_, addr := startProxy(t, cfg)
	_, fullAddr := startProxy(t, cfg, func(s *Server) { s.cachingSha2FullAuth = true })
	cases := []struct {
		name, user, pass, addr, params string
	}{
		{"native", "app", "secret", addr, ""},
		{"native over TLS", "app", "secret", addr, "tls=skip-verify"},
		{"caching_sha2 fast path", "sha", "shapass", addr, ""},
		{"caching_sha2 fast path over TLS", "sha", "shapass", addr, "tls=skip-verify"},
		{"caching_sha2 full auth over TLS", "sha", "shapass", fullAddr, "tls=skip-verify"},
		{"caching_sha2 full auth with RSA", "sha", "shapass", fullAddr, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			db := open(t, c.user, c.pass, c.addr, c.params)
			var u string
			if err := db.QueryRow("SELECT CURRENT_USER()").Scan(&u); err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(u, "app@") { // both keyway users log in to the backend as app
				t.Fatalf("backend user %q", u)
			}
			// Wrong password on the same path.
			err := open(t, c.user, "nope", c.addr, c.params).Ping()
			var me *mysql.MySQLError
			if !errors.As(err, &me) || me.Number != 1045 {
				t.Fatalf("wrong password: want 1045, got %v", err)
			}
		})
	}
}

func TestLocalInfile(t *testing.T) {
	m := mariadb(t)
	file := filepath.Join(t.TempDir(), "rows.txt")
	if err := os.WriteFile(file, []byte("1\n2\n3\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	mysql.RegisterLocalFile(file)
	load := "LOAD DATA LOCAL INFILE '" + file + "' INTO TABLE li"

	_, addr := startProxy(t, testConfig(m.Addr))
	db := open(t, "app", "secret", addr, "")
	db.SetMaxOpenConns(1)
	mustExec(t, db, "DROP TABLE IF EXISTS li")
	mustExec(t, db, "CREATE TABLE li (id INT)")
	_, err := db.Exec(load)
	var me *mysql.MySQLError
	if !errors.As(err, &me) || me.Number != 1148 || !strings.Contains(me.Message, "allow_local_infile") {
		t.Fatalf("want refusal 1148 naming allow_local_infile, got %v", err)
	}
	var n int
	if err := db.QueryRow("SELECT COUNT(*) FROM li").Scan(&n); err != nil || n != 0 {
		t.Fatalf("after refusal: %d rows, %v", n, err)
	}

	cfg := testConfig(m.Addr)
	cfg.SQL.AllowLocalInfile = true
	_, addr2 := startProxy(t, cfg)
	db2 := open(t, "app", "secret", addr2, "")
	mustExec(t, db2, load)
	if err := db2.QueryRow("SELECT COUNT(*) FROM li").Scan(&n); err != nil || n != 3 {
		t.Fatalf("allowed: %d rows, %v", n, err)
	}
}

func TestClientVanishesMidTransaction(t *testing.T) {
	m := mariadb(t)
	cfg := testConfig(m.Addr)
	cfg.Groups[0].MaxOpen = 1 // one backend connection: the next session must get a clean one
	s, addr := startProxy(t, cfg)
	db := open(t, "app", "secret", addr, "")
	mustExec(t, db, "DROP TABLE IF EXISTS vt")
	mustExec(t, db, "CREATE TABLE vt (id INT PRIMARY KEY) ENGINE=InnoDB")
	db.Close()

	rc := newRawClient(t, addr, "app", "secret", 0)
	for _, q := range []string{"BEGIN", "INSERT INTO vt VALUES (1)", "SET @leak = 42"} {
		if _, err := rc.query(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if _, err := rc.query("SELECT GET_LOCK('vanish', 0)"); err != nil {
		t.Fatal(err)
	}
	rc.c.Close() // vanish without COM_QUIT

	db2 := open(t, "app", "secret", addr, "")
	waitFor(t, func() bool {
		for _, st := range s.PoolStats() {
			if st.InUse != 0 {
				return false
			}
		}
		return true
	})
	var n int
	var leak sql.NullInt64
	if err := db2.QueryRow("SELECT (SELECT COUNT(*) FROM vt), @leak").Scan(&n, &leak); err != nil {
		t.Fatal(err)
	}
	if n != 0 || leak.Valid {
		t.Fatalf("dirty: rows %d, @leak %v", n, leak)
	}
	// The server frees the named lock once it has finished closing the vanished session's connection, which it
	// does a moment after the close; a reused connection would hold it for ever.
	waitFor(t, func() bool {
		var free int
		if err := db2.QueryRow("SELECT IS_FREE_LOCK('vanish')").Scan(&free); err != nil {
			t.Fatal(err)
		}
		return free == 1
	})
}

func TestUnknownCommand(t *testing.T) {
	m := mariadb(t)
	_, addr := startProxy(t, testConfig(m.Addr))
	rc := newRawClient(t, addr, "app", "secret", 0)
	for _, cmd := range []byte{0x05 /* COM_CREATE_DB */, 0x0d /* COM_DEBUG */, 0x12 /* COM_BINLOG_DUMP */, 0x7f} {
		if err := rc.c.WriteCommand(cmd, []byte("x")); err != nil {
			t.Fatal(err)
		}
		p, err := rc.c.ReadPacket()
		if err != nil {
			t.Fatal(err)
		}
		if e := parseErr(p); e == nil || e.Code != 1047 {
			t.Fatalf("command 0x%02x: want ERR 1047, got %x", cmd, p)
		}
	}
	if res, err := rc.query("SELECT 5"); err != nil || len(res) != 1 || res[0] != "5" {
		t.Fatalf("after unknown commands: %v %v", res, err)
	}
}

// TestBackendDown cuts the backend off (connections reset, new ones refused), checks the client error names the
// group and address, that keyway keeps serving, and that it recovers when the backend returns.
func TestBackendDown(t *testing.T) {
	m := mariadb(t)
	fw := testenv.NewRelay(t, m.Addr)
	fw.Up(t)
	cfg := testConfig(fw.Addr)
	_, addr := startProxy(t, cfg)
	db := open(t, "app", "secret", addr, "")
	if err := db.Ping(); err != nil {
		t.Fatal(err)
	}
	fw.Down()
	// The live session lost its backend: the next statement fails (the driver may retry on a fresh connection,
	// which then fails to reach the backend).
	db.SetMaxIdleConns(0)
	_, err := db.Exec("SELECT 1")
	if err == nil {
		t.Fatal("query succeeded with the backend down")
	}
	err = open(t, "app", "secret", addr, "").Ping()
	var me *mysql.MySQLError
	if !errors.As(err, &me) || me.Number != 1105 || !strings.Contains(me.Message, "keyway: backend group main ("+fw.Addr+") unavailable: ") {
		t.Fatalf("want 1105 naming group and address, got %v", err)
	}
	// libmariadb (the mariadb CLI, PHP's mysqlnd-free builds, every C connector) shows keyway's message: a
	// client-range code in an ERR packet would come out as 2027 "Received malformed packet".
	testenv.Need(t, "mariadb")
	cli, err := testenv.LookPath("mariadb")
	if err != nil {
		t.Fatal(err)
	}
	host, port, _ := net.SplitHostPort(addr)
	out, _ := exec.Command(cli, "--no-defaults", "-h", host, "-P", port, "-u", "app", "-psecret", "--skip-ssl", "-e", "SELECT 1").CombinedOutput()
	if !strings.Contains(string(out), "ERROR 1105 (HY000)") || !strings.Contains(string(out), "keyway: backend group main") {
		t.Fatalf("mariadb CLI with the backend down printed %q, want keyway's ERROR 1105 and message", out)
	}
	fw.Up(t)
	// Recovery is eventual: a health check racing the relay's return may see one more EOF and restart the backoff.
	waitFor(t, func() bool {
		var n int
		return open(t, "app", "secret", addr, "").QueryRow("SELECT 3").Scan(&n) == nil && n == 3
	})
}

func waitFor(t testing.TB, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10s")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestShutdownEndsSessions(t *testing.T) {
	m := mariadb(t)
	s, err := New(testConfig(m.Addr).options(t))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := listenLoopback()
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(ln)
	db := open(t, "app", "secret", ln.Addr().String(), "")
	if err := db.Ping(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestMariaDBCLI runs the mariadb command-line client through keyway with either auth plugin, with and without TLS.
func TestMariaDBCLI(t *testing.T) {
	testenv.Need(t, "mariadb")
	cli, err := testenv.LookPath("mariadb")
	if err != nil {
		t.Fatal(err)
	}
	m := mariadb(t)
	certFile, keyFile := testenv.SelfSignedCert(t, t.TempDir())
	cfg := testConfig(m.Addr)
	cfg.SQL.TLSCert, cfg.SQL.TLSKey = certFile, keyFile
	_, addr := startProxy(t, cfg)
	host, port, _ := net.SplitHostPort(addr)
	for _, c := range []struct{ user, pass, ssl string }{
		{"app", "secret", "--skip-ssl"},
		{"sha", "shapass", "--skip-ssl"},
		{"app", "secret", "--ssl"},
		{"sha", "shapass", "--ssl"},
	} {
		out, err := exec.Command(cli, "--no-defaults", "-h", host, "-P", port, "-u", c.user, "-p"+c.pass, c.ssl,
			"--ssl-verify-server-cert=0", "-N", "-e", "select 40 + 2").CombinedOutput()
		if err != nil || strings.TrimSpace(string(out)) != "42" {
			t.Errorf("%s %s: %v: %s", c.user, c.ssl, err, out)
		}
	}
}

// TestBackendTooManyConnections: a backend that is full answers a new session's login with 1040; the client gets
// that 1040 (with keyway's note of the group), and the group is not marked down: the server is up, and the other
// pools keep their connections.
func TestBackendTooManyConnections(t *testing.T) {
	m := testenv.NewMariaDB(t)
	root, err := sql.Open("mysql", m.RootDSN)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	mustExec(t, root, "SET GLOBAL max_connections = 4")
	o := testConfig(m.Addr).options(t)
	_, addr := startProxyOpts(t, o)
	// Fill the server with direct connections (as app, which has SUPER and so one extra) until it refuses.
	var held []*sql.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	direct := open(t, "app", "secret", m.Addr, "")
	direct.SetMaxIdleConns(0) // a released connection closes, freeing its slot on the server
	for len(held) < 10 {
		c, err := direct.Conn(context.Background())
		if err == nil {
			err = c.PingContext(context.Background())
		}
		if err != nil {
			var me *mysql.MySQLError
			if !errors.As(err, &me) || me.Number != 1040 {
				t.Fatalf("filling the server: %v, want 1040", err)
			}
			break
		}
		held = append(held, c)
	}
	err = open(t, "app", "secret", addr, "").Ping()
	var me *mysql.MySQLError
	if !errors.As(err, &me) || me.Number != 1040 || !strings.Contains(me.Message, "keyway: backend group main") {
		t.Fatalf("a login through keyway with the backend full: %v, want 1040 naming the group", err)
	}
	if up, herr := o.Topology.Groups()[0].Healthy(); !up {
		t.Fatalf("a full backend was marked down: %v", herr)
	}
	held[0].Close()
	held = held[1:]
	waitFor(t, func() bool { return open(t, "app", "secret", addr, "").Ping() == nil })
}

// TestStaleBackendConnection: the server drops an idle session's backend connection (wait_timeout). A session with
// no state gets a new one at its next statement and never notices; a session with state has its client connection
// closed (as the server's close would look direct), not an error answered on a live socket, and keyway goes on.
func TestStaleBackendConnection(t *testing.T) {
	m := testenv.NewMariaDB(t)
	root, err := sql.Open("mysql", m.RootDSN)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	mustExec(t, root, "SET GLOBAL wait_timeout = 1") // connections keyway opens from now on time out after 1 s idle
	_, addr := startProxy(t, testConfig(m.Addr))
	ctx := context.Background()

	stateless := open(t, "app", "secret", addr, "")
	c, err := stateless.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var n int
	if err := c.QueryRowContext(ctx, "SELECT 1").Scan(&n); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2500 * time.Millisecond) // the server drops the backend connection
	tx, err := c.BeginTx(ctx, nil)
	if err != nil {
		t.Fatalf("BEGIN after the backend connection timed out: %v (want a transparent reconnect)", err)
	}
	if err := tx.QueryRowContext(ctx, "SELECT 2").Scan(&n); err != nil || n != 2 {
		t.Fatalf("in the transaction: %d %v", n, err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}

	// A session idle since its login: its first statement comes after the timeout.
	fresh, err := open(t, "app", "secret", addr, "").Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	time.Sleep(2500 * time.Millisecond)
	if err := fresh.QueryRowContext(ctx, "SELECT 4").Scan(&n); err != nil || n != 4 {
		t.Fatalf("first statement of a session idle since login: %d %v", n, err)
	}

	stateful, err := open(t, "app", "secret", addr, "").Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer stateful.Close()
	if _, err := stateful.ExecContext(ctx, "SET @kept = 1"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2500 * time.Millisecond)
	err = stateful.QueryRowContext(ctx, "SELECT @kept").Scan(&n)
	var me *mysql.MySQLError
	if err == nil || errors.As(err, &me) {
		t.Fatalf("a session whose state the server dropped: %v, want its connection closed (no result, no ERR)", err)
	}
	if err := open(t, "app", "secret", addr, "").QueryRow("SELECT 3").Scan(&n); err != nil || n != 3 {
		t.Fatalf("keyway after closing a stale session: %d %v", n, err)
	}
}
