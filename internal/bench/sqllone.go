package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// lone_client: one PHP process (mysqli, the text protocol: mysqli_query with the id in the statement) loading
// pages one after another, a page being a new connection, PageSize point selects (loneQuery, random ids over
// sbtest1's rows) and the close: what a PHP request feels, the latency of each statement, not a throughput of many
// threads. One case per page size (1, 5 and 20 by default), each on every target, alternating like the other
// cases; pages/s, and the CPU per page of each process. Every run starts on a warmed target: one connection reads
// every row once before the run (outside its time and its CPU), so that with the cache on every select of the run
// is a hit, which the run checks (keyway's sql_cache_hits_total before and after it).
//
// From the page sizes, statementCosts fits each target's time per page against the selects per page, a
// least-squares line per repetition: the slope is what one statement costs on that path, the intercept what the
// page costs besides (connect and close); the slope less direct's is what the path adds per statement.
const loneWorkload = "lone_client"

// loneQuery is lone_client's statement, as the report prints it; the PHP loop writes the id in.
const loneQuery = "SELECT c FROM sbtest1 WHERE id = ?"

// defaultPageSizes are lone_client's selects per page.
var defaultPageSizes = []int{1, 5, 20}

// maxPageSize bounds --page-sizes.
const maxPageSize = 1000

// lonePHP is lone_client's client; its first argument picks the mode, and every mode connects as the bench's account.
//
//	warm HOST PORT ROWS: one connection reads every row of sbtest1 (ids 1 to ROWS) once; exits 1 on a failure or a
//	  missing row.
//	pages HOST PORT ROWS SIZE SECONDS: pages of SIZE selects of random rows for SECONDS, a new connection each;
//	  prints "pages selects failures seconds hits [first failure]", hits being keyway's sql_cache_hits_total over
//	  the run (-1 where the server is not keyway: MariaDB knows no SHOW KEYWAY CACHE). A page with a failure is not
//	  counted; its failure is.
const lonePHP = `<?php
mysqli_report(MYSQLI_REPORT_OFF);
[$mode, $host, $port, $rows] = [$argv[1], $argv[2], (int)$argv[3], (int)$argv[4]];
function hits($host, $port) {
	$db = @mysqli_connect($host, 'app', 'secret', 'test', $port);
	if ($db === false) { return -1; }
	$r = @mysqli_query($db, "SHOW KEYWAY CACHE");
	$h = -1;
	if ($r !== false) {
		while ($row = mysqli_fetch_row($r)) { if ($row[0] === 'sql_cache_hits_total') { $h = (int)$row[1]; } }
		mysqli_free_result($r);
	}
	mysqli_close($db);
	return $h;
}
if ($mode === 'warm') {
	$db = @mysqli_connect($host, 'app', 'secret', 'test', $port);
	if ($db === false) { fwrite(STDERR, "warm-up: connect: " . mysqli_connect_errno() . " " . mysqli_connect_error() . "\n"); exit(1); }
	for ($id = 1; $id <= $rows; $id++) {
		$r = mysqli_query($db, "SELECT c FROM sbtest1 WHERE id = $id");
		if ($r === false) { fwrite(STDERR, "warm-up: id $id: " . mysqli_errno($db) . " " . mysqli_error($db) . "\n"); exit(1); }
		if (mysqli_fetch_row($r) === null) { fwrite(STDERR, "warm-up: sbtest1 has no row with id $id\n"); exit(1); }
		mysqli_free_result($r);
	}
	mysqli_close($db);
	exit(0);
}
if ($mode !== 'pages') { fwrite(STDERR, "unknown mode $mode\n"); exit(2); }
[$size, $secs] = [(int)$argv[5], (float)$argv[6]];
$h0 = hits($host, $port);
$pages = 0; $selects = 0; $fail = 0; $first = '';
$t = microtime(true); $end = $t + $secs;
while (microtime(true) < $end) {
	$db = @mysqli_connect($host, 'app', 'secret', 'test', $port);
	if ($db === false) {
		$fail++;
		if ($first === '') { $first = mysqli_connect_errno() . ' ' . mysqli_connect_error(); }
		continue;
	}
	$ok = true;
	for ($i = 0; $i < $size; $i++) {
		$id = mt_rand(1, $rows);
		$r = mysqli_query($db, "SELECT c FROM sbtest1 WHERE id = $id");
		if ($r === false) {
			$fail++; $ok = false;
			if ($first === '') { $first = mysqli_errno($db) . ' ' . mysqli_error($db); }
			break;
		}
		mysqli_fetch_row($r);
		mysqli_free_result($r);
		$selects++;
	}
	mysqli_close($db);
	if ($ok) { $pages++; }
}
$el = microtime(true) - $t;
$h1 = hits($host, $port);
printf("%d %d %d %.6f %d %s\n", $pages, $selects, $fail, $el, ($h0 < 0 || $h1 < 0) ? -1 : $h1 - $h0, $first);
`

