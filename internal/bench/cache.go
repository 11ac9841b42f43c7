package bench

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/keywaydb/keyway/internal/peers"
)

// The cache bench (`keyway bench cache`) puts keyway's consistent cache side by side with what it replaces, in one
// run. Its four parts reuse the other suites where one exists:
//  1. sysbench oltp_point_select through keyway with the cache on and off, and direct: RunSQL, with those targets;
//  2. seed 003's PHP mysqli loops (SELECT 2, and a 6-row SELECT *, each Loops times) direct, through keyway with the
//     cache off, and through keyway with the cache on (the statements carry /*+ keyway cache ttl=N */, a comment to
//     the other two);
//  3. staleness under load: RunStaleness;
//  4. seed 002's restart: a PHP point-select loop through keyway, warmed, keyway stopped with SIGTERM and started on
//     the same data_dir, against a PHP cache-aside loop on memcached, warmed, memcached restarted. The first
//     RestartWindow after each restart is counted per second: queries answered and how many the cache answered
//     (keyway's own sql_cache_hits_total, read by the loop at each second's end; memcached's hits, as the loop sees
//     them).
//
// Like every suite it measures and prints, with the targets next to the figures; it asserts nothing.

// CacheOptions configures RunCache. Zero fields take the defaults EnsureDefaults documents.
type CacheOptions struct {
	KeywayBinary  string        // path; if empty, peers.KeywayBinary() builds one
	Duration      time.Duration // per sysbench run, whole seconds; default 10s
	Repetitions   int           // runs per target in parts 1, 2 and 4, alternating; default 3
	Threads       []int         // sysbench --threads; default 1, 4, 8
	TableSize     int           // sysbench --table-size; default 10000
	Loops         int           // iterations of each PHP loop (seed 003); default 10000
	Keys          int           // rows the restart loop reads (seed 002); default 100000, the seed's
	RestartWindow time.Duration // counted after a restart, whole seconds; default 10s
	Writes        int           // staleness: direct commits measured; default 300
	Out           io.Writer     // progress lines; default io.Discard
	Progress      *Progress     // the terminal's status line, or nil; the caller plans it with Plan
}

// EnsureDefaults replaces zero fields with their defaults.
func (o *CacheOptions) EnsureDefaults() {
	if o.Duration == 0 {
		o.Duration = 10 * time.Second
	}
	if o.Repetitions == 0 {
		o.Repetitions = 3
	}
	if len(o.Threads) == 0 {
		o.Threads = []int{1, 4, 8}
	}
	if o.TableSize == 0 {
		o.TableSize = 10000
	}
	if o.Loops == 0 {
		o.Loops = 10000
	}
	if o.Keys == 0 {
		o.Keys = 100000
	}
	if o.RestartWindow == 0 {
		o.RestartWindow = 10 * time.Second
	}
	if o.Writes == 0 {
		o.Writes = 300
	}
	if o.Out == nil {
		o.Out = io.Discard
	}
}

// Validate reports every invalid field at once (the sysbench ones through SQLOptions).
func (o *CacheOptions) Validate() error {
	so := o.sqlOptions()
	errs := []error{so.Validate()}
	if o.Loops < 1 {
		errs = append(errs, fmt.Errorf("loops %d: use 1 or more", o.Loops))
	}
	if o.Keys < 1 {
		errs = append(errs, fmt.Errorf("keys %d: use 1 or more", o.Keys))
	}
	if o.RestartWindow < time.Second || o.RestartWindow%time.Second != 0 {
		errs = append(errs, fmt.Errorf("restart window %v: counted per second; use 1s or more in whole seconds", o.RestartWindow))
	}
	if o.Writes < 1 {
		errs = append(errs, fmt.Errorf("writes %d: use 1 or more", o.Writes))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("bench: invalid cache options: %w", err)
	}
	return nil
}

// sqlOptions is part 1: bench sql's point selects with the cache on, off, and direct.
func (o *CacheOptions) sqlOptions() SQLOptions {
	s := SQLOptions{KeywayBinary: o.KeywayBinary, Duration: o.Duration, Repetitions: o.Repetitions, Threads: o.Threads,
		Workloads: []string{"oltp_point_select"}, TableSize: o.TableSize,
		Targets: []string{directTarget, keywayTarget, nocacheTarget}, Out: o.Out, Progress: o.Progress}
	s.EnsureDefaults()
	return s
}

