package bench

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bradfitz/gomemcache/memcache"

	"github.com/keywaydb/keyway/internal/peers"
)

// KVOptions configures RunKV. Zero fields take the defaults EnsureDefaults
// documents.
type KVOptions struct {
	KeywayBinary     string        // path; if empty, peers.KeywayBinary() builds one
	Pairs            int           // key-value pairs; default 10000
	KeySize          int           // key bytes; default 10
	ValueSize        int           // value bytes; default 40
	LoadConcurrency  []int         // clients loading the pairs, one case each; default 1, 8
	FetchConcurrency []int         // clients fetching, one case each; default 1, 8
	Duration         time.Duration // per fetch run; default 5s (a load run is the Pairs writes)
	Repetitions      int           // default 3
	Out              io.Writer     // progress lines; default io.Discard
	Progress         *Progress     // the terminal's status line, or nil; the caller plans it with Plan
}

// Plan is how many runs RunKV makes and the time its fetch runs take (a load run lasts as long as its writes do).
func (o KVOptions) Plan() (runs int, hint time.Duration) {
	o.EnsureDefaults()
	fetches := len(o.FetchConcurrency) * o.Repetitions * len(fetchTargets)
	return len(o.LoadConcurrency)*o.Repetitions*len(loadTargets) + fetches, time.Duration(fetches) * o.Duration
}

// KV benchmark targets. insertTarget and selectTarget are the baselines.
const (
	insertTarget = "insert"     // single-row autocommit INSERT direct to MariaDB
	kwSetTarget  = "keyway-set" // memcache set @@aaa.key through keyway, sync (group commit)
	// memcache set @@bbb.key through keyway, write = "async": acknowledged
	// once journaled in the local store (durability sync), written behind;
	// the run ends when keyway has stopped, i.e. when every row is in the table.
	kwAsyncTarget = "keyway-async"
	// the same with store durability async: the journal reaches the disk
	// within flush_interval (1s), so a crash of keyway may lose up to 1s of
	// acknowledged sets.
	kwAsyncLazyTarget = "keyway-async-1s"
	selectTarget      = "select" // SELECT c2 ... WHERE c1=? direct, prepared
	// memcache get @@aaa.key through keyway, caching, after every pair was set through keyway (so each get finds
	// the copy the set wrote through, as the seed's loop reads what it loaded)
	kwGetTarget     = "keyway-get"
	kvMemcachedName = memcachedTarget
	// memcached's own set, the peer of keyway's async set
	kvMemcachedSetTarget = "memcached-set"
	// the pairs loaded direct with c-row INSERT … ON DUPLICATE KEY UPDATE statements (the statement keyway's group
	// committer sends), one at a time on one connection with nothing between them: what c writers that each wait
	// for their write could get from one commit in flight at most, were every commit a full batch and everything
	// but the statement free. keyway's sync set is measured against it too (set/upsert-batch).
	upsertBatchTarget = "upsert-batch"
)

// The targets of each phase, in the order they alternate.
var (
	loadTargets  = []string{insertTarget, upsertBatchTarget, kwSetTarget, kwAsyncTarget, kwAsyncLazyTarget, kvMemcachedSetTarget}
	fetchTargets = []string{selectTarget, kwGetTarget, kvMemcachedName}
)

// kvTable is the table both doors use: the InnoDB memcached plugin's demo
// table, reduced to its key and value columns.
const (
	kvTable     = "test.demo_test"
	kvContainer = "aaa"
	kvAsync     = "bbb" // the same table, write = "async"
	kvMaxKey    = 64    // c1 VARCHAR(64)
	kvMaxValue  = 1024  // c2 VARCHAR(1024)
)

// EnsureDefaults replaces zero fields with their defaults.
func (o *KVOptions) EnsureDefaults() {
	if o.Pairs == 0 {
		o.Pairs = 10000
	}
	if o.KeySize == 0 {
		o.KeySize = 10
	}
	if o.ValueSize == 0 {
		o.ValueSize = 40
	}
	if len(o.LoadConcurrency) == 0 {
		o.LoadConcurrency = []int{1, 8}
	}
	if len(o.FetchConcurrency) == 0 {
		o.FetchConcurrency = []int{1, 8}
	}
	if o.Duration == 0 {
		o.Duration = 5 * time.Second
	}
	if o.Repetitions == 0 {
		o.Repetitions = 3
	}
	if o.Out == nil {
		o.Out = io.Discard
	}
}