// warmedStarter is t, started and then warmed: the PHP client reads every one of rows rows once on one connection,
// so that a cache has them all and the run's time and CPU hold none of it.
func warmedStarter(t target, script string, rows int) target {
	start := t.start
	t.start = func(ctx context.Context) (running, error) {
		r, err := start(ctx)
		if err != nil {
			return running{}, err
		}
		host, port, err := splitAddr(r.addr)
		if err == nil {
			_, err = runPHP(ctx, 10*time.Minute, script, "warm", host, port, strconv.Itoa(rows))
		}
		if err != nil {
			_ = r.stop()
			return running{}, fmt.Errorf("warm-up: %w", err)
		}
		return r, nil
	}
	return t
}

// loneResult is what lonePHP's pages mode printed.
type loneResult struct {
	pages, selects, failures int64
	seconds                  float64
	hits                     int64  // keyway's cache hits over the run; -1 where the server is not keyway
	first                    string // the first failure's "errno message", or ""
}

// parseLonePages reads lonePHP's line: "pages selects failures seconds hits [first failure]".
func parseLonePages(out string) (loneResult, error) {
	var r loneResult
	f := strings.SplitN(strings.TrimSpace(out), " ", 6)
	bad := fmt.Errorf("bench: the lone client printed %q, not its pages, selects, failures, time and hits", out)
	if len(f) < 5 {
		return r, bad
	}
	var errs [5]error
	r.pages, errs[0] = strconv.ParseInt(f[0], 10, 64)
	r.selects, errs[1] = strconv.ParseInt(f[1], 10, 64)
	r.failures, errs[2] = strconv.ParseInt(f[2], 10, 64)
	r.seconds, errs[3] = strconv.ParseFloat(f[3], 64)
	r.hits, errs[4] = strconv.ParseInt(f[4], 10, 64)
	if errors.Join(errs[:]...) != nil || r.seconds <= 0 {
		return r, bad
	}
	if len(f) == 6 {
		r.first = f[5]
	}
	if r.pages == 0 {
		return r, fmt.Errorf("bench: the lone client loaded not one page in %.1fs (%d failures; first: %s)", r.seconds, r.failures, r.first)
	}
	return r, nil
}

// lonePages is lone_client's load: pages of size selects against addr for duration.
func lonePages(script string, rows, size int, duration time.Duration) loadFunc {
	return func(ctx context.Context, addr string) (sample, error) {
		host, port, err := splitAddr(addr)
		if err != nil {
			return sample{}, err
		}
		out, err := runPHP(ctx, duration+time.Minute, script, "pages", host, port, strconv.Itoa(rows), strconv.Itoa(size),
			strconv.FormatFloat(duration.Seconds(), 'f', -1, 64))
		if err != nil {
			return sample{}, err
		}
		r, err := parseLonePages(out)
		if err != nil {
			return sample{}, err
		}
		errs := phpErrors(r.failures, r.first)
		s := sample{ops: float64(r.pages) / r.seconds, n: r.pages, errs: errs}
		s.note = fmt.Sprintf("(%d pages, %d selects, %d failed, in %.2fs; %.0f µs a page", r.pages, r.selects, r.failures, r.seconds,
			1e6*r.seconds/float64(r.pages))
		if r.hits >= 0 && r.selects > 0 {
			s.hits, s.hasHits = float64(r.hits)/float64(r.selects), true
			s.note += fmt.Sprintf("; keyway's cache hits %d, %.3f of the selects", r.hits, s.hits)
		}
		if r.first != "" {
			s.note += "; first failure: " + r.first
		}
		s.note += ")"
		return s, nil
	}
}

