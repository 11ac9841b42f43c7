package bench

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/keywaydb/keyway/internal/config"
	"github.com/keywaydb/keyway/internal/testenv"
)

func TestSQLClientOptions(t *testing.T) {
	o := SQLOptions{Workloads: []string{"oltp_point_select", manyClientsWorkload, connectWorkload}, Threads: []int{1, 8},
		Repetitions: 2, Targets: []string{directTarget, keywayTarget}, Duration: 5 * time.Second}
	o.EnsureDefaults()
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	if o.Clients != 2000 || o.Pool != 64 {
		t.Errorf("clients %d, pool %d; want the defaults 2000 and 64", o.Clients, o.Pool)
	}
	// A sysbench workload runs per thread count, a client case once: (2 + 1 + 1) cases × 2 reps × 2 targets.
	if runs, hint := o.Plan(); runs != 16 || hint != 80*time.Second {
		t.Errorf("plan = %d runs, %v; want 16 runs, 80s", runs, hint)
	}
	o = SQLOptions{Workloads: []string{"many_clients", "oltp_bogus"}, Clients: -1, Pool: 500}
	o.EnsureDefaults()
	err := o.Validate()
	if err == nil {
		t.Fatal("invalid options validated")
	}
	for _, want := range []string{"clients -1", "pool 500", `workload "oltp_bogus"`, "connect_only"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %s", err, want)
		}
	}
}

// The many_clients configuration raises keyway's client limit and sets its pool; the others keep the defaults.
func TestKeywaySQLConfigLimits(t *testing.T) {
	c, err := config.Parse([]byte(keywaySQLConfig("/tmp/sock", true, keywayLimits{maxClients: 2100, pool: 64})))
	if err != nil {
		t.Fatal(err)
	}
	if c.SQL.MaxConnections != 2100 || len(c.Groups) != 1 || c.Groups[0].MaxOpen != 64 {
		t.Fatalf("sql.max_connections %d, groups %+v; want 2100 and max_open 64", c.SQL.MaxConnections, c.Groups)
	}
	d, err := config.Parse([]byte(KeywaySQLConfig("/tmp/sock", true)))
	if err != nil {
		t.Fatal(err)
	}
	if d.SQL.MaxConnections == 2100 || d.Groups[0].MaxOpen == 64 {
		t.Fatalf("the default configuration has the many_clients limits: %+v %+v", d.SQL, d.Groups[0])
	}
}

func TestParseConnectLoop(t *testing.T) {
	r, err := parseConnectLoop("12345 0 5.000123 \n")
	if err != nil || r.connects != 12345 || r.failures != 0 || r.seconds != 5.000123 || r.first != "" {
		t.Fatalf("parse = %+v, %v", r, err)
	}
	r, err = parseConnectLoop("100 3 1.5 1040 Too many connections\n")
	if err != nil || r.failures != 3 || r.first != "1040 Too many connections" {
		t.Fatalf("parse = %+v, %v", r, err)
	}
	for _, out := range []string{"", "PHP Warning: something\n", "12 x 1.0", "0 5 1.0 2002 Connection refused", "10 0 0"} {
		if _, err := parseConnectLoop(out); err == nil {
			t.Errorf("%q parsed as a result", out)
		}
	}
}

func TestRunErrors(t *testing.T) {
	var e runErrors
	e.add(&mysql.MySQLError{Number: 1040, Message: "Too many connections"})
	e.add(fmt.Errorf("login: %w", &mysql.MySQLError{Number: 1040, Message: "all 64 connections keyway may open are in use"}))
	e.add(context.DeadlineExceeded)
	e.late()
	for i := range 5 {
		e.add(fmt.Errorf("failure %d", i%4))
	}
	e.add(&mysql.MySQLError{Number: 1045, Message: "Access denied"})
	if e.tooMany != 2 || e.timeouts != 2 || e.other != 6 {
		t.Fatalf("1040 %d, timeouts %d, other %d; want 2, 2, 6", e.tooMany, e.timeouts, e.other)
	}
	if want := []string{"failure 0", "failure 1", "failure 2"}; !slices.Equal(e.samples, want) {
		t.Errorf("samples %q, want the first %d distinct: %q", e.samples, maxErrorSamples, want)
	}
	var c ErrorCounts
	c.add(&e)
	c.add(&runErrors{tooMany: 4, samples: []string{"failure 0", "new"}})
	c.summarize()
	if c.TooMany.Median != 3 || c.Timeouts.Max != 2 || c.Other.Min != 0 || len(c.Samples) != 3 {
		t.Errorf("counts %+v", c)
	}
}

func TestPercentile(t *testing.T) {
	var d []time.Duration
	for i := 1; i <= 100; i++ {
		d = append(d, time.Duration(i)*time.Millisecond)
	}
	for _, c := range []struct {
		p    float64
		want time.Duration
	}{{50, 50 * time.Millisecond}, {99, 99 * time.Millisecond}, {100, 100 * time.Millisecond}, {0, time.Millisecond}} {
		if got := percentile(d, c.p); got != c.want {
			t.Errorf("p%v = %v, want %v", c.p, got, c.want)
		}
	}
	if percentile(nil, 50) != 0 || percentile(d[:1], 99) != time.Millisecond {
		t.Error("percentile of none or one")
	}
}

