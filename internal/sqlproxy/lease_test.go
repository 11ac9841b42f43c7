package sqlproxy

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/keywaydb/keyway/internal/qcache"
	"github.com/keywaydb/keyway/internal/stats"
	"github.com/keywaydb/keyway/internal/testenv"
	"github.com/keywaydb/keyway/internal/validity"
)

// TestThousandClients: 1,000 client connections (go-sql-driver and PHP mysqli, open at once) through keyway to a
// MariaDB started with max_connections = 50 all run their queries, and MariaDB never sees more connections than
// keyway's budget for the group (plus the test's own and the health monitor's).
func TestThousandClients(t *testing.T) {
	testenv.NeedPHPModules(t, "mysqli")
	m := testenv.NewMariaDBWith(t, testenv.MariaDBOptions{MaxConnections: 50})
	direct := open(t, "app", "secret", m.Addr, "")
	direct.SetMaxOpenConns(1)
	mustExec(t, direct, "CREATE TABLE lease_many (id INT PRIMARY KEY, c INT)")
	mustExec(t, direct, "INSERT INTO lease_many SELECT seq, seq * 10 FROM seq_1_to_100")
	mustExec(t, direct, "FLUSH STATUS") // Max_used_connections counts from here

	const budget = 8 // all of keyway's pools together
	cfg := testConfig(m.Addr)
	cfg.Groups[0].MaxConnections = budget
	cfg.Groups[0].MaxOpen = budget
	_, addr := startProxy(t, cfg)

	const goClients, phpClients = 700, 300
	var wg sync.WaitGroup
	phpOut := make(chan string, 1)
	wg.Go(func() {
		host, port, _ := net.SplitHostPort(addr)
		out, err := exec.Command("php", "-r", phpMany, host, port, strconv.Itoa(phpClients)).CombinedOutput()
		if err != nil {
			out = append(out, []byte(err.Error())...)
		}
		phpOut <- string(out)
	})

	db := open(t, "app", "secret", addr, "")
	db.SetMaxOpenConns(goClients)
	db.SetMaxIdleConns(goClients)
	ctx := context.Background()
	conns := make([]*sql.Conn, goClients)
	errs := make(chan error, goClients)
	for i := range conns { // all open at once: each is its own client connection to keyway
		c, err := db.Conn(ctx)
		if err != nil {
			t.Fatalf("client %d connects: %v", i, err)
		}
		conns[i] = c
	}
	for i, c := range conns {
		wg.Go(func() {
			defer c.Close()
			for k := range 3 {
				id := (i+k)%100 + 1
				var got int
				if err := c.QueryRowContext(ctx, "SELECT c FROM lease_many WHERE id = "+strconv.Itoa(id)).Scan(&got); err != nil {
					errs <- fmt.Errorf("client %d: %v", i, err)
					return
				}
				if got != id*10 {
					errs <- fmt.Errorf("client %d: id %d gave %d", i, id, got)
					return
				}
			}
			if _, err := c.ExecContext(ctx, "UPDATE lease_many SET c = c WHERE id = ?", i%100+1); err != nil {
				errs <- fmt.Errorf("client %d update: %v", i, err)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if out := <-phpOut; !strings.Contains(out, fmt.Sprintf("ok %d", phpClients)) {
		t.Errorf("PHP clients: %s", out)
	}
	var name string
	var used int
	if err := direct.QueryRow("SHOW GLOBAL STATUS LIKE 'Max_used_connections'").Scan(&name, &used); err != nil {
		t.Fatal(err)
	}
	// keyway's budget, the test's direct connection and the health monitor's.
	if used > budget+2 {
		t.Errorf("MariaDB saw %d connections at once; keyway's budget is %d", used, budget)
	}
	t.Logf("%d clients, MariaDB's Max_used_connections %d", goClients+phpClients, used)
}

// phpMany opens N mysqli connections to keyway (host port N as arguments), all open at once, runs a query on each
// and prints "ok N" when every one answered right.
const phpMany = `
[$host, $port, $n] = [$argv[1], (int)$argv[2], (int)$argv[3]];
mysqli_report(MYSQLI_REPORT_ERROR | MYSQLI_REPORT_STRICT);
$conns = [];
for ($i = 0; $i < $n; $i++) {
	$conns[] = new mysqli($host, "app", "secret", "test", $port);
}
$ok = 0;
foreach ($conns as $i => $c) {
	$id = $i % 100 + 1;
	$r = $c->query("SELECT c FROM lease_many WHERE id = $id")->fetch_row();
	if ((int)$r[0] === $id * 10) { $ok++; }
}
foreach ($conns as $c) { $c->close(); }
echo "ok $ok\n";
`

// stateClient is one client session of TestStateAcrossConnections: how it sets itself up, on keyway and direct.
type stateClient struct {
	name       string
	setup      []string
	proxy, dir *rawClient
}

// TestStateAcrossConnections: clients with different default databases, character sets, time zones and sql_modes
// (one set with CONCAT(@@sql_mode, …), which keyway must not evaluate) interleave their statements on a pool of 2
// connections, and every reply is byte for byte what the same client gets connected directly (every packet:
// column definitions, rows, status flags, errors), with the result cache off and on.
func TestStateAcrossConnections(t *testing.T) {
	m := mariadb(t)
	direct := open(t, "app", "secret", m.Addr, "")
	mustExec(t, direct, "CREATE DATABASE IF NOT EXISTS lease_other")
	for _, db := range []string{"test", "lease_other"} {
		mustExec(t, direct, "DROP TABLE IF EXISTS "+db+".lease_state")
		mustExec(t, direct, "CREATE TABLE "+db+".lease_state (id INT PRIMARY KEY, c VARCHAR(20)) CHARACTER SET utf8mb4")
		mustExec(t, direct, "INSERT INTO "+db+".lease_state VALUES (1, 'é in "+db+"'), (2, 'ß')")
	}
	probes := []string{
		"SELECT @@character_set_client, @@character_set_results, @@collation_connection, @@time_zone, @@sql_mode, DATABASE()",
		"SELECT FROM_UNIXTIME(0), 'é', CHARSET('x'), COLLATION('x')",
		"SELECT c FROM lease_state WHERE id = 1", // a point select: cached when the cache is on
		"SELECT c FROM lease_state WHERE id = 2",
		`SELECT "quoted"`, // an identifier under ANSI_QUOTES: an error there, a string elsewhere
	}
	for _, cached := range []bool{false, true} {
		t.Run(map[bool]string{false: "uncached", true: "cached"}[cached], func(t *testing.T) {
			cfg := testConfig(m.Addr)
			cfg.Groups[0].MaxOpen = 2
			o := cfg.options(t)
			var cache *qcache.Cache
			if cached {
				reg := validity.NewRegistry()
				cache = qcache.New(qcache.Options{Registry: reg})
				o.Validity, o.Cache = reg, cache
			}
			_, addr := startProxyOpts(t, o)
			clients := []*stateClient{
				{name: "latin1 in lease_other", setup: []string{"USE lease_other", "SET NAMES latin1"}},
				{name: "utf8mb4 at +05:00", setup: []string{"SET NAMES utf8mb4 COLLATE utf8mb4_unicode_ci", "SET time_zone = '+05:00'"}},
				{name: "ANSI_QUOTES added", setup: []string{"SET SESSION sql_mode = CONCAT(@@sql_mode, ',ANSI_QUOTES')"}},
				{name: "character set latin1", setup: []string{"SET CHARACTER SET latin1"}},
				{name: "as connected", setup: nil},
			}
			for _, c := range clients {
				c.proxy = newRawClient(t, addr, "app", "secret", 0)
				c.dir = newRawClient(t, m.Addr, "app", "secret", 0)
				for _, q := range c.setup {
					got, err := c.proxy.queryRaw(q)
					want, derr := c.dir.queryRaw(q)
					if err != nil || derr != nil || !bytes.Equal(got, want) {
						t.Fatalf("%s: %s: keyway %q %v, direct %q %v", c.name, q, got, err, want, derr)
					}
				}
			}
			for round := range 3 {
				for _, q := range probes {
					for _, c := range clients { // each probe from each client in turn: the pool of 2 is shared
						got, err := c.proxy.queryRaw(q)
						want, derr := c.dir.queryRaw(q)
						if err != nil || derr != nil || !bytes.Equal(got, want) {
							t.Errorf("round %d, %s, %s:\n keyway %q %v\n direct %q %v", round, c.name, q, got, err, want, derr)
						}
					}
				}
			}
			if cached && cache.Stats().Hits == 0 {
				t.Error("no probe was answered from the cache")
			}
		})
	}
}

// TestDiagnosticsAcrossLeases: LAST_INSERT_ID() several statements after the insert, FOUND_ROWS(), ROW_COUNT() and
// SHOW WARNINGS give what they give connected directly, while another session's statements share the pool's
// connections in between.
func TestDiagnosticsAcrossLeases(t *testing.T) {
	m := mariadb(t)
	direct := open(t, "app", "secret", m.Addr, "")
	mustExec(t, direct, "DROP TABLE IF EXISTS lease_diag")
	mustExec(t, direct, "CREATE TABLE lease_diag (id INT AUTO_INCREMENT PRIMARY KEY, c INT)")
	mustExec(t, direct, "INSERT INTO lease_diag (c) VALUES (1), (2), (3), (4), (5)")
	cfg := testConfig(m.Addr)
	cfg.Groups[0].MaxOpen = 2
	_, addr := startProxy(t, cfg)
	proxy := open(t, "app", "secret", addr, "")
	ctx := context.Background()
	a, err := proxy.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := proxy.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	one := func(c *sql.Conn, q string) string {
		t.Helper()
		var v sql.NullString
		if err := c.QueryRowContext(ctx, q).Scan(&v); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		return v.String
	}
	exec := func(c *sql.Conn, q string) {
		t.Helper()
		if _, err := c.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}

	exec(a, "INSERT INTO lease_diag (c) VALUES (10)")
	aID := one(a, "SELECT MAX(id) FROM lease_diag")
	exec(b, "INSERT INTO lease_diag (c) VALUES (20)") // b's LAST_INSERT_ID() is another, on whichever connection
	exec(b, "INSERT INTO lease_diag (c) VALUES (21)")
	one(a, "SELECT 1")
	one(b, "SELECT 1")
	if got := one(a, "SELECT LAST_INSERT_ID()"); got != aID {
		t.Errorf("LAST_INSERT_ID() three statements after a's insert = %s, want %s", got, aID)
	}
	if got := one(a, "SELECT LAST_INSERT_ID() + 0"); got != aID {
		t.Errorf("LAST_INSERT_ID() again = %s, want %s", got, aID)
	}

	one(a, "SELECT SQL_CALC_FOUND_ROWS id FROM lease_diag WHERE c < 10 LIMIT 2")
	if got := one(a, "SELECT FOUND_ROWS()"); got != "5" {
		t.Errorf("FOUND_ROWS() = %s, want 5", got)
	}
	exec(a, "UPDATE lease_diag SET c = c + 100 WHERE c < 4")
	if got := one(a, "SELECT ROW_COUNT()"); got != "3" {
		t.Errorf("ROW_COUNT() = %s, want 3", got)
	}
	one(b, "SELECT 1/0") // a warning, on b's connection
	one(a, "SELECT 1")
	if got := one(a, "SELECT @@warning_count"); got != "0" {
		t.Errorf("a's @@warning_count after a statement without warnings = %s (another session's?)", got)
	}
	if got := one(b, "SELECT @@warning_count"); got != "1" {
		t.Errorf("b's @@warning_count after SELECT 1/0 = %s, want 1", got)
	}
	one(a, "SELECT 1/0")
	rows, err := a.QueryContext(ctx, "SHOW WARNINGS")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for rows.Next() {
		n++
	}
	rows.Close()
	if n != 1 {
		t.Errorf("SHOW WARNINGS after SELECT 1/0: %d rows, want 1", n)
	}
}

// TestSysbenchOnSmallPool: sysbench (libmariadb, server-side prepared statements) runs oltp_point_select at 64
// threads and oltp_read_write at 8 through keyway on a pool of 8 connections without an error: statements of 64
// sessions run on 8 connections, each prepared where it runs.
func TestSysbenchOnSmallPool(t *testing.T) {
	testenv.Need(t, "sysbench")
	m := mariadb(t)
	direct := open(t, "app", "secret", m.Addr, "")
	mustExec(t, direct, "CREATE DATABASE IF NOT EXISTS lease_sb")
	cfg := testConfig(m.Addr)
	cfg.Groups[0].MaxOpen = 8
	s, addr := startProxy(t, cfg)
	host, port, _ := net.SplitHostPort(addr)
	common := []string{"--db-driver=mysql", "--mysql-host=" + host, "--mysql-port=" + port, "--mysql-user=app",
		"--mysql-password=secret", "--mysql-db=lease_sb", "--tables=4", "--table-size=10000", "--db-ps-mode=auto"}
	run := func(args ...string) string {
		t.Helper()
		out, err := exec.Command("sysbench", append(args, common...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("sysbench %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	run("oltp_common", "cleanup")
	run("oltp_common", "prepare")
	for _, c := range []struct {
		workload string
		threads  int
	}{{"oltp_point_select", 64}, {"oltp_read_write", 8}} {
		// Any error but a deadlock (which concurrent writers meet connected directly too) fails the run.
		out := run(c.workload, "--threads="+strconv.Itoa(c.threads), "--time=3", "--report-interval=0", "--mysql-ignore-errors=1213", "run")
		if strings.Contains(out, "FATAL") {
			t.Errorf("%s at %d threads on a pool of 8:\n%s", c.workload, c.threads, out)
		}
		if !strings.Contains(out, "transactions:") {
			t.Errorf("%s: no transactions reported:\n%s", c.workload, out)
		}
	}
	for _, st := range s.opts.Topology.Stats() {
		if st.Open > 8 {
			t.Errorf("pool %s/%x: %d connections open, max_open 8", st.User, st.Caps, st.Open)
		}
	}
}

// TestBackendLostMidStatement: the connection a statement runs on dies before its reply (dropped on the way, the
// server still up). A read of an unpinned session runs again on another connection, and the client never notices; a
// write is never sent twice: the client gets error 1927 saying so, and its session goes on with its next statement.
func TestBackendLostMidStatement(t *testing.T) {
	m := mariadb(t)
	direct := open(t, "app", "secret", m.Addr, "")
	mustExec(t, direct, "DROP TABLE IF EXISTS lease_lost")
	mustExec(t, direct, "CREATE TABLE lease_lost (id INT PRIMARY KEY, c INT)")
	mustExec(t, direct, "INSERT INTO lease_lost VALUES (1, 0)")
	relay := testenv.NewRelay(t, m.Addr)
	relay.Up(t)
	_, addr := startProxy(t, testConfig(relay.Addr))
	a := newRawClient(t, addr, "app", "secret", 0)
	cut := func(q string) string {
		t.Helper()
		res := queryAsync(a, q)
		waitRunning(t, q)
		relay.Cut()
		return <-res
	}

	const read = "SELECT SLEEP(1) + 41 + 1"
	if got := cut(read); got != "42" {
		t.Fatalf("read cut off mid-statement: %q, want 42 (run again on another connection)", got)
	}
	const write = "UPDATE lease_lost SET c = c + 1 WHERE id = 1 AND SLEEP(1) = 0"
	if got := cut(write); !strings.Contains(got, "1927") || !strings.Contains(got, "not sent again") {
		t.Fatalf("write cut off mid-statement: %q, want error 1927 saying it was not sent again", got)
	}
	var c int
	waitFor(t, func() bool { // the server finishes the statement it was running
		return direct.QueryRow("SELECT c FROM lease_lost WHERE id = 1").Scan(&c) == nil && c >= 0
	})
	if got, err := a.query("SELECT 'still here'"); err != nil || len(got) != 1 || got[0] != "still here" {
		t.Fatalf("the session after error 1927: %q %v", got, err)
	}
	if err := direct.QueryRow("SELECT c FROM lease_lost WHERE id = 1").Scan(&c); err != nil || c > 1 {
		t.Fatalf("the write applied %d times (%v): at most once", c, err)
	}
}

// TestLeaseMetrics: /metrics counts per pool the connections borrowed, the fix-ups that aligned them and the
// borrowers waiting, and per group the pinned sessions by reason.
func TestLeaseMetrics(t *testing.T) {
	m := mariadb(t)
	metrics := stats.NewMetrics()
	_, addr := startProxyOpts(t, testConfig(m.Addr).with(t, func(o *Options) { o.Metrics = metrics }))
	a := newRawClient(t, addr, "app", "secret", 0)
	b := newRawClient(t, addr, "app", "secret", 0)
	for _, q := range []string{"SET time_zone = '+01:00'", "SELECT 1", "BEGIN"} {
		if _, err := a.query(q); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.query("SELECT 2"); err != nil { // on a connection with another time_zone, or a new one
		t.Fatal(err)
	}
	// gather reads /metrics' series, summed over labels but reason.
	gather := func() map[string]float64 {
		values := map[string]float64{}
		mfs, err := metrics.Registry().Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			for _, mt := range mf.GetMetric() {
				name := mf.GetName()
				for _, l := range mt.GetLabel() {
					if l.GetName() == "reason" {
						name += "/" + l.GetValue()
					}
				}
				values[name] += mt.GetGauge().GetValue() + mt.GetCounter().GetValue()
			}
		}
		return values
	}
	// A session publishes its pins after it has written its reply (publishPins), so the client may read the count
	// before it moves.
	waitFor(t, func() bool { return gather()["keyway_sql_pinned_sessions/transaction"] == 1 })
	values := gather()
	if values["keyway_backend_pool_borrows_total"] < 4 {
		t.Errorf("borrows: %v, want at least one per statement and login", values["keyway_backend_pool_borrows_total"])
	}
	if _, ok := values["keyway_backend_pool_waiting"]; !ok {
		t.Error("no keyway_backend_pool_waiting")
	}
	if _, ok := values["keyway_backend_pool_fixups_total"]; !ok {
		t.Error("no keyway_backend_pool_fixups_total")
	}
	if _, err := a.query("COMMIT"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool {
		for name, v := range gather() {
			if strings.HasPrefix(name, "keyway_sql_pinned_sessions/") && v != 0 {
				return false
			}
		}
		return true
	})
}

// TestSessionWithoutDatabase: a session without a default database never borrows a connection that has one (no
// command unselects it), even from a pool of one that sessions with a database use in turn.
func TestSessionWithoutDatabase(t *testing.T) {
	m := mariadb(t)
	cfg := testConfig(m.Addr)
	cfg.Groups[0].MaxOpen = 1
	_, addr := startProxy(t, cfg)
	withDB := open(t, "app", "secret", addr, "")
	noDB, err := sql.Open("mysql", "app:secret@tcp("+addr+")/?timeout=5s")
	if err != nil {
		t.Fatal(err)
	}
	defer noDB.Close()
	for range 3 {
		var got sql.NullString
		if err := withDB.QueryRow("SELECT DATABASE()").Scan(&got); err != nil || got.String != "test" {
			t.Fatalf("with a database: %q %v", got.String, err)
		}
		if err := noDB.QueryRow("SELECT DATABASE()").Scan(&got); err != nil || got.Valid {
			t.Fatalf("without a database: %q %v, want NULL", got.String, err)
		}
	}
}