// Plan is how many runs RunCache makes and about how long they take.
func (o CacheOptions) Plan() (runs int, hint time.Duration) {
	o.EnsureDefaults()
	runs, hint = o.sqlOptions().Plan()
	php := len(phpQueries) * len(phpTargets) * o.Repetitions
	restarts := len(restartTargets) * o.Repetitions
	st := StalenessOptions{Writes: o.Writes}
	sr, sh := st.Plan()
	return runs + php + sr + restarts, hint + sh + time.Duration(restarts)*o.RestartWindow
}

// Targets of parts 2 and 4, in the order they alternate; direct is part 2's baseline.
const (
	phpCachedTarget = "keyway-cached" // through keyway, cache on, the statement hinted cacheable
	warmTarget      = "keyway-warm"   // keyway restarted on its data_dir
	coldTarget      = "memcached-cold"
)

var (
	phpTargets     = []string{directTarget, nocacheTarget, phpCachedTarget}
	restartTargets = []string{warmTarget, coldTarget}
)

// The seed's two statements: the cheapest query there is, and a 6-row table (int, varchar(4)) read whole.
const phpTTL = 60 // seconds: longer than any run

var phpQueries = []string{"SELECT 2", "SELECT * FROM test.t1"}

// The targets the report prints next to the figures (it never asserts them).
const (
	targetPointSelect = 2.0  // cached point selects over direct at 8 threads
	targetWarmHit     = 0.95 // hit ratio within 1 s of a restart
	targetStaleP99    = 10.0 // ms
)

// CacheReport is the outcome of RunCache.
type CacheReport struct {
	Command   string           `json:",omitempty"` // the keyway command that made it, when the CLI ran it
	Server    string           // the MariaDB of parts 2 and 4: its version()
	SQL       *SQLReport       // part 1
	PHP       []PHPCase        // part 2, one per statement
	Staleness *StalenessReport // part 3
	Restart   []RestartResult  // part 4: keyway-warm, memcached-cold
	Keys      int              // rows the restart loop reads
	Window    time.Duration    // counted after each restart
}

// PHPCase is one seed-003 loop on every target.
type PHPCase struct {
	Query   string // as sent (with the hint, which direct and kw-nocache read as a comment)
	Loops   int
	Results []Result // ops/s per target
	Ratios  map[string]float64
	// Hits is keyway's sql_cache_hits_total at the end of each run, per keyway target: whether the cache answered.
	Hits map[string][]int64
}

// RestartResult is one restart target over the repetitions.
type RestartResult struct {
	Target string
	// FirstHit is the hit ratio in the first second after the restart; Hit over the whole window; QPS the loop's
	// queries per second over the window.
	FirstHit, Hit, QPS Series
	Seconds            [][]RestartSecond // per repetition, per second
	// EntriesBefore is keyway's sql_cache_entries after each warm-up, before the restart (keyway-warm only).
	EntriesBefore []int64 `json:",omitempty"`
}

// RestartSecond is one second of the loop after a restart.
type RestartSecond struct {
	Ops  int64 // reads the loop completed
	Hits int64 // of them, answered by the cache
}