// Validate reports every invalid field at once.
func (o *KVOptions) Validate() error {
	var errs []error
	if o.Pairs < 1 {
		errs = append(errs, fmt.Errorf("pairs %d: use 1 or more", o.Pairs))
	}
	if digits := len(strconv.Itoa(max(o.Pairs-1, 0))); o.KeySize < digits+1 || o.KeySize > kvMaxKey {
		errs = append(errs, fmt.Errorf("key size %d: use %d to %d bytes for %d pairs", o.KeySize, digits+1, kvMaxKey, o.Pairs))
	}
	if o.ValueSize < 1 || o.ValueSize > kvMaxValue {
		errs = append(errs, fmt.Errorf("value size %d: use 1 to %d bytes", o.ValueSize, kvMaxValue))
	}
	for _, c := range append(slices.Clone(o.LoadConcurrency), o.FetchConcurrency...) {
		if c < 1 || c > 1024 {
			errs = append(errs, fmt.Errorf("concurrency %d: use 1 to 1024", c))
		}
	}
	if o.Duration <= 0 {
		errs = append(errs, fmt.Errorf("duration %v: use more than 0", o.Duration))
	}
	if o.Repetitions < 1 {
		errs = append(errs, fmt.Errorf("repetitions %d: use 1 or more", o.Repetitions))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("bench: invalid kv options: %w", err)
	}
	return nil
}

// KVReport is the outcome of RunKV.
type KVReport struct {
	Command   string `json:",omitempty"` // the keyway command that made it, when the CLI ran it
	Server    string // the MariaDB behind both doors: its version()
	Pairs     int
	KeySize   int
	ValueSize int
	Duration  time.Duration // of each fetch run
	Cases     []KVCase      // the loads, one per concurrency, then the fetch
}

// KVCase is one phase at one concurrency, measured on every target.
type KVCase struct {
	Phase       string // "load" or "fetch"
	Concurrency int
	// Results are ops/s per target (a load: the pairs over the time they
	// took; a fetch: gets over the duration).
	Results []Result
	// Latency is per target, in the order of Results.
	Latency []KVLatency
	// Ratios divide medians: "set/insert" for a load; "get/select" and
	// "get/memcached" for the fetch.
	Ratios map[string]float64
	// Commits, for a load, are what MariaDB committed for each target that writes the table.
	Commits []KVCommits `json:",omitempty"`
}

// KVCommits is how one target's writes reached MariaDB's disk, per repetition (SHOW GLOBAL STATUS over the run):
// rows per binlog commit (what the writer grouped into one transaction: 1 for an autocommit INSERT, a batch for
// keyway's group commit and write-behind) and rows per InnoDB fsync (that, times what MariaDB's own group commit
// grouped: how much each wait for the disk carried).
type KVCommits struct {
	Target                      string
	RowsPerCommit, RowsPerFsync Series
}

// KVLatency is one target's latency percentiles in ms, per repetition.
type KVLatency struct {
	Target   string
	P50, P99 Series
}

// syncCycle is how a load case's sync sets spend a group commit: with writers that each wait for their write, keyway
// commits a batch, answers it and waits for those writers' next sets before the next batch, so a commit comes every
// cycle µs, of which the statement itself takes about what upsert-batch's statement of as many rows takes alone
// (statement µs). The rest is what keeps keyway-set under that bound. ok is false where the case lacks either
// target's figures (a fetch, or a load that ran neither).
type syncCycle struct{ rows, cycle, boundRows, statement float64 }

func (kc *KVCase) syncCycle() (syncCycle, bool) {
	ops := func(target string) float64 {
		for _, r := range kc.Results {
			if r.Target == target {
				return r.Median
			}
		}
		return 0
	}
	perCommit := func(target string) float64 {
		for _, m := range kc.Commits {
			if m.Target == target {
				return m.RowsPerCommit.Median
			}
		}
		return 0
	}
	set, bound := ops(kwSetTarget), ops(upsertBatchTarget)
	rows, boundRows := perCommit(kwSetTarget), perCommit(upsertBatchTarget)
	if set <= 0 || bound <= 0 || rows <= 0 || boundRows <= 0 {
		return syncCycle{}, false
	}
	return syncCycle{rows: rows, cycle: rows / set * 1e6, boundRows: boundRows, statement: boundRows / bound * 1e6}, true
}

