package bench

import (
	"bytes"
	"context"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/keywaydb/keyway/internal/testenv"
)

func near(a, b float64) bool { return math.Abs(a-b) < 1e-6 }

func TestFitLine(t *testing.T) {
	// On a line: y = 300 + 50x.
	a, b, ok := fitLine([]float64{1, 5, 20}, []float64{350, 550, 1300})
	if !ok || !near(a, 300) || !near(b, 50) {
		t.Errorf("fit = %v + %v·x, %v; want 300 + 50·x", a, b, ok)
	}
	// Off it: the least-squares line of (0, 1), (1, 3), (2, 2) is y = 1.5 + 0.5x.
	a, b, ok = fitLine([]float64{0, 1, 2}, []float64{1, 3, 2})
	if !ok || !near(a, 1.5) || !near(b, 0.5) {
		t.Errorf("fit = %v + %v·x, %v; want 1.5 + 0.5·x", a, b, ok)
	}
	for _, c := range []struct{ x, y []float64 }{{nil, nil}, {[]float64{5}, []float64{1}}, {[]float64{5, 5}, []float64{1, 2}},
		{[]float64{1, 2}, []float64{1}}} {
		if _, _, ok := fitLine(c.x, c.y); ok {
			t.Errorf("fit of %v, %v: ok", c.x, c.y)
		}
	}
}

// loneCase is a lone_client case whose targets take connect + perStatement·size µs a page in each repetition.
func loneCase(size int, costs map[string][][2]float64, order ...string) SQLCase {
	var results []Result
	for _, target := range order {
		var runs []float64
		for _, c := range costs[target] {
			runs = append(runs, 1e6/(c[0]+c[1]*float64(size)))
		}
		results = append(results, result(target, runs...))
	}
	c := newSQLCase(loneWorkload, 1, results)
	c.PageSize = size
	return c
}

// loneCases are lone_client's three page sizes on four targets, two repetitions, each target's pages exactly
// connect + per-statement µs: direct 300 + 50n (then 320 + 52n), haproxy 90 µs a statement more, kw-nocache 150
// more, keyway 20 less.
func loneCases() ([]SQLCase, []StatementCost) {
	costs := map[string][][2]float64{
		directTarget:  {{300, 50}, {320, 52}},
		haproxyTarget: {{400, 140}, {420, 142}},
		keywayTarget:  {{250, 30}, {260, 32}},
		nocacheTarget: {{350, 200}, {360, 202}},
	}
	var cases []SQLCase
	for _, n := range defaultPageSizes {
		cases = append(cases, loneCase(n, costs, directTarget, haproxyTarget, keywayTarget, nocacheTarget))
	}
	return cases, statementCosts(cases)
}

func TestStatementCosts(t *testing.T) {
	_, costs := loneCases()
	if len(costs) != 4 {
		t.Fatalf("costs %+v", costs)
	}
	want := map[string]struct{ slope, connect, added [2]float64 }{
		directTarget:  {[2]float64{50, 52}, [2]float64{300, 320}, [2]float64{}},
		haproxyTarget: {[2]float64{140, 142}, [2]float64{400, 420}, [2]float64{90, 90}},
		keywayTarget:  {[2]float64{30, 32}, [2]float64{250, 260}, [2]float64{-20, -20}},
		nocacheTarget: {[2]float64{200, 202}, [2]float64{350, 360}, [2]float64{150, 150}},
	}
	for _, c := range costs {
		w := want[c.Target]
		for rep := range 2 {
			if !near(c.PerStatement.Runs[rep], w.slope[rep]) || !near(c.Connect.Runs[rep], w.connect[rep]) {
				t.Errorf("%s rep %d: %v µs a statement, %v connect; want %v, %v", c.Target, rep, c.PerStatement.Runs[rep], c.Connect.Runs[rep], w.slope[rep], w.connect[rep])
			}
		}
		if c.Target == directTarget {
			if c.Added != nil {
				t.Errorf("direct adds %+v to itself", c.Added)
			}
			continue
		}
		if c.Added == nil || !near(c.Added.Median, w.added[0]) || !near(c.Added.Min, w.added[0]) || !near(c.Added.Max, w.added[1]) {
			t.Errorf("%s added %+v, want %v", c.Target, c.Added, w.added)
		}
		if !near(c.PerStatement.Median, (w.slope[0]+w.slope[1])/2) {
			t.Errorf("%s median %v", c.Target, c.PerStatement.Median)
		}
	}

	// One page size fits nothing; without direct nothing is added.
	cases, _ := loneCases()
	if got := statementCosts(cases[:1]); got != nil {
		t.Errorf("one page size fitted: %+v", got)
	}
	var noDirect []SQLCase
	for _, c := range cases {
		c.Results = c.Results[1:]
		noDirect = append(noDirect, c)
	}
	for _, c := range statementCosts(noDirect) {
		if c.Added != nil {
			t.Errorf("%s: added %+v without direct", c.Target, c.Added)
		}
	}
}