// RunCache runs the four parts in turn.
func RunCache(ctx context.Context, o CacheOptions) (*CacheReport, error) {
	o.EnsureDefaults()
	if err := o.Validate(); err != nil {
		return nil, err
	}
	bin, err := prepare(o.KeywayBinary, "sysbench", "php", "memcached", "mariadbd", "mariadb-install-db")
	if err != nil {
		return nil, err
	}
	o.KeywayBinary = bin
	rep := &CacheReport{Keys: o.Keys, Window: o.RestartWindow}

	fmt.Fprintf(o.Out, "cache bench 1/4: sysbench oltp_point_select, direct and through keyway with the cache on and off\n")
	if rep.SQL, err = RunSQL(ctx, o.sqlOptions()); err != nil {
		return nil, err
	}

	fmt.Fprintf(o.Out, "cache bench 2/4 and 4/4: starting MariaDB for the PHP loops\n")
	m, version, err := startMariaDB(ctx)
	if err != nil {
		return nil, err
	}
	defer m.Stop()
	rep.Server = "MariaDB " + version
	if err := createCacheTables(ctx, m.AppDSN, o.Keys); err != nil {
		return nil, err
	}
	php, err := writePHP("keyway-bench-cache-*.php", phpScript)
	if err != nil {
		return nil, err
	}
	defer os.Remove(php)
	cfg, err := writeKeywaySQLConfig(m.Socket, true, keywayLimits{})
	if err != nil {
		return nil, err
	}
	defer os.Remove(cfg)
	nocache, err := writeKeywaySQLConfig(m.Socket, false, keywayLimits{})
	if err != nil {
		return nil, err
	}
	defer os.Remove(nocache)

	fmt.Fprintf(o.Out, "cache bench 2/4: seed 003's PHP mysqli loops, %d× each\n", o.Loops)
	// byAddr names the target serving at an address, so a run's cache hits are filed under its target.
	byAddr := map[string]string{}
	targets := namedByAddr(byAddr, directStarter(m.Addr), keywaySQLStarter(nocacheTarget, bin, nocache),
		freshStarter(keywaySQLStarter(phpCachedTarget, bin, cfg)))
	for _, q := range phpQueries {
		q = fmt.Sprintf("/*+ keyway cache ttl=%d */ %s", phpTTL, q)
		c := PHPCase{Query: q, Loops: o.Loops, Hits: map[string][]int64{}}
		record := func(addr string, hits int64) { c.Hits[byAddr[addr]] = append(c.Hits[byAddr[addr]], hits) }
		results, err := runTargets(ctx, targets, o.Repetitions, phpLoop(php, q, o.Loops, record),
			meter{client: loadGenerator("php"), shared: []cpuProc{procOf("mariadb", m.Process())}}, o.Out, o.Progress, "cache php "+q)
		if err != nil {
			return nil, err
		}
		c.Results, c.Ratios = results, ratios(results, directTarget)
		rep.PHP = append(rep.PHP, c)
	}

	fmt.Fprintf(o.Out, "cache bench 3/4: staleness under load\n")
	if rep.Staleness, err = RunStaleness(ctx, StalenessOptions{KeywayBinary: bin, Writes: o.Writes, Out: o.Out, Progress: o.Progress}); err != nil {
		return nil, err
	}

	fmt.Fprintf(o.Out, "cache bench 4/4: restart, %d keys, %v counted after each restart\n", o.Keys, o.RestartWindow)
	rep.Restart = make([]RestartResult, len(restartTargets))
	for i, t := range restartTargets {
		rep.Restart[i].Target = t
	}
	r := restarter{o: o, php: php, bin: bin, cfg: cfg, m: m}
	for rep1 := 1; rep1 <= o.Repetitions; rep1++ {
		for i, t := range restartTargets {
			o.Progress.Start("cache restart", rep1, o.Repetitions, t)
			secs, err := r.run(ctx, t)
			o.Progress.Done()
			if err != nil {
				return nil, fmt.Errorf("bench: restart %s, repetition %d: %w", t, rep1, err)
			}
			rep.Restart[i].add(secs)
			if t == warmTarget {
				rep.Restart[i].EntriesBefore = append(rep.Restart[i].EntriesBefore, r.entries)
			}
			fmt.Fprintf(o.Out, "rep %d/%d %-14s %s\n", rep1, o.Repetitions, t, formatSeconds(secs))
		}
	}
	for i := range rep.Restart {
		rr := &rep.Restart[i]
		for _, s := range []*Series{&rr.FirstHit, &rr.Hit, &rr.QPS} {
			s.summarize()
		}
	}
	return rep, nil
}

// createCacheTables makes seed 003's 6-row table and the restart loop's keys.
func createCacheTables(ctx context.Context, dsn string, keys int) error {
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	defer db.Close()
	stmts := []string{
		"CREATE TABLE t1 (a INT PRIMARY KEY, b VARCHAR(4))",
		"INSERT INTO t1 VALUES (1,'a'),(2,'bb'),(3,'ccc'),(4,'dddd'),(5,'e'),(6,'ff')",
		"CREATE TABLE container (id INT PRIMARY KEY, v VARCHAR(64) NOT NULL)",
	}
	for _, q := range stmts {
		if _, err := db.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("bench: %s: %w", q, err)
		}
	}
	// The keys, 1000 rows a statement.
	for lo := 0; lo < keys; lo += 1000 {
		var b strings.Builder
		b.WriteString("INSERT INTO container VALUES ")
		for i := lo; i < min(lo+1000, keys); i++ {
			if i > lo {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, "(%d,'value of key_%d')", i, i)
		}
		if _, err := db.ExecContext(ctx, b.String()); err != nil {
			return fmt.Errorf("bench: filling container: %w", err)
		}
	}
	return nil
}