// kvSample is what one run measured.
type kvSample struct {
	ops      float64 // ops/s
	n        int     // operations
	p50, p99 float64 // ms
	// a load into the table (of every pair): MariaDB's binlog commits and InnoDB fsyncs over the run (0 otherwise)
	commits, fsyncs int64
	// CPU per operation by process, and the CPUs' busy share, over the drive (nil when not measured)
	cpu  []procCPU
	busy float64
}

// kvEnv is everything the targets reach: one MariaDB, one memcached, and the
// keyway configuration (a fresh keyway per run).
type kvEnv struct {
	o      KVOptions
	bin    string
	cfg    string
	db     *sql.DB
	mcAddr string
	keys   []string
	values [][]byte
	// the servers' processes, metered during each run (see cpuMeter)
	mariadb, memcached cpuProc
}

// procOf is a peer's process for the CPU meter, under name.
func procOf(name string, p *peers.Process) cpuProc {
	pid := -1 // never readable: the meter reports nothing
	if p != nil && p.Cmd != nil && p.Cmd.Process != nil {
		pid = p.Cmd.Process.Pid
	}
	return cpuProc{name: name, pid: pid}
}

// meteredDrive is drive with the CPU that procs and the client used over it (see cpuMeter).
func (e *kvEnv) meteredDrive(ctx context.Context, c, n int, d time.Duration, procs []cpuProc, op func(i int) error) (kvSample, error) {
	m := startCPU(selfClient, procs...)
	s, err := drive(ctx, c, n, d, op)
	if err == nil {
		s.cpu, s.busy, _ = m.stop(s.n, runtime.NumCPU())
	}
	return s, err
}

// RunKV runs the InnoDB-memcached seed experiment side by side: loading the
// pairs with single-row autocommit INSERTs direct vs memcache sets through
// keyway at each load concurrency, then fetching them with a prepared SELECT
// direct vs memcache gets through keyway (caching, warm) vs memcached.
// Targets alternate within each repetition.
func RunKV(ctx context.Context, o KVOptions) (*KVReport, error) {
	o.EnsureDefaults()
	if err := o.Validate(); err != nil {
		return nil, err
	}
	bin, err := prepare(o.KeywayBinary, "memcached", "mariadbd", "mariadb-install-db")
	if err != nil {
		return nil, err
	}

	fmt.Fprintf(o.Out, "kv bench: starting MariaDB and memcached\n")
	m, version, err := startMariaDB(ctx)
	if err != nil {
		return nil, err
	}
	defer m.Stop()
	mc, err := peers.StartMemcached(ctx, "-m", "256")
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	defer mc.Stop()
	db, err := sql.Open("mysql", m.AppDSN)
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	defer db.Close()
	conc := slices.Max(append(slices.Clone(o.LoadConcurrency), o.FetchConcurrency...))
	db.SetMaxOpenConns(conc + 1)
	db.SetMaxIdleConns(conc + 1)
	if _, err := db.ExecContext(ctx, `CREATE TABLE `+kvTable+` (c1 VARCHAR(64) PRIMARY KEY, c2 VARCHAR(1024))`); err != nil {
		return nil, fmt.Errorf("bench: create table: %w", err)
	}
	cfg, err := writeKVConfig(m.Socket)
	if err != nil {
		return nil, err
	}
	defer os.Remove(cfg)

	e := &kvEnv{o: o, bin: bin, cfg: cfg, db: db, mcAddr: mc.Addr, mariadb: procOf("mariadb", m.Process()), memcached: procOf("memcached", mc.Process())}
	e.keys, e.values = kvPairs(o.Pairs, o.KeySize, o.ValueSize)
	rep := &KVReport{Server: "MariaDB " + version, Pairs: o.Pairs, KeySize: o.KeySize, ValueSize: o.ValueSize, Duration: o.Duration}
	fmt.Fprintf(o.Out, "kv bench: MariaDB %s at %s, memcached at %s; %d pairs of %d+%d bytes\n",
		version, m.Addr, mc.Addr, o.Pairs, o.KeySize, o.ValueSize)

	for _, c := range o.LoadConcurrency {
		fmt.Fprintf(o.Out, "load, concurrency %d:\n", c)
		kc, err := e.alternate(ctx, "load", c, loadTargets)
		if err != nil {
			return nil, err
		}
		kc.Ratios = pick(ratios(kc.Results, insertTarget), ratioKey(kwSetTarget, insertTarget),
			ratioKey(kwAsyncTarget, insertTarget), ratioKey(kwAsyncLazyTarget, insertTarget))
		for k, v := range pick(ratios(kc.Results, kvMemcachedSetTarget), ratioKey(kwAsyncTarget, kvMemcachedSetTarget),
			ratioKey(kwAsyncLazyTarget, kvMemcachedSetTarget)) {
			kc.Ratios[k] = v
		}
		for k, v := range pick(ratios(kc.Results, upsertBatchTarget), ratioKey(kwSetTarget, upsertBatchTarget)) {
			kc.Ratios[k] = v
		}
		rep.Cases = append(rep.Cases, kc)
	}

	fmt.Fprintf(o.Out, "fetch: filling the table and memcached\n")
	if err := e.fill(ctx); err != nil {
		return nil, err
	}
	for _, c := range o.FetchConcurrency {
		fmt.Fprintf(o.Out, "fetch, concurrency %d:\n", c)
		kc, err := e.alternate(ctx, "fetch", c, fetchTargets)
		if err != nil {
			return nil, err
		}
		kc.Ratios = pick(ratios(kc.Results, selectTarget), ratioKey(kwGetTarget, selectTarget))
		for k, v := range pick(ratios(kc.Results, kvMemcachedName), ratioKey(kwGetTarget, kvMemcachedName)) {
			kc.Ratios[k] = v
		}
		rep.Cases = append(rep.Cases, kc)
	}
	return rep, nil
}

