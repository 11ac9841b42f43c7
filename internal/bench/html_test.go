package bench

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/html"

	"github.com/keywaydb/keyway/internal/chart"
	"github.com/keywaydb/keyway/internal/testenv"
)

// TestReportFromShortRun runs two real suites briefly (memcache: memcaslap on memcached and three keyways; kv:
// MariaDB, memcached and keyway containers, with latency), writes the report and checks the page against its JSON.
func TestReportFromShortRun(t *testing.T) {
	if testing.Short() {
		t.Skip("starts MariaDB, memcached and keyway")
	}
	for _, c := range []string{"memcached", "memcaslap", "mariadbd", "mariadb-install-db"} {
		testenv.Need(t, c)
	}
	bin, err := testenv.KeywayBinary()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	mc, err := RunMemcache(ctx, MemcacheOptions{KeywayBinary: bin, Duration: time.Second, Repetitions: 1, MemoryMB: 64})
	if err != nil {
		t.Fatal(err)
	}
	kv, err := RunKV(ctx, KVOptions{KeywayBinary: bin, Pairs: 200, LoadConcurrency: []int{2}, FetchConcurrency: []int{2},
		Duration: time.Second, Repetitions: 1})
	if err != nil {
		t.Fatal(err)
	}
	r := &Report{Machine: CollectMachine(ctx, bin), Commands: []string{"keyway bench memcache --duration=1s --reps=1"}}
	for _, s := range []any{mc, kv} {
		if err := r.Add(s); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	if err := r.WriteFiles(dir); err != nil {
		t.Fatal(err)
	}
	checkReportPage(t, dir)
	saveArtifact(t, dir)
}

// TestReportFromSuiteFiles draws the report from the --json outputs of a real short run of every suite (in
// testdata/short-run) and checks it, in particular the SQL scenario, whose only latency is sysbench's p95.
func TestReportFromSuiteFiles(t *testing.T) {
	files, err := filepath.Glob("testdata/short-run/*.json")
	if err != nil || len(files) != 4 {
		t.Fatalf("testdata: %v %v", files, err)
	}
	r, err := ReadReports(files...)
	if err != nil {
		t.Fatal(err)
	}
	if r.Memcache == nil || r.SQL == nil || r.KV == nil || r.Staleness == nil {
		t.Fatalf("a suite is missing: %+v", r)
	}
	for _, suite := range []string{"memcache", "sql", "kv", "staleness"} {
		if !slices.ContainsFunc(r.Commands, func(c string) bool { return strings.HasPrefix(c, "keyway bench "+suite+" ") }) {
			t.Errorf("commands %q lack the %s suite's", r.Commands, suite)
		}
	}
	dir := t.TempDir()
	if err := r.WriteFiles(dir); err != nil {
		t.Fatal(err)
	}
	checkReportPage(t, dir)
	doc := parsePage(t, dir)
	sql := find(doc, func(n *html.Node) bool { return n.Data == "section" && attr(n, "id") == "sql/oltp_point_select" })
	if sql == nil {
		t.Fatal("no section for sql/oltp_point_select")
	}
	lat := findAll(sql, hasClass("latency"))
	if len(lat) != 1 || !strings.Contains(textOf(lat[0]), "p95") || strings.Contains(textOf(sql), "p50 latency") {
		t.Errorf("the SQL scenario must chart p95 alone (what sysbench reports); latency charts: %d", len(lat))
	}
	if find(doc, func(n *html.Node) bool { return n.Data == "section" && attr(n, "id") == "staleness" }) == nil {
		t.Error("no staleness section")
	}
	// The SQL client cases: many_clients charts p50 and p99 and shows each target's failures and MariaDB's
	// connections; connect_only has no latency.
	many := find(doc, func(n *html.Node) bool { return n.Data == "section" && attr(n, "id") == "sql/many_clients" })
	if many == nil {
		t.Fatal("no section for sql/many_clients")
	}
	if lat := findAll(many, hasClass("latency")); len(lat) != 2 || !strings.Contains(textOf(lat[0]), "p50") || !strings.Contains(textOf(lat[1]), "p99") {
		t.Errorf("many_clients must chart p50 and p99; latency charts: %d", len(lat))
	}
	if counts := findAll(many, hasClass("counts")); len(counts) != 4 || !strings.Contains(textOf(counts[0]), "1040 errors") ||
		!strings.Contains(textOf(counts[0]), "MariaDB connections") {
		t.Errorf("many_clients rows lack their errors and connections: %d cells", len(counts))
	}
	connect := find(doc, func(n *html.Node) bool { return n.Data == "section" && attr(n, "id") == "sql/connect_only" })
	if connect == nil || len(findAll(connect, hasClass("latency"))) != 0 {
		t.Error("connect_only: no section, or a latency chart it did not measure")
	}

	// The same suite twice is refused, not silently dropped.
	if _, err := ReadReports(files[0], files[0]); err == nil || !strings.Contains(err.Error(), "both hold") {
		t.Errorf("a suite given twice: err %v", err)
	}
}

// checkReportPage checks dir/index.html against dir/report.json: it parses; every chart the data calls for is there
// and draws every target; the who-wins table names, for each scenario and concurrency, the target with the highest
// median and its ratio to the next.
func checkReportPage(t *testing.T, dir string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	var r Report
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	doc := parsePage(t, dir)

	// Self-contained: nothing fetched.
	for _, n := range findAll(doc, func(n *html.Node) bool {
		return n.Data == "script" || n.Data == "link" || n.Data == "img" || attr(n, "src") != "" || attr(n, "href") != ""
	}) {
		t.Errorf("the page refers to something outside it: <%s %v>", n.Data, n.Attr)
	}

	scenarios := r.Scenarios()
	if len(scenarios) == 0 {
		t.Fatal("report.json holds no scenario")
	}
	for _, s := range scenarios {
		sec := find(doc, func(n *html.Node) bool { return n.Data == "section" && attr(n, "id") == s.ID })
		if sec == nil {
			t.Errorf("no section for scenario %s", s.ID)
			continue
		}
		var targets []string
		for _, c := range s.Cases {
			for _, res := range c.Results {
				if !slices.Contains(targets, res.Target) {
					targets = append(targets, res.Target)
				}
			}
		}
		tp := findAll(sec, hasClass("throughput"))
		if len(tp) != 1 {
			t.Errorf("%s: %d throughput charts, want 1", s.ID, len(tp))
		} else {
			checkChart(t, s.ID+" throughput", tp[0], targets)
		}
		names := s.PercentileNames()
		lat := findAll(sec, hasClass("latency"))
		if len(lat) != len(names) {
			t.Errorf("%s: %d latency charts, want one per percentile measured %v", s.ID, len(lat), names)
			continue
		}
		for i, name := range names {
			if !strings.Contains(textOf(lat[i]), name+" latency") {
				t.Errorf("%s: latency chart %d is not titled %q", s.ID, i, name)
			}
			checkChart(t, s.ID+" "+name, lat[i], targets)
		}
	}
	if r.Staleness != nil {
		st := findAll(doc, hasClass("staleness"))
		if len(st) != 1 {
			t.Errorf("%d staleness charts, want 1", len(st))
		} else {
			checkChart(t, "staleness", st[0], []string{"p50", "p99", "max"})
		}
	}

	// Who wins, computed here from the JSON, row by row.
	type row struct{ scenario, concurrency, winner, runnerUp, ratio, noise string }
	var want []row
	for _, s := range scenarios {
		for _, c := range s.Cases {
			if len(c.Results) < 2 {
				continue
			}
			best, next := -1, -1
			for i, res := range c.Results {
				switch {
				case best < 0 || res.Median > c.Results[best].Median:
					best, next = i, best
				case next < 0 || res.Median > c.Results[next].Median:
					next = i
				}
			}
			w, u := c.Results[best], c.Results[next]
			noise := "no: min–max bands overlap"
			switch {
			case len(w.Runs) < 2 || len(u.Runs) < 2:
				noise = "unknown: one run"
			case w.Min > u.Max:
				noise = "yes"
			}
			want = append(want, row{s.ID, strconv.Itoa(c.Concurrency), w.Target, u.Target,
				strconv.FormatFloat(w.Median/u.Median, 'f', 2, 64) + "×", noise})
		}
	}
	table := find(doc, func(n *html.Node) bool { return n.Data == "table" && hasClass("wins")(n) })
	if table == nil {
		t.Fatal("no who-wins table")
	}
	var got []row
	for _, tr := range findAll(table, func(n *html.Node) bool { return n.Data == "tr" && attr(n, "data-scenario") != "" }) {
		cell := func(class string) string {
			if td := find(tr, hasClass(class)); td != nil {
				return strings.TrimSpace(textOf(td))
			}
			return ""
		}
		got = append(got, row{attr(tr, "data-scenario"), attr(tr, "data-concurrency"), cell("winner"), cell("runner-up"), cell("ratio"), cell("noise")})
	}
	if !slices.Equal(got, want) {
		t.Errorf("who-wins table:\n got %q\nwant %q", got, want)
	}

	// The commands to reproduce are on the page.
	pre := find(doc, hasClass("commands"))
	for _, c := range r.Commands {
		if pre == nil || !strings.Contains(textOf(pre), c) {
			t.Errorf("command %q is not on the page", c)
		}
	}
}

// checkChart checks that a figure holds one non-empty SVG naming every target and filling a bar in each target's
// colour.
func checkChart(t *testing.T, what string, fig *html.Node, targets []string) {
	t.Helper()
	svgs := findAll(fig, func(n *html.Node) bool { return n.Data == "svg" })
	if len(svgs) != 1 {
		t.Errorf("%s: %d <svg> elements, want 1", what, len(svgs))
		return
	}
	svg := svgs[0]
	if attr(svg, "width") == "" || attr(svg, "height") == "" || len(findAll(svg, func(n *html.Node) bool { return n.Data == "path" })) < 3 {
		t.Errorf("%s: the SVG is empty", what)
		return
	}
	text := textOf(svg)
	var fills strings.Builder
	for _, p := range findAll(svg, func(n *html.Node) bool { return n.Data == "path" }) {
		fills.WriteString(strings.ToLower(attr(p, "style")))
	}
	for i, target := range targets {
		if !strings.Contains(text, target) {
			t.Errorf("%s: the chart does not name %s", what, target)
		}
		if !strings.Contains(fills.String(), "fill:"+chart.ColorHex(i)) {
			t.Errorf("%s: no bar in %s's colour %s", what, target, chart.ColorHex(i))
		}
	}
}

func parsePage(t *testing.T, dir string) *html.Node {
	t.Helper()
	f, err := os.Open(filepath.Join(dir, "index.html"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	doc, err := html.Parse(f)
	if err != nil {
		t.Fatalf("index.html does not parse: %v", err)
	}
	return doc
}

// saveArtifact copies the report where `go test` callers can look at it, when KEYWAY_TEST_ARTIFACTS names a
// directory.
func saveArtifact(t *testing.T, dir string) {
	out := os.Getenv("KEYWAY_TEST_ARTIFACTS")
	if out == "" {
		return
	}
	for _, name := range []string{"index.html", "report.json"} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err == nil {
			err = os.WriteFile(filepath.Join(out, "bench-report-"+name), b, 0o644)
		}
		if err != nil {
			t.Logf("artifact %s: %v", name, err)
		}
	}
}

func attr(n *html.Node, key string) string {
	for _, a := range n.Attr {
		if a.Key == key {
			return a.Val
		}
	}
	return ""
}

func hasClass(class string) func(*html.Node) bool {
	return func(n *html.Node) bool {
		return n.Type == html.ElementNode && slices.Contains(strings.Fields(attr(n, "class")), class)
	}
}

func findAll(n *html.Node, match func(*html.Node) bool) []*html.Node {
	var out []*html.Node
	for c := n.FirstChild; c != nil; c = c.NextSibling {
		if c.Type == html.ElementNode && match(c) {
			out = append(out, c)
		}
		out = append(out, findAll(c, match)...)
	}
	return out
}

func find(n *html.Node, match func(*html.Node) bool) *html.Node {
	if all := findAll(n, match); len(all) > 0 {
		return all[0]
	}
	return nil
}

func textOf(n *html.Node) string {
	var b strings.Builder
	var walk func(*html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.TextNode {
			b.WriteString(n.Data)
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(n)
	return b.String()
}