// phpScript holds the seeds' PHP loops; its first argument picks one. Every mode connects as the bench's account.
//
//	loop HOST PORT QUERY N: seed 003, QUERY N times with mysqli (text protocol), every row fetched; prints the
//	  seconds the loop took.
//	warm HOST PORT KEYS: every key's point select once.
//	sql HOST PORT KEYS SECONDS: seed 002's fetch loop through the SQL door for SECONDS; at each second's end prints
//	  "ops hits", hits read from SHOW KEYWAY CACHE (sql_cache_hits_total) on the same connection.
//	memcached MCHOST MCPORT DBHOST DBPORT KEYS SECONDS [warm]: the same keys cache-aside (get; on a miss SELECT
//	  from MariaDB and set); prints "ops hits" per second, or with warm reads every key once and exits.
const phpScript = `<?php
$mode = $argv[1];
function db($host, $port) { return mysqli_connect($host, 'app', 'secret', 'test', (int)$port); }
function point($db, $k) {
	$r = mysqli_query($db, "SELECT id, v FROM container WHERE id = $k");
	$row = mysqli_fetch_row($r);
	mysqli_free_result($r);
	return $row[1];
}
function hits($db) {
	$r = mysqli_query($db, "SHOW KEYWAY CACHE");
	$h = 0;
	while ($row = mysqli_fetch_row($r)) { if ($row[0] === 'sql_cache_hits_total') { $h = (int)$row[1]; } }
	mysqli_free_result($r);
	return $h;
}
if ($mode === 'loop') {
	$db = db($argv[2], $argv[3]); $q = $argv[4]; $n = (int)$argv[5];
	$t = microtime(true);
	for ($i = 0; $i < $n; $i++) {
		$r = mysqli_query($db, $q);
		while (mysqli_fetch_row($r)) {}
		mysqli_free_result($r);
	}
	$el = microtime(true) - $t;
	// The cache hits behind the figure, where the server is keyway (-1 elsewhere: MariaDB knows no SHOW KEYWAY).
	try { $h = hits($db); } catch (Throwable $e) { $h = -1; }
	printf("%.6f %d\n", $el, $h);
	exit(0);
}
if ($mode === 'warm') {
	$db = db($argv[2], $argv[3]);
	for ($k = 0; $k < (int)$argv[4]; $k++) { point($db, $k); }
	exit(0);
}
if ($mode === 'sql') {
	$db = db($argv[2], $argv[3]); $keys = (int)$argv[4]; $secs = (int)$argv[5];
	$base = hits($db);
	$t = microtime(true); $next = $t + 1; $ops = 0; $k = 0;
	for ($s = 0; $s < $secs; ) {
		point($db, $k); $k = ($k + 1) % $keys; $ops++;
		if (microtime(true) >= $next) {
			$h = hits($db);
			printf("%d %d\n", $ops, $h - $base);
			$base = $h; $ops = 0; $next += 1; $s++;
		}
	}
	exit(0);
}
if ($mode === 'memcached') {
	$mc = new Memcached();
	$mc->addServer($argv[2], (int)$argv[3]);
	$db = db($argv[4], $argv[5]); $keys = (int)$argv[6]; $secs = (int)$argv[7]; $warm = isset($argv[8]);
	$get = function ($k) use ($mc, $db) {
		$v = $mc->get("key_$k");
		if ($mc->getResultCode() === Memcached::RES_SUCCESS) { return 1; }
		$mc->set("key_$k", point($db, $k));
		return 0;
	};
	if ($warm) { for ($k = 0; $k < $keys; $k++) { $get($k); } exit(0); }
	$t = microtime(true); $next = $t + 1; $ops = 0; $hits = 0; $k = 0;
	for ($s = 0; $s < $secs; ) {
		$hits += $get($k); $k = ($k + 1) % $keys; $ops++;
		if (microtime(true) >= $next) {
			printf("%d %d\n", $ops, $hits);
			$ops = 0; $hits = 0; $next += 1; $s++;
		}
	}
	exit(0);
}
fwrite(STDERR, "unknown mode $mode\n");
exit(2);
`