// pick keeps only the given keys of m.
func pick(m map[string]float64, keys ...string) map[string]float64 {
	out := make(map[string]float64)
	for _, k := range keys {
		if v, ok := m[k]; ok {
			out[k] = v
		}
	}
	return out
}

// alternate runs every target once per repetition, in order.
func (e *kvEnv) alternate(ctx context.Context, phase string, c int, targets []string) (KVCase, error) {
	kc := KVCase{Phase: phase, Concurrency: c}
	for _, t := range targets {
		kc.Results = append(kc.Results, Result{Target: t})
		kc.Latency = append(kc.Latency, KVLatency{Target: t})
	}
	for rep := 1; rep <= e.o.Repetitions; rep++ {
		for i, t := range targets {
			if err := ctx.Err(); err != nil {
				return kc, err
			}
			e.o.Progress.Start(fmt.Sprintf("kv %s, concurrency %d", phase, c), rep, e.o.Repetitions, t)
			s, err := e.run(ctx, t, c)
			e.o.Progress.Done()
			if err != nil {
				return kc, fmt.Errorf("bench: %s, concurrency %d, %s, repetition %d: %w", phase, c, t, rep, err)
			}
			kc.Results[i].add(sample{ops: s.ops, cpu: s.cpu, busy: s.busy})
			kc.Latency[i].P50.Runs = append(kc.Latency[i].P50.Runs, s.p50)
			kc.Latency[i].P99.Runs = append(kc.Latency[i].P99.Runs, s.p99)
			fmt.Fprintf(e.o.Out, "rep %d/%d %-11s %10.0f ops/s  p50 %.3f ms  p99 %.3f ms  (%d ops)\n",
				rep, e.o.Repetitions, t, s.ops, s.p50, s.p99, s.n)
			if s.cpu != nil {
				fmt.Fprintf(e.o.Out, "  %s: CPU per op %s\n", t, runCPUText(s.cpu, s.busy, runtime.NumCPU()))
			}
			if s.commits > 0 && s.fsyncs > 0 {
				rows := len(e.keys)
				kc.addCommits(t, float64(rows)/float64(s.commits), float64(rows)/float64(s.fsyncs))
				fmt.Fprintf(e.o.Out, "  %s: %d rows in %d commits, %d fsyncs\n", t, rows, s.commits, s.fsyncs)
			}
		}
	}
	for i := range kc.Results {
		kc.Results[i].summarize()
		kc.Latency[i].P50.summarize()
		kc.Latency[i].P99.summarize()
	}
	for i := range kc.Commits {
		kc.Commits[i].RowsPerCommit.summarize()
		kc.Commits[i].RowsPerFsync.summarize()
	}
	return kc, nil
}

