package bench

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/keywaydb/keyway/internal/config"
	"github.com/keywaydb/keyway/internal/testenv"
)

// sysbenchOutput is the report of `sysbench oltp_point_select … run`, sysbench 1.0.20.
const sysbenchOutput = `sysbench 1.0.20 (using system LuaJIT 2.1.0-beta3)

Running the test with following options:
Number of threads: 1
Initializing random number generator from current time


Initializing worker threads...

Threads started!

SQL statistics:
    queries performed:
        read:                            28631
        write:                           0
        other:                           0
        total:                           28631
    transactions:                        28631  (28541.58 per sec.)
    queries:                             28631  (28541.58 per sec.)
    ignored errors:                      2      (0.00 per sec.)
    reconnects:                          1      (0.00 per sec.)

General statistics:
    total time:                          1.0012s
    total number of events:              28631

Latency (ms):
         min:                                    0.02
         avg:                                    0.03
         max:                                    8.16
         95th percentile:                        0.05
         sum:                                  987.45

Threads fairness:
    events (avg/stddev):           28631.0000/0.00
    execution time (avg/stddev):   0.9875/0.00
`

func TestParseSysbench(t *testing.T) {
	s, err := ParseSysbench([]byte(sysbenchOutput))
	if err != nil {
		t.Fatal(err)
	}
	want := SysbenchSummary{Queries: 28631, QPS: 28541.58, Transactions: 28631, TPS: 28541.58,
		IgnoredErrors: 2, Reconnects: 1, Seconds: 1.0012, P95: 0.05}
	if s != want {
		t.Fatalf("parse = %+v\nwant    %+v", s, want)
	}
	for name, out := range map[string]string{
		"no queries line": "SQL statistics:\n    95th percentile: 0.05\n",
		"no percentile":   "    queries:    10  (10.00 per sec.)\n",
		"zero queries":    "    queries:    0  (0.00 per sec.)\n         95th percentile:   0.00\n",
		"FATAL":           "FATAL: mysql_stmt_execute() returned error 1045\n",
	} {
		if _, err := ParseSysbench([]byte(out)); err == nil {
			t.Errorf("%s: parsed as a result", name)
		}
	}
}

func TestSQLOptions(t *testing.T) {
	var o SQLOptions
	o.EnsureDefaults()
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	if o.Duration != 10*time.Second || o.Repetitions != 3 || len(o.Threads) != 3 || o.Threads[2] != 8 ||
		!slices.Equal(o.Workloads, []string{"oltp_point_select", "oltp_read_only", "many_clients", "connect_only", "lone_client"}) || !slices.Equal(o.PageSizes, []int{1, 5, 20}) {
		t.Fatalf("defaults = %+v", o)
	}
	o = SQLOptions{Duration: 1500 * time.Millisecond, Repetitions: -1, Threads: []int{0, 4}, Workloads: []string{"oltp_bogus"}, TableSize: -5}
	o.EnsureDefaults()
	err := o.Validate()
	if err == nil {
		t.Fatal("invalid options validated")
	}
	for _, want := range []string{"duration", "repetitions", "threads 0", `workload "oltp_bogus"`, "table size"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %s", err, want)
		}
	}
}

// The configuration keyway serves the bench with must stay valid as the config package evolves.
func TestKeywaySQLConfig(t *testing.T) {
	c, err := config.Parse([]byte(KeywaySQLConfig("127.0.0.1:3306", false)))
	if err != nil {
		t.Fatal(err)
	}
	if !c.Cache.Disabled {
		t.Error("cache false must turn the result cache off")
	}
	if len(c.SQL.Users) != 1 || len(c.Groups) != 1 {
		t.Fatalf("users %+v, groups %+v", c.SQL.Users, c.Groups)
	}
	u, g := c.SQL.Users[0], c.Groups[0]
	if u.Name != "app" || u.Password != "secret" || u.AuthPlugin != config.AuthNativePassword || u.Group != g.Name ||
		u.BackendUser != "app" || u.BackendPassword != "secret" || g.Primary != "127.0.0.1:3306" {
		t.Fatalf("user %+v, group %+v", u, g)
	}
}