// writePHP writes a PHP script (code) to a temporary file named after pattern and returns its path; the caller
// removes it. Every PHP load of the suites runs from one.
func writePHP(pattern, code string) (string, error) { return writeTemp(pattern, code, "PHP script") }

// writeTemp writes text to a new temporary file named after pattern and returns its name; what names the file in
// errors. The caller removes it.
func writeTemp(pattern, text, what string) (string, error) {
	f, err := os.CreateTemp("", pattern)
	if err != nil {
		return "", fmt.Errorf("bench: %s: %w", what, err)
	}
	_, werr := f.WriteString(text)
	if err := errors.Join(werr, f.Close()); err != nil {
		_ = os.Remove(f.Name())
		return "", fmt.Errorf("bench: %s: %w", what, err)
	}
	return f.Name(), nil
}

// runPHP runs the script with args and returns its standard output.
func runPHP(ctx context.Context, timeout time.Duration, script string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "php", append([]string{script}, args...)...)
	cmd.WaitDelay = 2 * time.Second
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("php %s: %w\n%s%s", strings.Join(args, " "), err, tail(out), stderr.String())
	}
	return string(out), nil
}

// freshStarter is t, started and then waited on until keyway's binlog follower vouches for the cache: until then
// every read bypasses the cache, and the run would measure the relay.
func freshStarter(t target) target {
	start := t.start
	t.start = func(ctx context.Context) (running, error) {
		r, err := start(ctx)
		if err != nil {
			return running{}, err
		}
		db, err := sql.Open("mysql", sqlUser+":"+sqlPassword+"@tcp("+r.addr+")/"+sqlDatabase)
		if err == nil {
			err = waitFresh(ctx, db)
			db.Close()
		}
		if err != nil {
			_ = r.stop()
			return running{}, err
		}
		return r, nil
	}
	return t
}

// phpLoop is seed 003's loop: query n times, ops/s over the loop's own time. record gets keyway's cache hits after
// the loop, where the server is keyway.
func phpLoop(script, query string, n int, record func(addr string, hits int64)) loadFunc {
	return func(ctx context.Context, addr string) (sample, error) {
		host, port, err := splitAddr(addr)
		if err != nil {
			return sample{}, err
		}
		out, err := runPHP(ctx, 10*time.Minute, script, "loop", host, port, query, strconv.Itoa(n))
		if err != nil {
			return sample{}, err
		}
		var secs float64
		var hits int64
		if _, err := fmt.Sscanf(out, "%f %d", &secs, &hits); err != nil || secs <= 0 {
			return sample{}, fmt.Errorf("php loop printed %q, not its runtime and hits", out)
		}
		note := fmt.Sprintf("(%d loops in %.3fs", n, secs)
		if hits >= 0 {
			note += fmt.Sprintf("; keyway's cache hits: %d", hits)
			record(addr, hits)
		}
		return sample{ops: float64(n) / secs, note: note + ")"}, nil
	}
}

func splitAddr(addr string) (host, port string, err error) {
	host, port, ok := strings.Cut(addr, ":")
	if !ok {
		return "", "", fmt.Errorf("bench: server address %q has no port", addr)
	}
	return host, port, nil
}

// restarter runs part 4's two targets.
type restarter struct {
	o   CacheOptions
	php string
	bin string
	cfg string
	m   *peers.MariaDB
	// entries is keyway's sql_cache_entries after the last warm-up, before the restart: that the warm-up filled it.
	entries int64
}