// runLoneClient runs lone_client: one case per page size, on every target, each run warmed (and keyway's cache
// vouched for by its binlog follower first), and the statement costs fitted from them.
func (e *sqlEnv) runLoneClient(ctx context.Context) ([]SQLCase, []StatementCost, error) {
	o := e.o
	script, err := writePHP("keyway-bench-lone-*.php", lonePHP)
	if err != nil {
		return nil, nil, err
	}
	defer os.Remove(script)
	targets, cleanup, err := e.targets(keywayLimits{})
	if err != nil {
		return nil, nil, err
	}
	defer cleanup()
	for i, t := range targets {
		if t.name == keywayTarget {
			t = freshStarter(t)
		}
		targets[i] = warmedStarter(t, script, o.TableSize)
	}
	var cases []SQLCase
	for _, size := range o.PageSizes {
		fmt.Fprintf(o.Out, "%s: one PHP process, pages of %d × %s (mysqli_query, random ids over %d rows), a new connection per page:\n",
			loneWorkload, size, loneQuery, o.TableSize)
		results, err := runTargets(ctx, targets, o.Repetitions, lonePages(script, o.TableSize, size, o.Duration),
			meter{client: loadGenerator("php"), shared: []cpuProc{procOf("mariadb", e.m.Process())}}, o.Out, o.Progress,
			fmt.Sprintf("sql %s, pages of %d", loneWorkload, size))
		if err != nil {
			return nil, nil, fmt.Errorf("%s, pages of %d: %w", loneWorkload, size, err)
		}
		c := newSQLCase(loneWorkload, 1, results)
		c.PageSize = size
		cases = append(cases, c)
	}
	return cases, statementCosts(cases), nil
}

// StatementCost is one target's lone_client fit: per repetition, the least-squares line of its time per page (µs,
// the inverse of pages/s) against the selects per page over the page sizes.
type StatementCost struct {
	Target string
	// PerStatement is the slope, µs a select costs on this path; Connect the intercept, µs a page costs besides
	// its selects (the connect and the close).
	PerStatement, Connect Series
	// Added is PerStatement less direct's in the same repetition: µs this path adds to every statement. Nil for
	// direct, and when direct did not run.
	Added *Series `json:",omitempty"`
}

// fitLine is the least-squares line y = intercept + slope·x through the points (x[i], y[i]); ok is false with
// fewer than two distinct x.
func fitLine(x, y []float64) (intercept, slope float64, ok bool) {
	n := float64(len(x))
	if len(x) != len(y) || len(x) < 2 {
		return 0, 0, false
	}
	var sx, sy float64
	for i := range x {
		sx += x[i]
		sy += y[i]
	}
	mx, my := sx/n, sy/n
	var sxx, sxy float64
	for i := range x {
		sxx += (x[i] - mx) * (x[i] - mx)
		sxy += (x[i] - mx) * (y[i] - my)
	}
	if sxx == 0 {
		return 0, 0, false
	}
	slope = sxy / sxx
	return my - slope*mx, slope, true
}