func TestParseLonePages(t *testing.T) {
	r, err := parseLonePages("1200 24000 0 5.000100 24000 \n")
	if err != nil || r.pages != 1200 || r.selects != 24000 || r.failures != 0 || r.seconds != 5.0001 || r.hits != 24000 || r.first != "" {
		t.Fatalf("parse = %+v, %v", r, err)
	}
	r, err = parseLonePages("10 50 2 1.0 -1 1040 Too many connections\n")
	if err != nil || r.hits != -1 || r.failures != 2 || r.first != "1040 Too many connections" {
		t.Fatalf("parse = %+v, %v", r, err)
	}
	for _, out := range []string{"", "PHP Warning: x\n", "10 50 2 1.0", "10 50 x 1.0 0", "0 0 3 1.0 -1 2002 refused", "5 5 0 0 -1"} {
		if _, err := parseLonePages(out); err == nil {
			t.Errorf("%q parsed as a result", out)
		}
	}
}

func TestLoneClientOptions(t *testing.T) {
	o := SQLOptions{Workloads: []string{loneWorkload, connectWorkload}, Repetitions: 2, Targets: []string{directTarget, keywayTarget},
		Duration: 5 * time.Second}
	o.EnsureDefaults()
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	// lone_client runs once per page size: (3 + 1) cases × 2 reps × 2 targets.
	if runs, hint := o.Plan(); runs != 16 || hint != 80*time.Second {
		t.Errorf("plan = %d runs, %v; want 16 runs, 80s", runs, hint)
	}
	o.PageSizes = []int{0, 5, 5000, 5}
	err := o.Validate()
	if err == nil || !strings.Contains(err.Error(), "page size 0") || !strings.Contains(err.Error(), "page size 5000") ||
		!strings.Contains(err.Error(), "page size 5 given twice") || strings.Contains(err.Error(), "page size 5:") {
		t.Errorf("page sizes 0, 5, 5000: %v", err)
	}
}

// loneReport is a report of lone_client as RunSQL makes it, with keyway's cache hits: all of them at 20 and 5, short
// of all at 1.
func loneReport() *SQLReport {
	cases, costs := loneCases()
	for i := range cases {
		for j := range cases[i].Results {
			r := &cases[i].Results[j]
			r.Errors = &ErrorCounts{}
			switch r.Target {
			case keywayTarget:
				r.CPU = &CPU{}
				r.CPU.add([]procCPU{{"keyway", 40}, {"mariadb", 0}, {"php", 300}}, 0.6)
				share := 1.0
				if cases[i].PageSize == 1 {
					share = 0.5
				}
				r.CacheHits = &Series{Runs: []float64{share, share}}
			}
			r.summarize()
		}
	}
	return &SQLReport{Load: "sysbench …", Server: "MariaDB x", Cases: cases, StatementCosts: costs}
}