// cacheFigure reads one row of SHOW KEYWAY CACHE from the keyway at addr.
func cacheFigure(ctx context.Context, addr, name string) (int64, error) {
	db, err := sql.Open("mysql", sqlUser+":"+sqlPassword+"@tcp("+addr+")/"+sqlDatabase)
	if err != nil {
		return 0, err
	}
	defer db.Close()
	rows, err := db.QueryContext(ctx, "SHOW KEYWAY CACHE")
	if err != nil {
		return 0, fmt.Errorf("SHOW KEYWAY CACHE: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var n, v string
		if err := rows.Scan(&n, &v); err != nil {
			return 0, err
		}
		if n == name {
			return strconv.ParseInt(v, 10, 64)
		}
	}
	if err := rows.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("SHOW KEYWAY CACHE has no %s", name)
}

func (r *restarter) run(ctx context.Context, target string) ([]RestartSecond, error) {
	if target == warmTarget {
		return r.keyway(ctx)
	}
	return r.memcached(ctx)
}

// loopTimeout bounds one PHP loop: the warm-up reads every key once; the counted loop runs the window.
func (r *restarter) loopTimeout() time.Duration { return r.o.RestartWindow + 5*time.Minute }

// keyway warms a fresh keyway (on a fresh data_dir) once its follower vouches for the cache, stops it with SIGTERM,
// starts it again on the same data_dir, and counts the loop's first window.
func (r *restarter) keyway(ctx context.Context) ([]RestartSecond, error) {
	dir, err := os.MkdirTemp("", "keyway-bench-cache-data-*")
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	defer os.RemoveAll(dir)
	kw := keywaySQLStarter(warmTarget, r.bin, r.cfg, "--data-dir", dir)
	first, err := freshStarter(kw).start(ctx)
	if err != nil {
		return nil, err
	}
	host, port, err := splitAddr(first.addr)
	if err == nil {
		_, err = runPHP(ctx, r.loopTimeout(), r.php, "warm", host, port, strconv.Itoa(r.o.Keys))
	}
	if err == nil {
		r.entries, err = cacheFigure(ctx, first.addr, "sql_cache_entries")
	}
	if serr := first.stop(); err == nil && serr != nil {
		err = fmt.Errorf("stopping keyway: %w", serr)
	}
	if err != nil {
		return nil, err
	}
	// Counted from the moment the SQL door accepts: whatever keyway does before it vouches for its cache is in the
	// figures.
	again, err := kw.start(ctx)
	if err != nil {
		return nil, fmt.Errorf("restart: %w", err)
	}
	defer again.stop()
	if host, port, err = splitAddr(again.addr); err != nil {
		return nil, err
	}
	out, err := runPHP(ctx, r.loopTimeout(), r.php, "sql", host, port, strconv.Itoa(r.o.Keys), strconv.Itoa(r.window()))
	if err != nil {
		return nil, err
	}
	return parseSeconds(out)
}

// memcached warms a fresh memcached cache-aside, restarts it (a fresh, empty one: memcached keeps nothing), and
// counts the loop's first window.
func (r *restarter) memcached(ctx context.Context) ([]RestartSecond, error) {
	dbHost, dbPort, err := splitAddr(r.m.Addr)
	if err != nil {
		return nil, err
	}
	mc, err := peers.StartMemcached(ctx, "-m", "64")
	if err != nil {
		return nil, err
	}
	args := func(mc *peers.Memcached) []string {
		h, p, _ := splitAddr(mc.Addr)
		return []string{"memcached", h, p, dbHost, dbPort, strconv.Itoa(r.o.Keys), strconv.Itoa(r.window())}
	}
	_, err = runPHP(ctx, r.loopTimeout(), r.php, append(args(mc), "warm")...)
	if serr := mc.Stop(); err == nil && serr != nil {
		err = fmt.Errorf("stopping memcached: %w", serr)
	}
	if err != nil {
		return nil, err
	}
	if mc, err = peers.StartMemcached(ctx, "-m", "64"); err != nil {
		return nil, fmt.Errorf("restart: %w", err)
	}
	defer mc.Stop()
	out, err := runPHP(ctx, r.loopTimeout(), r.php, args(mc)...)
	if err != nil {
		return nil, err
	}
	return parseSeconds(out)
}

func (r *restarter) window() int { return int(r.o.RestartWindow / time.Second) }

// parseSeconds reads the loop's "ops hits" lines.
func parseSeconds(out string) ([]RestartSecond, error) {
	var secs []RestartSecond
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var s RestartSecond
		if _, err := fmt.Sscanf(line, "%d %d", &s.Ops, &s.Hits); err != nil {
			return nil, fmt.Errorf("bench: restart loop line %q: %w", line, err)
		}
		secs = append(secs, s)
	}
	if len(secs) == 0 {
		return nil, errors.New("bench: the restart loop printed no seconds")
	}
	return secs, nil
}

// add records one repetition.
func (r *RestartResult) add(secs []RestartSecond) {
	var ops, hits int64
	for _, s := range secs {
		ops, hits = ops+s.Ops, hits+s.Hits
	}
	r.Seconds = append(r.Seconds, secs)
	r.FirstHit.Runs = append(r.FirstHit.Runs, hitRatio(secs[0].Hits, secs[0].Ops))
	r.Hit.Runs = append(r.Hit.Runs, hitRatio(hits, ops))
	r.QPS.Runs = append(r.QPS.Runs, float64(ops)/float64(len(secs)))
}