// statementCosts fits every target's time per page against the page sizes of cases (lone_client's, one per page
// size), a line per repetition through the r-th run of each size; nil with fewer than two page sizes. A size in
// which a target has no r-th run (or none above 0) is left out of that repetition's line, and a repetition left
// with fewer than two sizes is not fitted.
func statementCosts(cases []SQLCase) []StatementCost {
	var sizes []int
	for _, c := range cases {
		if !slices.Contains(sizes, c.PageSize) {
			sizes = append(sizes, c.PageSize)
		}
	}
	if len(sizes) < 2 {
		return nil
	}
	var out []StatementCost
	// Per target and repetition, the slope, where the repetition was fitted.
	slopes := map[string][]float64{}
	var order []string
	for _, c := range cases {
		for _, r := range c.Results {
			if !slices.Contains(order, r.Target) {
				order = append(order, r.Target)
			}
		}
	}
	reps := 0
	for _, c := range cases {
		for _, r := range c.Results {
			reps = max(reps, len(r.Runs))
		}
	}
	fitted := map[string][]bool{}
	for _, target := range order {
		sc := StatementCost{Target: target}
		slopes[target] = make([]float64, reps)
		fitted[target] = make([]bool, reps)
		for rep := range reps {
			var x, y []float64
			for _, c := range cases {
				i := slices.IndexFunc(c.Results, func(r Result) bool { return r.Target == target })
				if i < 0 || rep >= len(c.Results[i].Runs) || c.Results[i].Runs[rep] <= 0 {
					continue
				}
				x = append(x, float64(c.PageSize))
				y = append(y, 1e6/c.Results[i].Runs[rep])
			}
			a, b, ok := fitLine(x, y)
			if !ok {
				continue
			}
			sc.PerStatement.Runs = append(sc.PerStatement.Runs, b)
			sc.Connect.Runs = append(sc.Connect.Runs, a)
			slopes[target][rep], fitted[target][rep] = b, true
		}
		if len(sc.PerStatement.Runs) == 0 {
			continue
		}
		sc.PerStatement.summarize()
		sc.Connect.summarize()
		out = append(out, sc)
	}
	if _, ok := slopes[directTarget]; !ok {
		return out
	}
	for i := range out {
		t := out[i].Target
		if t == directTarget {
			continue
		}
		var added Series
		for rep := range reps {
			if fitted[t][rep] && fitted[directTarget][rep] {
				added.Runs = append(added.Runs, slopes[t][rep]-slopes[directTarget][rep])
			}
		}
		if len(added.Runs) > 0 {
			added.summarize()
			out[i].Added = &added
		}
	}
	return out
}

// Targets the report prints next to lone_client's figures (it never asserts them): by page size, keyway's median
// pages/s over direct's with the cache off (kw-nocache) and on (keyway). haproxy's figure is kw-nocache's floor.
var loneTargets = map[int]struct{ uncached, cached float64 }{
	20: {0.8, 2.0},
	5:  {0.8, 2.0},
}

// loneVerdicts are the target lines of one lone_client case: "pages of 20: kw-nocache/direct 0.45 (target ≥ 0.8):
// not met; …". None for a page size without targets.
func loneVerdicts(c SQLCase) []string {
	want, ok := loneTargets[c.PageSize]
	if !ok {
		return nil
	}
	verdict := func(v, target float64) string {
		if v >= target {
			return "met"
		}
		return "not met"
	}
	var out []string
	for _, t := range []struct {
		target string
		min    float64
	}{{nocacheTarget, want.uncached}, {keywayTarget, want.cached}} {
		if v, ok := c.Ratios[t.target]; ok && v > 0 {
			out = append(out, fmt.Sprintf("pages of %d: %s/direct %.2f (target ≥ %.1f): %s", c.PageSize, t.target, v, t.min, verdict(v, t.min)))
		}
	}
	if c.RelayRatio > 0 {
		out = append(out, fmt.Sprintf("pages of %d: kw-nocache/haproxy %.2f (the floor: ≥ 1.0, never below the plain relay): %s",
			c.PageSize, c.RelayRatio, verdict(c.RelayRatio, 1)))
	}
	return out
}