// clientCases is a report with both client cases as RunSQL makes them: direct refused with 1040, keyway refusing
// too (today's figure), and connect_only.
func clientCases() *SQLReport {
	series := func(runs ...float64) *Series {
		s := &Series{Runs: runs}
		s.summarize()
		return s
	}
	many := func(target string, qps, tooMany, timeouts, conns float64) Result {
		r := result(target, qps, qps+2)
		r.P50, r.P99 = series(0.2, 0.3), series(2, 3)
		r.Errors = &ErrorCounts{TooMany: *series(tooMany, tooMany), Timeouts: *series(timeouts, timeouts), Other: *series(0, 0)}
		r.Connected, r.BackendConns = series(151, 151), series(conns, conns)
		return r
	}
	direct, keyway := many(directTarget, 151, 18490, 0, 151), many(keywayTarget, 64, 3000, 15000, 66)
	direct.IdleConns, keyway.IdleConns = series(0, 0), series(3, 3)
	keyway.Errors.Samples = []string{"Error 1158: got an error reading communication packets"}
	mc := newSQLCase(manyClientsWorkload, 2000, []Result{direct, keyway})
	mc.Pool, mc.ServerMaxConnections, mc.KeywayMaxConnections = 64, 151, 2100
	cd, ck := result(directTarget, 3000, 3100), result(keywayTarget, 2600, 2800)
	cd.Errors, ck.Errors = &ErrorCounts{}, &ErrorCounts{}
	co := newSQLCase(connectWorkload, 1, []Result{cd, ck})
	return &SQLReport{Load: "sysbench …", Server: "MariaDB x", Cases: []SQLCase{mc, co}}
}