// hitRatio is hits over reads: with bypasses (cache not vouched for) and misses both counted as not hit.
func hitRatio(hits, ops int64) float64 {
	if ops <= 0 {
		return 0
	}
	return float64(hits) / float64(ops)
}

// formatSeconds is one repetition's seconds: "qps/hit ratio" each.
func formatSeconds(secs []RestartSecond) string {
	f := make([]string, len(secs))
	for i, s := range secs {
		f[i] = fmt.Sprintf("%d/%.3f", s.Ops, hitRatio(s.Hits, s.Ops))
	}
	return "per second qps/hit ratio: " + strings.Join(f, " ")
}

// SetCommand records the keyway command that made the report.
func (r *CacheReport) SetCommand(c string) { r.Command = c }

// WriteText prints the four parts, each with its target.
func (r *CacheReport) WriteText(w io.Writer) {
	if r.SQL != nil {
		fmt.Fprintf(w, "1. sysbench oltp_point_select: keyway cache on (keyway), off (kw-nocache) and direct\n")
		r.SQL.WriteText(w)
		for _, c := range r.SQL.Cases {
			if c.Threads == 8 {
				fmt.Fprintf(w, "cached point select at 8 threads: %.2f× direct (target ≥ %.0f×)\n", c.Ratio, targetPointSelect)
			}
		}
		fmt.Fprintln(w)
	}
	if len(r.PHP) > 0 {
		fmt.Fprintf(w, "2. seed 003, PHP mysqli loops (%s); ops/s\n", r.Server)
		for _, c := range r.PHP {
			fmt.Fprintf(w, "%s (%d×):\n", c.Query, c.Loops)
			writeTable(w, c.Results, directTarget, c.Ratios)
			writeCPU(w, c.Results)
			fmt.Fprintf(w, "cached/direct: %.2f; keyway's cache hits per run: %v\n", c.Ratios[ratioKey(phpCachedTarget, directTarget)],
				c.Hits[phpCachedTarget])
			if hits := c.Hits[phpCachedTarget]; len(hits) > 0 && slices.Max(hits) == 0 {
				fmt.Fprintf(w, "  (keyway answered none from its cache: this figure is the relay, not the cache)\n")
			}
		}
		fmt.Fprintln(w)
	}
	if r.Staleness != nil {
		fmt.Fprintf(w, "3. staleness under load\n")
		r.Staleness.WriteText(w)
		fmt.Fprintf(w, "p99 %.2f ms (target ≤ %.0f ms)\n\n", r.Staleness.P99MS, targetStaleP99)
	}
	if len(r.Restart) > 0 {
		fmt.Fprintf(w, "4. seed 002, restart: PHP point-select loop over %d keys, the first %v after the restart\n", r.Keys, r.Window)
		fmt.Fprintf(w, "%-14s  %4s  %-28s  %-28s  %s\n", "target", "runs", "first second hit ratio", fmt.Sprintf("%v hit ratio", r.Window),
			"qps min/median/max")
		for _, rr := range r.Restart {
			fmt.Fprintf(w, "%-14s  %4d  %-28s  %-28s  %s\n", rr.Target, len(rr.QPS.Runs), minMedMax(rr.FirstHit, 3),
				minMedMax(rr.Hit, 3), minMedMax(rr.QPS, 0))
			for i, secs := range rr.Seconds {
				before := ""
				if i < len(rr.EntriesBefore) {
					before = fmt.Sprintf(" (cache entries before the restart: %d)", rr.EntriesBefore[i])
				}
				fmt.Fprintf(w, "  rep %d %s%s\n", i+1, formatSeconds(secs), before)
			}
		}
		for _, rr := range r.Restart {
			if rr.Target == warmTarget {
				fmt.Fprintf(w, "warm first second hit ratio: %.3f (target ≥ %.2f within 1 s of restart)\n", rr.FirstHit.Median, targetWarmHit)
			}
		}
	}
}

func minMedMax(s Series, prec int) string {
	f := func(v float64) string { return strconv.FormatFloat(v, 'f', prec, 64) }
	return f(s.Min) + " / " + f(s.Median) + " / " + f(s.Max)
}