// addCommits records one run of target's commit figures.
func (kc *KVCase) addCommits(target string, rowsPerCommit, rowsPerFsync float64) {
	c := entry(&kc.Commits, func(c KVCommits) bool { return c.Target == target }, KVCommits{Target: target})
	c.RowsPerCommit.Runs = append(c.RowsPerCommit.Runs, rowsPerCommit)
	c.RowsPerFsync.Runs = append(c.RowsPerFsync.Runs, rowsPerFsync)
}

// run measures target t once at concurrency c. A load into the table starts from an empty one and counts what
// MariaDB committed for it (see KVCommits).
func (e *kvEnv) run(ctx context.Context, t string, c int) (kvSample, error) {
	switch t {
	case insertTarget, upsertBatchTarget, kwSetTarget, kwAsyncTarget, kwAsyncLazyTarget:
	default:
		return e.measure(ctx, t, c)
	}
	if _, err := e.db.ExecContext(ctx, "TRUNCATE TABLE "+kvTable); err != nil {
		return kvSample{}, fmt.Errorf("truncate: %w", err)
	}
	before, err := e.commitCounters(ctx)
	if err != nil {
		return kvSample{}, err
	}
	s, err := e.measure(ctx, t, c)
	if err != nil {
		return s, err
	}
	after, err := e.commitCounters(ctx)
	if err != nil {
		return s, err
	}
	s.commits, s.fsyncs = after.commits-before.commits, after.fsyncs-before.fsyncs
	return s, nil
}

// commitCounters are MariaDB's counts of binlog commits and of InnoDB fsyncs (SHOW GLOBAL STATUS).
type commitCounters struct{ commits, fsyncs int64 }