// writeLoneClient prints one lone_client case: pages/s per target, failures, keyway's cache hits, the ratio to
// direct, the targets and the CPU per page. The header goes with the first case (first).
func writeLoneClient(w io.Writer, c SQLCase, first bool) {
	if first {
		fmt.Fprintf(w, "\nlone_client: one PHP process, pages one after another, each a new connection, N × %s (mysqli_query: the text\n"+
			" protocol; random ids over the table) and the close; every run warmed first (each row read once); pages/s\n", loneQuery)
	}
	fmt.Fprintf(w, "\npages of %d select%s:\n", c.PageSize, plural(c.PageSize))
	tw := len("target")
	for _, res := range c.Results {
		tw = max(tw, len(res.Target))
	}
	fmt.Fprintf(w, "%-*s  %4s  %13s  %14s  %13s  %9s  %8s  %10s  %9s\n", tw, "target", "runs", "min pages/s", "median pages/s", "max pages/s",
		"µs a page", "failures", "cache hits", "vs direct")
	for _, res := range c.Results {
		fails, hits, ratio, page := "-", "", "", "-"
		if res.Errors != nil {
			fails = strconv.FormatFloat(res.Errors.TooMany.Median+res.Errors.Timeouts.Median+res.Errors.Other.Median, 'f', 0, 64)
		}
		if res.CacheHits != nil {
			hits = strconv.FormatFloat(res.CacheHits.Median, 'f', 3, 64)
		}
		if v := c.Ratios[res.Target]; v > 0 {
			ratio = strconv.FormatFloat(v, 'f', 2, 64)
		}
		if res.Median > 0 {
			page = strconv.FormatFloat(1e6/res.Median, 'f', 0, 64)
		}
		line := fmt.Sprintf("%-*s  %4d  %13s  %14s  %13s  %9s  %8s  %10s  %9s", tw, res.Target, len(res.Runs), formatOps(res.Min),
			formatOps(res.Median), formatOps(res.Max), page, fails, hits, ratio)
		fmt.Fprintln(w, strings.TrimRight(line, " "))
		if res.Errors != nil {
			for _, s := range res.Errors.Samples {
				fmt.Fprintf(w, "  %s, failure: %s\n", res.Target, s)
			}
		}
	}
	for _, res := range c.Results {
		if res.Target == keywayTarget && res.CacheHits != nil && res.CacheHits.Min < 0.99 {
			fmt.Fprintf(w, "warning: keyway's cache answered only %.3f of the selects in its worst run: the cached figure is not all hits\n", res.CacheHits.Min)
		}
	}
	for _, v := range loneVerdicts(c) {
		fmt.Fprintln(w, v)
	}
	writeCPUPer(w, c.Results, "page")
}

// writeStatementCosts prints lone_client's fit: per target the µs a select costs, the µs a page costs besides
// (connect and close), and the µs a select costs over direct's.
func writeStatementCosts(w io.Writer, costs []StatementCost, sizes []int) {
	if len(costs) == 0 {
		return
	}
	s := make([]string, len(sizes))
	for i, n := range sizes {
		s[i] = strconv.Itoa(n)
	}
	fmt.Fprintf(w, "\nlone_client, cost per statement: a least-squares line of µs a page against selects a page (%s), per repetition;\n"+
		" slope: µs a select; intercept: µs a page besides its selects (connect + close); added: the slope less direct's (median [min–max])\n",
		strings.Join(s, ", "))
	tw := len("target")
	for _, c := range costs {
		tw = max(tw, len(c.Target))
	}
	fmt.Fprintf(w, "%-*s  %-24s  %-24s  %s\n", tw, "target", "µs a select", "µs connect + close", "µs added a select over direct")
	for _, c := range costs {
		added := "-"
		if c.Added != nil {
			added = signedBand(*c.Added)
		}
		fmt.Fprintf(w, "%-*s  %-24s  %-24s  %s\n", tw, c.Target, microsBand(c.PerStatement), microsBand(c.Connect), added)
	}
}

// microsBand is "95.1 [90.2–99.0]".
func microsBand(s Series) string {
	f := func(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) }
	return f(s.Median) + " [" + f(s.Min) + "–" + f(s.Max) + "]"
}

// signedBand is microsBand with the median's sign: "+90.0 [85.2–95.1]".
func signedBand(s Series) string {
	b := microsBand(s)
	if s.Median >= 0 {
		b = "+" + b
	}
	return b
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}