func TestSQLClientCasesReport(t *testing.T) {
	r := clientCases()
	var b bytes.Buffer
	r.WriteText(&b)
	out := b.String()
	for _, want := range []string{
		"many_clients: 2000 client connections", "MariaDB max_connections 151", "keyway's pool (max_open) 64", "max_connections 2100",
		"1040 errors", "timeouts", "MariaDB conns", "18490", "15000", "0.43", // keyway 65 qps / direct 152
		"keyway: failed selects in the worst run 18000 (target 0); MariaDB connections for the clients at most 63, beyond keyway's own (target ≤ the pool, 64): not met",
		"  66 (3)",
		"keyway, other failure: Error 1158",
		"connect_only", "median conn/s", "keyway/direct connects/s: 0.89 (target ≥ 1.0)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "workload  threads") || strings.Contains(out, "sysbench") {
		t.Errorf("a report of client cases alone prints the sysbench table:\n%s", out)
	}

	// The report page's scenarios: clients, p50 and p99, connects/s.
	rep := &Report{SQL: r}
	sc := rep.Scenarios()
	if len(sc) != 2 || sc[0].ID != "sql/many_clients" || sc[1].ID != "sql/connect_only" {
		t.Fatalf("scenarios %+v", sc)
	}
	if got := sc[0].PercentileNames(); !slices.Equal(got, []string{"p50", "p99"}) || sc[0].Clients != "clients" ||
		sc[0].Cases[0].Concurrency != 2000 || !strings.Contains(sc[0].Title, "keyway's pool 64") {
		t.Errorf("many_clients scenario %+v, percentiles %v", sc[0], got)
	}
	if sc[1].Unit != "connects/s" || len(sc[1].PercentileNames()) != 0 {
		t.Errorf("connect_only scenario %+v", sc[1])
	}
	dir := t.TempDir()
	if err := rep.WriteFiles(dir); err != nil {
		t.Fatal(err)
	}
	checkReportPage(t, dir)
	page, err := os.ReadFile(filepath.Join(dir, "index.html"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"1040 errors 18490 · timeouts 0 · other errors 0 · MariaDB connections 151<",
		"timeouts 15000 · other errors 0 · MariaDB connections 66 (3 before the clients)"} {
		if !strings.Contains(string(page), want) {
			t.Errorf("the page lacks %q", want)
		}
	}
	back, err := ReadReports(filepath.Join(dir, "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	if got := back.SQL.Cases[0]; got.Pool != 64 || got.Results[1].Errors.Timeouts.Median != 15000 || got.Results[1].BackendConns.Max != 66 {
		t.Errorf("report.json lost the many_clients figures: %+v", got)
	}
}

// TestCompareSQLClientCases: errors and MariaDB connections are compared as lower-is-better figures, next to the
// queries/s and p50/p99.
func TestCompareSQLClientCases(t *testing.T) {
	old := clientCases()
	new := clientCases()
	k := &new.Cases[0].Results[1]
	k.Series = result("", 2000, 2000).Series
	k.Errors.TooMany, k.Errors.Timeouts = Series{Runs: []float64{0}}, Series{Runs: []float64{0}}
	k.BackendConns = &Series{Runs: []float64{10}}
	k.summarize()
	d := &new.Cases[0].Results[0]
	d.Errors.TooMany = Series{Runs: []float64{19000}}
	d.summarize()
	got := verdicts(t, old, new)
	for figure, want := range map[string]Verdict{
		"sql/many_clients clients=2000 keyway queries/s":           Improvement,
		"sql/many_clients clients=2000 keyway 1040 errors":         Improvement,
		"sql/many_clients clients=2000 keyway timeouts":            Improvement,
		"sql/many_clients clients=2000 keyway MariaDB connections": Improvement,
		"sql/many_clients clients=2000 keyway p99 ms":              WithinNoise,
		"sql/many_clients clients=2000 direct 1040 errors":         Regression,
		"sql/many_clients clients=2000 direct other errors":        WithinNoise,
		"sql/connect_only clients=1 keyway connects/s":             WithinNoise,
	} {
		if got[figure] != want {
			t.Errorf("%s: %q, want %q (all: %v)", figure, got[figure], want, got)
		}
	}
}

// TestSQLManyClientsDirect runs many_clients briefly against a private MariaDB at max_connections 151: more
// clients than that are refused with 1040, counted as such, and MariaDB's peak is read. (Behaviour, not speed.)
func TestSQLManyClientsDirect(t *testing.T) {
	m := testenv.NewMariaDB(t)
	ctx := context.Background()
	if err := createSbtest1(ctx, m.AppDSN, 100); err != nil {
		t.Fatal(err)
	}
	mon, err := openMonitor(ctx, m)
	if err != nil {
		t.Fatal(err)
	}
	defer mon.Close()
	if _, err := mon.setMaxConnections(ctx, 20); err != nil {
		t.Fatal(err)
	}
	mc := manyClients{n: 30, duration: 2 * time.Second, tableSize: 100, mon: mon}
	s, err := mc.load(ctx, m.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s", s.note)
	// 20 clients hold the server's 20 connections (the monitor has the one extra a SUPER account may take); the other
	// 10 are refused at login, and again at each of their 2 seconds.
	// Before the clients, a connection the setup just closed may still be counted by the server for a moment.
	if s.clients.connected != 20 || s.clients.backendConns != 20 || s.clients.idleConns > 1 {
		t.Errorf("connected %d, MariaDB's peak %d, before the clients %d; want 20, 20, at most 1", s.clients.connected, s.clients.backendConns, s.clients.idleConns)
	}
	if s.n != 40 || s.errs.tooMany != 20 || s.errs.timeouts != 0 || s.errs.other != 0 {
		t.Errorf("answered %d, 1040 %d, timeouts %d, other %d (%q); want 40, 20, 0, 0", s.n, s.errs.tooMany, s.errs.timeouts, s.errs.other, s.errs.samples)
	}
	if !s.hasP50P99 || s.p50 <= 0 || s.p99 < s.p50 {
		t.Errorf("p50 %v, p99 %v", s.p50, s.p99)
	}
}

// createSbtest1 makes the table many_clients reads, as sysbench prepare would, with rows rows.
func createSbtest1(ctx context.Context, dsn string, rows int) error {
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, "CREATE TABLE sbtest1 (id INT PRIMARY KEY, k INT NOT NULL DEFAULT 0, c CHAR(120) NOT NULL DEFAULT '', pad CHAR(60) NOT NULL DEFAULT '')"); err != nil {
		return err
	}
	for i := 1; i <= rows; i++ {
		if _, err := db.ExecContext(ctx, "INSERT INTO sbtest1 (id, c) VALUES (?, ?)", i, fmt.Sprint("row ", i)); err != nil {
			return err
		}
	}
	return nil
}

// TestSQLConnectOnlyDirect runs the PHP connect loop for a second against a private MariaDB.
func TestSQLConnectOnlyDirect(t *testing.T) {
	testenv.NeedPHPModules(t, "mysqli")
	m := testenv.NewMariaDB(t)
	ctx := context.Background()
	if err := checkMysqli(ctx); err != nil {
		t.Fatal(err)
	}
	script, err := writePHP("keyway-bench-connect-*.php", connectPHP)
	if err != nil {
		t.Fatal(err)
	}
	defer os.Remove(script)
	s, err := connectLoop(script, time.Second)(ctx, m.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s", s.note)
	if s.n <= 0 || s.ops <= 0 || s.errs == nil || s.errs.other+s.errs.tooMany != 0 {
		t.Errorf("sample %+v, errors %+v; want connects and no failure", s, s.errs)
	}
	// A server that refuses: every connect fails, which is an error of the run, with the server's message.
	_, err = connectLoop(script, time.Second)(ctx, "127.0.0.1:1")
	if err == nil || !strings.Contains(err.Error(), "connected not once") {
		t.Errorf("connect loop against a closed port: %v", err)
	}
}