func (e *kvEnv) commitCounters(ctx context.Context) (commitCounters, error) {
	var c commitCounters
	rows, err := e.db.QueryContext(ctx, "SHOW GLOBAL STATUS WHERE Variable_name IN ('Binlog_commits', 'Innodb_data_fsyncs')")
	if err != nil {
		return c, fmt.Errorf("bench: commit counters: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var name string
		var n int64
		if err := rows.Scan(&name, &n); err != nil {
			return c, fmt.Errorf("bench: commit counters: %w", err)
		}
		switch strings.ToLower(name) {
		case "binlog_commits":
			c.commits = n
		case "innodb_data_fsyncs":
			c.fsyncs = n
		}
	}
	return c, rows.Err()
}

// measure runs target t once at concurrency c.
func (e *kvEnv) measure(ctx context.Context, t string, c int) (kvSample, error) {
	switch t {
	case insertTarget:
		stmt, err := e.db.PrepareContext(ctx, "INSERT INTO "+kvTable+" (c1, c2) VALUES (?, ?)")
		if err != nil {
			return kvSample{}, err
		}
		defer stmt.Close()
		s, err := e.meteredDrive(ctx, c, len(e.keys), 0, []cpuProc{e.mariadb}, func(i int) error {
			_, err := stmt.ExecContext(ctx, e.keys[i], e.values[i])
			return err
		})
		if err != nil {
			return s, err
		}
		return s, e.checkRows(ctx)
	case upsertBatchTarget:
		return e.loadBatched(ctx, c)
	case kwSetTarget, kwAsyncTarget, kwAsyncLazyTarget:
		prefix, args := "@@"+kvContainer+".", []string(nil)
		if t != kwSetTarget {
			dir, err := os.MkdirTemp("", "keyway-bench-kv-store-")
			if err != nil {
				return kvSample{}, err
			}
			defer os.RemoveAll(dir)
			durability := "sync"
			if t == kwAsyncLazyTarget {
				durability = "async"
			}
			prefix, args = "@@"+kvAsync+".", []string{"--data-dir", dir, "--durability", durability}
		}
		kw, client, err := e.startKeyway(ctx, c, args...)
		if err != nil {
			return kvSample{}, err
		}
		s, err := e.meteredDrive(ctx, c, len(e.keys), 0, []cpuProc{procOf("keyway", kw), e.mariadb}, func(i int) error {
			return client.Set(&memcache.Item{Key: prefix + e.keys[i], Value: e.values[i]})
		})
		// Stopping writes what an async container still holds.
		stopping := time.Now()
		err = errors.Join(err, kw.Stop())
		if err != nil {
			return s, err
		}
		if t != kwSetTarget {
			fmt.Fprintf(e.o.Out, "  %s: every row in the table %.0f ms after the last acknowledgement\n",
				t, float64(time.Since(stopping).Microseconds())/1000)
		}
		return s, e.checkRows(ctx) // every acknowledged set is a row
	case selectTarget:
		stmt, err := e.db.PrepareContext(ctx, "SELECT c2 FROM "+kvTable+" WHERE c1 = ?")
		if err != nil {
			return kvSample{}, err
		}
		defer stmt.Close()
		return e.meteredDrive(ctx, c, 0, e.o.Duration, []cpuProc{e.mariadb}, func(int) error {
			i := rand.IntN(len(e.keys))
			var v []byte
			if err := stmt.QueryRowContext(ctx, e.keys[i]).Scan(&v); err != nil {
				return err
			}
			return e.check(i, v)
		})
	case kwGetTarget:
		kw, client, err := e.startKeyway(ctx, c)
		if err != nil {
			return kvSample{}, err
		}
		// The seed's loop: every pair written through keyway (the same values the table holds), then read back;
		// each get finds the copy its set wrote through.
		_, err = drive(ctx, c, len(e.keys), 0, func(i int) error {
			return client.Set(&memcache.Item{Key: "@@" + kvContainer + "." + e.keys[i], Value: e.values[i]})
		})
		var s kvSample
		if err == nil {
			s, err = e.meteredDrive(ctx, c, 0, e.o.Duration, []cpuProc{procOf("keyway", kw), e.mariadb}, func(int) error {
				i := rand.IntN(len(e.keys))
				it, err := client.Get("@@" + kvContainer + "." + e.keys[i])
				if err != nil {
					return err
				}
				return e.check(i, it.Value)
			})
		}
		return s, errors.Join(err, kw.Stop())
	case kvMemcachedName:
		client := e.memcacheClient(e.mcAddr, c)
		return e.meteredDrive(ctx, c, 0, e.o.Duration, []cpuProc{e.memcached}, func(int) error {
			i := rand.IntN(len(e.keys))
			it, err := client.Get(e.keys[i])
			if err != nil {
				return err
			}
			return e.check(i, it.Value)
		})
	case kvMemcachedSetTarget:
		client := e.memcacheClient(e.mcAddr, c)
		return e.meteredDrive(ctx, c, len(e.keys), 0, []cpuProc{e.memcached}, func(i int) error {
			return client.Set(&memcache.Item{Key: e.keys[i], Value: e.values[i]})
		})
	}
	return kvSample{}, fmt.Errorf("unknown target %q", t)
}

// loadBatched loads the pairs with rows-row upserts, one statement at a time (upsertBatchTarget). Its figures are per
// row, as the other loads' are: ops/s is rows/s and CPU is per row; its latency is a statement's, which is what each
// writer of a batch would wait.
func (e *kvEnv) loadBatched(ctx context.Context, rows int) (kvSample, error) {
	upsert := func(n int) string {
		return "INSERT INTO " + kvTable + " (c1, c2) VALUES " + strings.TrimSuffix(strings.Repeat("(?, ?), ", n), ", ") +
			" ON DUPLICATE KEY UPDATE c2 = VALUES(c2)"
	}
	stmt, err := e.db.PrepareContext(ctx, upsert(rows))
	if err != nil {
		return kvSample{}, err
	}
	defer stmt.Close()
	statements := (len(e.keys) + rows - 1) / rows
	args := make([]any, 0, 2*rows)
	s, err := e.meteredDrive(ctx, 1, statements, 0, []cpuProc{e.mariadb}, func(i int) error {
		args = args[:0]
		lo, hi := i*rows, min((i+1)*rows, len(e.keys))
		for j := lo; j < hi; j++ {
			args = append(args, e.keys[j], e.values[j])
		}
		if hi-lo < rows { // the last statement, shorter
			_, err := e.db.ExecContext(ctx, upsert(hi-lo), args...)
			return err
		}
		_, err := stmt.ExecContext(ctx, args...)
		return err
	})
	if err != nil {
		return s, err
	}
	perStatement := float64(len(e.keys)) / float64(statements)
	s.ops *= perStatement
	s.n = len(e.keys)
	for i := range s.cpu {
		s.cpu[i].MicrosPerOp /= perStatement
	}
	return s, e.checkRows(ctx)
}

// startKeyway starts a fresh keyway serving the container and a client for it.
func (e *kvEnv) startKeyway(ctx context.Context, c int, args ...string) (*peers.Process, *memcache.Client, error) {
	p, err := peers.StartKeywayBinary(ctx, e.bin, append([]string{"--config", e.cfg}, args...)...)
	if err != nil {
		return nil, nil, err
	}
	return p, e.memcacheClient(p.Addr, c), nil
}

func (e *kvEnv) memcacheClient(addr string, c int) *memcache.Client {
	client := memcache.New(addr)
	client.MaxIdleConns = c
	client.Timeout = 10 * time.Second
	return client
}

// check verifies that a fetch read pair i's value: a benchmark of wrong answers measures nothing.
func (e *kvEnv) check(i int, v []byte) error {
	if string(v) != string(e.values[i]) {
		return fmt.Errorf("key %q read %q, want %q", e.keys[i], v, e.values[i])
	}
	return nil
}

// checkRows verifies that the table holds every pair after a load.
func (e *kvEnv) checkRows(ctx context.Context) error {
	var n int
	if err := e.db.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+kvTable).Scan(&n); err != nil {
		return fmt.Errorf("count rows: %w", err)
	}
	if n != len(e.keys) {
		return fmt.Errorf("table holds %d rows after loading %d pairs", n, len(e.keys))
	}
	return nil
}