func TestLoneClientReport(t *testing.T) {
	r := loneReport()
	var b bytes.Buffer
	r.WriteText(&b)
	out := b.String()
	// Pages of 20, medians of the two repetitions: direct 1e6/1300 µs and 1e6/1360 µs, 752; keyway 1e6/850 and
	// 1e6/900, 1144: 1.52; kw-nocache 229: 0.30; haproxy 310.
	for _, want := range []string{
		"lone_client: one PHP process", "mysqli_query: the text", "SELECT c FROM sbtest1 WHERE id = ?",
		"pages of 1 select:", "pages of 5 selects:", "pages of 20 selects:", "median pages/s", "cache hits", "µs a page",
		"pages of 20: kw-nocache/direct 0.30 (target ≥ 0.8): not met",
		"pages of 20: keyway/direct 1.52 (target ≥ 2.0): not met",
		"pages of 20: kw-nocache/haproxy 0.74 (the floor: ≥ 1.0, never below the plain relay): not met",
		"pages of 5: keyway/direct 1.38 (target ≥ 2.0): not met",
		"warning: keyway's cache answered only 0.500 of the selects",
		"CPU per page: keyway 40.0 µs + mariadb 0.0 µs + php 300.0 µs = 340.0 µs, 60% of the CPUs busy (medians)", "cost per statement", "(1, 5, 20)",
		"haproxy     141.0 [140.0–142.0]       410.0 [400.0–420.0]       +90.0 [90.0–90.0]",
		"keyway      31.0 [30.0–32.0]          255.0 [250.0–260.0]       -20.0 [-20.0–-20.0]",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "pages of 1: ") {
		t.Errorf("targets printed for pages of 1, which has none:\n%s", out)
	}
	if strings.Index(out, "cost per statement") < strings.Index(out, "pages of 20 selects:") {
		t.Errorf("the statement costs come before the last page size:\n%s", out)
	}
	// The report page and its JSON.
	rep := &Report{SQL: r}
	sc := rep.Scenarios()
	if len(sc) != 1 || sc[0].ID != "sql/lone_client" || sc[0].Unit != "pages/s" || sc[0].Clients != "selects" ||
		len(sc[0].Cases) != 3 || sc[0].Cases[2].Concurrency != 20 || len(sc[0].Fit) != 4 || len(sc[0].Targets) != 6 ||
		len(sc[0].PercentileNames()) != 0 {
		t.Fatalf("scenarios %+v", sc)
	}
	if got := sc[0].CaseLabel(1) + ", " + sc[0].CaseLabel(20); got != "1 select, 20 selects" {
		t.Errorf("labels %q", got)
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
	for _, want := range []string{`<table class="fit">`, "µs added a statement over direct", "<td>haproxy</td><td class=\"num\">141.0 [140.0–142.0]</td>",
		"90.0 [90.0–90.0]", "pages of 20: keyway/direct 1.52 (target ≥ 2.0): not met", "cache hits 1.000 of the statements"} {
		if !strings.Contains(string(page), want) {
			t.Errorf("the page lacks %q", want)
		}
	}
	back, err := ReadReports(filepath.Join(dir, "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	if got := back.SQL; got.Cases[2].PageSize != 20 || len(got.StatementCosts) != 4 || !near(got.StatementCosts[1].Added.Median, 90) ||
		got.Cases[0].Results[2].CacheHits.Median != 0.5 {
		t.Errorf("report.json lost the lone_client figures: %+v", got)
	}
}

// A target met: keyway at twice direct, kw-nocache at 0.8 and above haproxy; no targets for pages of 1.
func TestLoneVerdicts(t *testing.T) {
	c := SQLCase{PageSize: 5, Ratios: map[string]float64{keywayTarget: 2.1, nocacheTarget: 0.8, haproxyTarget: 0.7}, RelayRatio: 0.8 / 0.7}
	want := []string{"pages of 5: kw-nocache/direct 0.80 (target ≥ 0.8): met", "pages of 5: keyway/direct 2.10 (target ≥ 2.0): met",
		"pages of 5: kw-nocache/haproxy 1.14 (the floor: ≥ 1.0, never below the plain relay): met"}
	if got := loneVerdicts(c); !slices.Equal(got, want) {
		t.Errorf("verdicts %q\nwant %q", got, want)
	}
	c.PageSize = 1
	if got := loneVerdicts(c); got != nil {
		t.Errorf("verdicts for pages of 1: %q", got)
	}
}

// TestCompareLoneClient: pages/s per page size, and the fit's µs (fewer is better).
func TestCompareLoneClient(t *testing.T) {
	old, new := loneReport(), loneReport()
	k := &new.StatementCosts[2] // keyway
	k.PerStatement = Series{Runs: []float64{10, 12}}
	k.Added = &Series{Runs: []float64{-41, -40}}
	k.PerStatement.summarize()
	k.Added.summarize()
	h := &new.StatementCosts[1] // haproxy
	h.Added = &Series{Runs: []float64{120, 130}}
	h.Added.summarize()
	got := verdicts(t, old, new)
	for figure, want := range map[string]Verdict{
		"sql/lone_client selects=20 keyway pages/s":    WithinNoise,
		"sql/lone_client selects=1 direct pages/s":     WithinNoise,
		"sql/lone_client keyway µs a statement":        Improvement,
		"sql/lone_client keyway µs added a statement":  Improvement,
		"sql/lone_client keyway µs connect + close":    WithinNoise,
		"sql/lone_client haproxy µs added a statement": Regression,
		"sql/lone_client direct µs a statement":        WithinNoise,
	} {
		if got[figure] != want {
			t.Errorf("%s: %q, want %q (all: %v)", figure, got[figure], want, got)
		}
	}
	if _, ok := got["sql/lone_client direct µs added a statement"]; ok {
		t.Error("direct compared with itself")
	}
}

// TestSQLLoneClientDirect warms a private MariaDB and loads pages of 3 selects for a second with the PHP client:
// pages and no failures, and no cache hits read, since MariaDB is not keyway. (Behaviour, not speed.)
func TestSQLLoneClientDirect(t *testing.T) {
	testenv.NeedPHPModules(t, "mysqli")
	m := testenv.NewMariaDB(t)
	ctx := context.Background()
	if err := createSbtest1(ctx, m.AppDSN, 100); err != nil {
		t.Fatal(err)
	}
	script, err := writePHP("keyway-bench-lone-*.php", lonePHP)
	if err != nil {
		t.Fatal(err)
	}
	defer os.Remove(script)
	warmed := warmedStarter(directStarter(m.Addr), script, 100)
	r, err := warmed.start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer r.stop()
	s, err := lonePages(script, 100, 3, time.Second)(ctx, r.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s", s.note)
	if s.n <= 0 || s.ops <= 0 || s.errs == nil || s.errs.other+s.errs.tooMany != 0 || s.hasHits {
		t.Errorf("sample %+v, errors %+v; want pages, no failure and no cache hits", s, s.errs)
	}
	// A warm-up that cannot read its rows fails the start.
	if _, err := warmedStarter(directStarter(m.Addr), script, 101).start(ctx); err == nil || !strings.Contains(err.Error(), "warm-up") {
		t.Errorf("warm-up of a missing row: %v", err)
	}
	// A server that refuses: no page at all is an error of the run.
	if _, err := lonePages(script, 100, 3, time.Second)(ctx, "127.0.0.1:1"); err == nil || !strings.Contains(err.Error(), "not one page") {
		t.Errorf("pages against a closed port: %v", err)
	}
}