func TestSQLCaseAndReport(t *testing.T) {
	direct := Result{Target: directTarget, Series: Series{Runs: []float64{100, 300, 200}}, P95: &Series{Runs: []float64{0.5, 0.4, 0.6}}}
	keyway := Result{Target: keywayTarget, Series: Series{Runs: []float64{150, 170, 160}}, P95: &Series{Runs: []float64{0.7, 0.9, 0.8}}}
	relay := Result{Target: haproxyTarget, Series: Series{Runs: []float64{100}}}
	nocache := Result{Target: nocacheTarget, Series: Series{Runs: []float64{90}}}
	for _, r := range []*Result{&direct, &keyway, &relay, &nocache} {
		r.summarize()
	}
	c := newSQLCase("oltp_point_select", 4, []Result{direct, relay, keyway, nocache})
	if c.RelayRatio != 0.9 {
		t.Errorf("relay ratio = %v, want kw-nocache 90 / haproxy 100 = 0.9", c.RelayRatio)
	}
	if c.Ratio != 0.8 {
		t.Errorf("ratio = %v, want 160/200 = 0.8", c.Ratio)
	}
	if d := c.P95Added - 0.3; d > 1e-9 || d < -1e-9 {
		t.Errorf("p95 added = %v, want 0.8 - 0.5 = 0.3", c.P95Added)
	}
	var b bytes.Buffer
	(&SQLReport{Load: "sysbench …", Server: "MariaDB x", Cases: []SQLCase{c}}).WriteText(&b)
	for _, want := range []string{"oltp_point_select", "keyway/direct", "0.80", "+0.30 ms", "kw-nocache/haproxy (relay vs relay): 0.90", "200", "160", "0.50", "0.80"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, b.String())
		}
	}
}

// TestSysbenchDirect runs sysbench for one second with one thread against a private MariaDB, direct, and checks
// that a throughput and a latency were measured.
func TestSysbenchDirect(t *testing.T) {
	testenv.Need(t, "sysbench")
	m := testenv.NewMariaDB(t)
	o := SQLOptions{Duration: time.Second, Repetitions: 1, Threads: []int{1}, Workloads: []string{"oltp_point_select"},
		Tables: 1, TableSize: 1000}
	o.EnsureDefaults()
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	sb, err := newSysbench(o)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := sb.prepare(ctx, m.Addr); err != nil {
		t.Fatal(err)
	}
	var progress bytes.Buffer
	results, err := runTargets(ctx, []target{directStarter(m.Addr)}, 1, sb.load("oltp_point_select", 1),
		meter{client: loadGenerator("sysbench"), shared: []cpuProc{procOf("mariadb", m.Process())}}, &progress, nil, "sql")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s", progress.String())
	if len(results) != 1 || len(results[0].Runs) != 1 {
		t.Fatalf("results = %+v, want one target with one run", results)
	}
	r := results[0]
	if r.Runs[0] <= 0 || r.Median != r.Runs[0] {
		t.Fatalf("result = %+v, want a positive queries/s", r)
	}
	if r.P95 == nil || len(r.P95.Runs) != 1 || r.P95.Runs[0] <= 0 {
		t.Fatalf("p95 = %+v, want one positive latency", r.P95)
	}
	// The run's CPU per query: MariaDB's from /proc (the direct target has no process of its own), sysbench's as
	// the child it was.
	if r.CPU == nil || len(r.CPU.Processes) != 2 || r.CPU.Processes[0].Process != "mariadb" || r.CPU.Processes[1].Process != "sysbench" ||
		r.CPU.Processes[1].MicrosPerOp.Median <= 0 {
		t.Fatalf("CPU = %+v, want MariaDB's and sysbench's", r.CPU)
	}
	c := newSQLCase("oltp_point_select", 1, results)
	if c.Ratio != 0 {
		t.Fatalf("a direct-only case has ratio %v", c.Ratio)
	}
}