// fill puts every pair in the table (multi-row INSERTs, direct) and in
// memcached, for the fetch.
func (e *kvEnv) fill(ctx context.Context) error {
	if _, err := e.db.ExecContext(ctx, "TRUNCATE TABLE "+kvTable); err != nil {
		return fmt.Errorf("bench: truncate: %w", err)
	}
	const batch = 500
	for lo := 0; lo < len(e.keys); lo += batch {
		hi := min(lo+batch, len(e.keys))
		args := make([]any, 0, 2*(hi-lo))
		for i := lo; i < hi; i++ {
			args = append(args, e.keys[i], e.values[i])
		}
		q := "INSERT INTO " + kvTable + " (c1, c2) VALUES " + strings.TrimSuffix(strings.Repeat("(?, ?),", hi-lo), ",")
		if _, err := e.db.ExecContext(ctx, q, args...); err != nil {
			return fmt.Errorf("bench: fill table: %w", err)
		}
	}
	c := slices.Max(e.o.FetchConcurrency)
	client := e.memcacheClient(e.mcAddr, c)
	if _, err := drive(ctx, c, len(e.keys), 0, func(i int) error {
		return client.Set(&memcache.Item{Key: e.keys[i], Value: e.values[i]})
	}); err != nil {
		return fmt.Errorf("bench: fill memcached: %w", err)
	}
	return nil
}

// drive runs op from c goroutines: op(0) ... op(n-1) once each when n > 0,
// else until d has passed (op's argument then counts up). The first error
// stops every goroutine.
func drive(ctx context.Context, c, n int, d time.Duration, op func(i int) error) (kvSample, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		next     atomic.Int64
		wg       sync.WaitGroup
		errOnce  sync.Once
		firstErr error
		lat      = make([][]time.Duration, c)
	)
	start := time.Now()
	deadline := start.Add(d)
	for w := 0; w < c; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if n > 0 && i >= n {
					return
				}
				t0 := time.Now()
				if n == 0 && !t0.Before(deadline) {
					return
				}
				if err := op(i); err != nil {
					errOnce.Do(func() { firstErr = err; cancel() })
					return
				}
				lat[w] = append(lat[w], time.Since(t0))
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if firstErr != nil {
		return kvSample{}, firstErr
	}
	if err := ctx.Err(); err != nil {
		return kvSample{}, err
	}
	all := slices.Concat(lat...)
	if len(all) == 0 || elapsed <= 0 {
		return kvSample{}, errors.New("no operations completed")
	}
	slices.Sort(all)
	return kvSample{
		ops: float64(len(all)) / elapsed.Seconds(),
		n:   len(all),
		p50: percentileMS(all, 0.50),
		p99: percentileMS(all, 0.99),
	}, nil
}

// percentileMS is the p-th percentile of sorted (nearest rank), in ms.
func percentileMS(sorted []time.Duration, p float64) float64 {
	i := int(float64(len(sorted))*p+0.5) - 1
	i = min(max(i, 0), len(sorted)-1)
	return float64(sorted[i]) / float64(time.Millisecond)
}

// kvPairs makes n distinct keys of keySize bytes ("k000000042") and values
// of valueSize bytes.
func kvPairs(n, keySize, valueSize int) ([]string, [][]byte) {
	keys := make([]string, n)
	values := make([][]byte, n)
	for i := range n {
		keys[i] = fmt.Sprintf("k%0*d", keySize-1, i)
		v := []byte(strings.Repeat("v", valueSize))
		copy(v[max(valueSize-len(strconv.Itoa(i)), 0):], strconv.Itoa(i))
		values[i] = v
	}
	return keys, values
}

// KVConfig is the configuration `keyway bench kv` serves with: one group on
// primary (as app/secret) and containers "aaa" (writes sync) and "bbb"
// (writes async) on test.demo_test, key c1, value c2, every policy caching.
func KVConfig(primary string) string {
	container := func(name, write string) string {
		return fmt.Sprintf(`
[[containers]]
name = %q
group = "main"
table = %q
key = "c1"
values = ["c2"]
get = "caching"
set = "caching"
delete = "caching"
write = %q
`, name, kvTable, write)
	}
	return fmt.Sprintf(`# keyway bench kv: containers in front of one MariaDB.
[[groups]]
name = "main"
primary = %q
user = %q
password = %q
`, primary, sqlUser, sqlPassword) + container(kvContainer, "sync") + container(kvAsync, "async")
}

func writeKVConfig(primary string) (string, error) {
	f, err := os.CreateTemp("", "keyway-bench-kv-*.toml")
	if err != nil {
		return "", fmt.Errorf("bench: keyway config: %w", err)
	}
	_, werr := f.WriteString(KVConfig(primary))
	if err := errors.Join(werr, f.Close()); err != nil {
		_ = os.Remove(f.Name())
		return "", fmt.Errorf("bench: keyway config: %w", err)
	}
	return f.Name(), nil
}

// WriteText writes the report: per case, min/median/max ops/s and the ratio
// to the baseline (INSERT for loads, SELECT for the fetch), median p50/p99
// latency, then the headline ratios.
func (r *KVReport) WriteText(w io.Writer) {
	fmt.Fprintf(w, "server: %s; %d pairs, %d-byte keys, %d-byte values; fetch runs %v\n",
		r.Server, r.Pairs, r.KeySize, r.ValueSize, r.Duration)
	for _, c := range r.Cases {
		base := insertTarget
		if c.Phase == "fetch" {
			base = selectTarget
		}
		fmt.Fprintf(w, "\n%s, concurrency %d:\n", c.Phase, c.Concurrency)
		writeTable(w, c.Results, base, ratios(c.Results, base))
		for _, l := range c.Latency {
			fmt.Fprintf(w, "  %-15s p50 %7.3f ms  p99 %7.3f ms  (medians)\n", l.Target, l.P50.Median, l.P99.Median)
		}
		writeCPU(w, c.Results)
		for _, m := range c.Commits {
			fmt.Fprintf(w, "  %-15s %6.1f rows per commit  %6.1f rows per fsync  (medians, MariaDB's counters)\n", m.Target,
				m.RowsPerCommit.Median, m.RowsPerFsync.Median)
		}
		if cyc, ok := c.syncCycle(); ok {
			fmt.Fprintf(w, "  %s: a commit of %.1f rows every %.0f µs; upsert-batch's statement of %.1f alone takes %.0f µs: "+
				"the other %.0f µs answer the writers and wait for their next sets (medians)\n",
				kwSetTarget, cyc.rows, cyc.cycle, cyc.boundRows, cyc.statement, cyc.cycle-cyc.statement)
		}
	}
	fmt.Fprintf(w, "\nratios of medians:\n")
	for _, c := range r.Cases {
		keys := make([]string, 0, len(c.Ratios))
		for k := range c.Ratios {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			fmt.Fprintf(w, "  %-5s c=%-3d keyway %-14s %6.2f\n", c.Phase, c.Concurrency, k, c.Ratios[k])
		}
	}
}
