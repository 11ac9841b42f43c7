package bench

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/keywaydb/keyway/internal/peers"
)

// The replicas bench (`keyway bench replicas`) measures reads on MariaDB GTID replicas (docs/replicas.md) on one
// primary with two replicas (peers.StartReplication), in three parts:
//  1. sysbench oltp_read_only and oltp_read_write straight to the primary (direct), through keyway's SQL door to the
//     primary alone (keyway-primary: no replicas, read_from = "primary") and through keyway to the primary and both
//     replicas (keyway-replicas: read_from = "replicas"); the result cache off for both keyway targets. Besides
//     queries/s it takes, per run, each server's Innodb_rows_read delta (SHOW GLOBAL STATUS: keyway's position
//     watcher reads no rows, so its ~10 queries a second per member do not count, as they would in Com_select) and
//     the CPU each process used per query (/proc/PID/stat).
//  2. read-your-writes with one replica's SQL thread stopped: Writers clients through keyway, each updating a row of
//     its own to a new value and reading it back on another session, joined with a table whose one row each server
//     holds outside the binlog (whoami), so each read says which server answered it. Violations (a value older than
//     the one written) and the share of reads per server, on keyway-primary (every read on the primary) and
//     keyway-replicas.
//  3. a switchover, then a failover (kill -9 of the primary), through keyway's admin listener, under writers that
//     insert rows through keyway: the longest write during the switchover, the time from the kill to the first
//     write acknowledged after it, the failed writes, and the acknowledged rows the new primary lacks; then the
//     failover again on a second primary and two replicas replicating semi-synchronously (AFTER_SYNC), where
//     none may be lost (promotions.go).
//
// keyway needs the group's validity gate to route reads to replicas (sqlproxy's mayReadReplica); the server makes
// every group's gate, and starts its binlog follower, whether or not the result cache is on, so [cache] enabled =
// false serves both keyway targets: no read is answered from a cache.
//
// sysbench runs with --skip_trx=on unless Transactions is set: with sysbench's BEGIN/COMMIT around each event every
// read is inside a transaction, and keyway keeps transactions on the primary.

// ReplicasOptions configures RunReplicas. Zero fields take the defaults EnsureDefaults documents.
type ReplicasOptions struct {
	KeywayBinary string        // path; if empty, peers.KeywayBinary() builds one
	Duration     time.Duration // per run (sysbench and read-your-writes), whole seconds; default 10s
	Repetitions  int           // runs per target, alternating; default 3
	Threads      []int         // sysbench --threads, one case each; default 8
	Workloads    []string      // sysbench scripts; default oltp_read_only, oltp_read_write
	Tables       int           // sysbench --tables; default 4
	TableSize    int           // sysbench --table-size; default 10000
	// Transactions keeps sysbench's BEGIN/COMMIT around each event (--skip_trx=off), which keeps every read on the
	// primary; default off (--skip_trx=on).
	Transactions bool
	Writers      int       // read-your-writes clients; default 8
	Out          io.Writer // progress lines; default io.Discard
	Progress     *Progress // the terminal's status line, or nil; the caller plans it with Plan
}

// The replicas bench's keyway targets; direct (sysbench to the primary) is the baseline.
const (
	kwPrimaryTarget  = "keyway-primary"  // keyway, the group's primary alone (read_from = "primary")
	kwReplicasTarget = "keyway-replicas" // keyway, primary + 2 replicas, read_from = "replicas"
)

var (
	replicasTargets = []string{directTarget, kwPrimaryTarget, kwReplicasTarget}
	rywTargets      = []string{kwPrimaryTarget, kwReplicasTarget}
)

// replicasSettle is how long keyway-replicas runs before its load starts: its position watcher learns each
// member's position in ~100 ms and their roles once a second; until then reads go to the primary.
const replicasSettle = 1500 * time.Millisecond

// EnsureDefaults replaces zero fields with their defaults.
func (o *ReplicasOptions) EnsureDefaults() {
	if o.Duration == 0 {
		o.Duration = 10 * time.Second
	}
	if o.Repetitions == 0 {
		o.Repetitions = 3
	}
	if len(o.Threads) == 0 {
		o.Threads = []int{8}
	}
	if len(o.Workloads) == 0 {
		o.Workloads = []string{"oltp_read_only", "oltp_read_write"}
	}
	if o.Tables == 0 {
		o.Tables = 4
	}
	if o.TableSize == 0 {
		o.TableSize = 10000
	}
	if o.Writers == 0 {
		o.Writers = 8
	}
	if o.Out == nil {
		o.Out = io.Discard
	}
}

// sqlOptions are the sysbench settings, as bench sql holds them.
func (o *ReplicasOptions) sqlOptions() SQLOptions {
	s := SQLOptions{KeywayBinary: o.KeywayBinary, Duration: o.Duration, Repetitions: o.Repetitions, Threads: o.Threads,
		Workloads: o.Workloads, Tables: o.Tables, TableSize: o.TableSize, Targets: []string{directTarget}, Out: o.Out, Progress: o.Progress}
	s.EnsureDefaults()
	return s
}

// Validate reports every invalid field at once (the sysbench ones through SQLOptions).
func (o *ReplicasOptions) Validate() error {
	so := o.sqlOptions()
	errs := []error{so.Validate()}
	for _, w := range o.Workloads {
		if isClientWorkload(w) {
			errs = append(errs, fmt.Errorf("workload %q: the replicas bench runs sysbench scripts only", w))
		}
	}
	if o.Writers < 1 || o.Writers > 1000 {
		errs = append(errs, fmt.Errorf("writers %d: use 1 to 1000", o.Writers))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("bench: invalid replicas options: %w", err)
	}
	return nil
}

// Plan is how many runs RunReplicas makes and the time their loads run in all.
func (o ReplicasOptions) Plan() (runs int, hint time.Duration) {
	o.EnsureDefaults()
	runs = len(o.Workloads)*len(o.Threads)*len(replicasTargets)*o.Repetitions + len(rywTargets)*o.Repetitions
	return runs, time.Duration(runs) * o.Duration
}

// ReplicasReport is the outcome of RunReplicas.
type ReplicasReport struct {
	Command string `json:",omitempty"` // the keyway command that made it, when the CLI ran it
	Server  string // the members' MariaDB: its version()
	Members []string
	// SQL is part 1: per workload and thread count, each target's queries/s, p95 and CPU per query by process.
	SQL *SQLReport
	// Work is part 1's errors and share of the work per server, per case in the order of SQL's.
	Work []ReplicasWork
	// RowsCounter is the status counter whose deltas give the share of the work: Innodb_rows_read, or where the
	// server has none (MariaDB 10.6 and later), Rows_read.
	RowsCounter    string
	ReadYourWrites *ReadYourWrites // part 2
	Failover       string          // part 3 when it was not run: why
	Promotions     *Promotions     `json:",omitempty"` // part 3
}

// ReplicasWork is one sysbench case's errors and share of the work per server, per target.
type ReplicasWork struct {
	Workload string
	Threads  int
	Targets  []TargetWork
}

// TargetWork is one target's figures over the repetitions.
type TargetWork struct {
	Target string
	// Errors are sysbench's errors, ignored errors (deadlocks it retried) and reconnects, per run. sysbench 1.0
	// stops at an error it does not ignore, which fails the bench.
	Errors Series
	// Servers are each member's share of the rows read (ReplicasReport.RowsCounter), per run.
	Servers []ServerShare
}

// ServerShare is one member's share (0–1) of what all members did, per run.
type ServerShare struct {
	Server string // primary, replica1, replica2
	Share  Series
}

// ReadYourWrites is part 2.
type ReadYourWrites struct {
	Writers int
	Delayed string // the replica held back, and how
	Load    string
	Results []Result // per target: write-then-read pairs per second, CPU per pair
	Targets []RYWTarget
}

// RYWTarget is one target's read-your-writes figures, per run.
type RYWTarget struct {
	Target     string
	Reads      Series
	Violations Series // reads that returned a value older than the one the client had just written
	Errors     Series // statements that failed
	Servers    []ServerShare
}

// SetCommand records the keyway command that made the report.
func (r *ReplicasReport) SetCommand(c string) { r.Command = c }

// replicasEnv is what RunReplicas's parts share.
type replicasEnv struct {
	o     ReplicasOptions
	repl  *peers.Replication
	names []string // the members' names, primary first
	// byAddr names the target serving at an address (namedByAddr).
	byAddr map[string]string
	// rowsCounter is the status counter of rows read the members have (rowsCounters).
	rowsCounter string
}

// RunReplicas runs the three parts in turn.
func RunReplicas(ctx context.Context, o ReplicasOptions) (*ReplicasReport, error) {
	o.EnsureDefaults()
	if err := o.Validate(); err != nil {
		return nil, err
	}
	bin, err := prepare(o.KeywayBinary, "sysbench", "mariadbd", "mariadb-install-db")
	if err != nil {
		return nil, err
	}
	sb, err := newSysbench(o.sqlOptions())
	if err != nil {
		return nil, err
	}
	if !o.Transactions {
		// Without a transaction, oltp_read_write's DELETE and INSERT of one id race with other threads' (1062,
		// duplicate key): sysbench retries those too, counted as ignored errors, beside its default list.
		sb.common = append(sb.common, "--skip_trx=on", "--mysql-ignore-errors=1062,1213,1020,1205")
	}

	fmt.Fprintf(o.Out, "replicas bench: starting MariaDB, a primary and 2 GTID replicas\n")
	repl, err := peers.StartReplication(ctx, peers.ReplicationOptions{})
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	defer repl.Stop()
	e := &replicasEnv{o: o, repl: repl, byAddr: map[string]string{}}
	rep := &ReplicasReport{}
	var sockets []string
	for i, m := range repl.Members() {
		name := "primary"
		if i > 0 {
			name = "replica" + strconv.Itoa(i)
			sockets = append(sockets, m.Socket)
		}
		e.names = append(e.names, name)
		rep.Members = append(rep.Members, name+" "+m.Addr)
	}
	version, err := serverVersion(ctx, repl.Primary.AppDSN)
	if err != nil {
		return nil, err
	}
	rep.Server = "MariaDB " + version
	if err := e.findRowsCounter(ctx); err != nil {
		return nil, err
	}
	rep.RowsCounter = e.rowsCounter
	fmt.Fprintf(o.Out, "replicas bench: %s; sysbench prepare: %d tables of %d rows\n", rep.Server, o.Tables, o.TableSize)
	if err := sb.prepare(ctx, repl.Primary.Addr); err != nil {
		return nil, err
	}
	if err := e.createRYWTables(ctx); err != nil {
		return nil, err
	}
	if err := repl.Sync(ctx, prepareTimeout); err != nil {
		return nil, fmt.Errorf("bench: the replicas did not catch up after prepare: %w", err)
	}

	// keyway reaches every member over its unix socket, as bench sql reaches its MariaDB.
	primaryCfg, err := writeKeywaySQLConfig(repl.Primary.Socket, false, keywayLimits{readFrom: "primary"})
	if err != nil {
		return nil, err
	}
	defer os.Remove(primaryCfg)
	replicasCfg, err := writeKeywaySQLConfig(repl.Primary.Socket, false, keywayLimits{replicas: sockets, readFrom: "replicas"})
	if err != nil {
		return nil, err
	}
	defer os.Remove(replicasCfg)
	kwPrimary := keywaySQLStarter(kwPrimaryTarget, bin, primaryCfg)
	kwReplicas := settled(keywaySQLStarter(kwReplicasTarget, bin, replicasCfg), replicasSettle)
	m := meter{client: loadGenerator("sysbench"), shared: e.servers()}

	rep.SQL = &SQLReport{Load: sb.describe(), Server: rep.Server}
	fmt.Fprintf(o.Out, "replicas bench 1/3: %s\n", rep.SQL.Load)
	targets := namedByAddr(e.byAddr, directStarter(repl.Primary.Addr), kwPrimary, kwReplicas)
	for _, w := range o.Workloads {
		for _, n := range o.Threads {
			fmt.Fprintf(o.Out, "%s, %d threads:\n", w, n)
			work := ReplicasWork{Workload: w, Threads: n}
			for _, t := range replicasTargets {
				work.Targets = append(work.Targets, TargetWork{Target: t})
			}
			load := e.countRows(sb.loadSummary(w, n, func(addr string, sum SysbenchSummary) {
				tw := e.targetOf(&work.Targets, addr)
				tw.Errors.Runs = append(tw.Errors.Runs, float64(sum.Errors+sum.IgnoredErrors+sum.Reconnects))
			}), func(addr string, rows []float64) { addShares(&e.targetOf(&work.Targets, addr).Servers, e.names, rows) })
			results, err := runTargets(ctx, targets, o.Repetitions, load, m, o.Out, o.Progress, fmt.Sprintf("replicas %s, %d threads", w, n))
			if err != nil {
				return nil, fmt.Errorf("%s, %d threads: %w", w, n, err)
			}
			c := newSQLCase(w, n, results)
			c.Ratios = map[string]float64{}
			all := ratios(results, directTarget)
			for _, res := range results[1:] {
				c.Ratios[res.Target] = all[ratioKey(res.Target, directTarget)]
			}
			rep.SQL.Cases = append(rep.SQL.Cases, c)
			for i := range work.Targets {
				work.Targets[i].summarize()
			}
			rep.Work = append(rep.Work, work)
		}
	}

	delayed := repl.Replicas[len(repl.Replicas)-1]
	fmt.Fprintf(o.Out, "replicas bench 2/3: read-your-writes, %d writers, %s's SQL thread stopped\n", o.Writers, e.names[len(e.names)-1])
	if err := delayed.StopSQLThread(ctx); err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	ryw, err := e.readYourWrites(ctx, namedByAddr(e.byAddr, kwPrimary, kwReplicas))
	if serr := delayed.StartSQLThread(context.WithoutCancel(ctx)); err == nil && serr != nil {
		err = fmt.Errorf("bench: %w", serr)
	}
	if err != nil {
		return nil, err
	}
	ryw.Delayed = e.names[len(e.names)-1] + ": STOP SLAVE SQL_THREAD for the whole part"
	rep.ReadYourWrites = ryw

	fmt.Fprintf(o.Out, "replicas bench 3/3: a switchover, then a failover, under %d writers\n", o.Writers)
	if err := repl.Sync(ctx, prepareTimeout); err != nil { // a switchover waits for its target to catch up
		return nil, fmt.Errorf("bench: the replicas did not catch up before the switchover: %w", err)
	}
	if rep.Promotions, err = e.promotions(ctx, bin); err != nil {
		// The figures of parts 1 and 2 stand; the report says why part 3 has none.
		rep.Failover = "failover and switchover: not measured: " + err.Error()
		fmt.Fprintln(o.Out, rep.Failover)
	}
	return rep, nil
}

// servers are the members' processes, metered in every run.
func (e *replicasEnv) servers() []cpuProc {
	var procs []cpuProc
	for i, m := range e.repl.Members() {
		procs = append(procs, procOf("mariadb-"+e.names[i], m.Process()))
	}
	return procs
}

// targetOf is the figures of the target serving at addr in *ts, added when it has none.
func (e *replicasEnv) targetOf(ts *[]TargetWork, addr string) *TargetWork {
	name := e.byAddr[addr]
	return entry(ts, func(t TargetWork) bool { return t.Target == name }, TargetWork{Target: name})
}

// countRows wraps load to hand record each member's Innodb_rows_read over the run, in member order.
func (e *replicasEnv) countRows(load loadFunc, record func(addr string, rows []float64)) loadFunc {
	return func(ctx context.Context, addr string) (sample, error) {
		before, err := e.rowsRead(ctx)
		if err != nil {
			return sample{}, err
		}
		s, err := load(ctx, addr)
		if err != nil {
			return s, err
		}
		after, err := e.rowsRead(ctx)
		if err != nil {
			return sample{}, err
		}
		for i := range after {
			after[i] -= before[i]
		}
		record(addr, after)
		return s, nil
	}
}

// rowsCounters are the status counters of rows read, the first the server has: InnoDB's own, which MariaDB 10.6
// and later no longer have, then the server's count of row reads outside temporary tables.
var rowsCounters = []string{"Innodb_rows_read", "Rows_read"}

// findRowsCounter picks the first of rowsCounters the primary has.
func (e *replicasEnv) findRowsCounter(ctx context.Context) error {
	for _, c := range rowsCounters {
		v, err := e.repl.Primary.GlobalStatus(ctx, c)
		if err != nil {
			return fmt.Errorf("bench: %w", err)
		}
		if v != "" {
			e.rowsCounter = c
			return nil
		}
	}
	return fmt.Errorf("bench: the primary has none of the status counters %s", strings.Join(rowsCounters, ", "))
}

// rowsRead is each member's rows-read counter, in member order.
func (e *replicasEnv) rowsRead(ctx context.Context) ([]float64, error) {
	var rows []float64
	for _, m := range e.repl.Members() {
		v, err := m.GlobalStatus(ctx, e.rowsCounter)
		if err != nil {
			return nil, err
		}
		n, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return nil, fmt.Errorf("bench: %s %q on %s: %w", e.rowsCounter, v, m.Addr, err)
		}
		rows = append(rows, n)
	}
	return rows, nil
}

// addShares records one run's counts per server as shares of their sum (all 0 when the sum is).
func addShares(list *[]ServerShare, names []string, counts []float64) {
	var total float64
	for _, c := range counts {
		total += c
	}
	for i, name := range names {
		s := entry(list, func(s ServerShare) bool { return s.Server == name }, ServerShare{Server: name})
		share := 0.0
		if total > 0 && i < len(counts) {
			share = counts[i] / total
		}
		s.Share.Runs = append(s.Share.Runs, share)
	}
}

func summarizeShares(shares []ServerShare) {
	for i := range shares {
		shares[i].Share.summarize()
	}
}

func (t *TargetWork) summarize() {
	t.Errors.summarize()
	summarizeShares(t.Servers)
}

// settled is t with a pause after each start, before the load begins (and the meter starts).
func settled(t target, d time.Duration) target {
	start := t.start
	t.start = func(ctx context.Context) (running, error) {
		r, err := start(ctx)
		if err != nil {
			return r, err
		}
		select {
		case <-time.After(d):
			return r, nil
		case <-ctx.Done():
			_ = r.stop()
			return running{}, ctx.Err()
		}
	}
	return t
}

// The read-your-writes tables: ryw has a row per writer; whoami one row on each member, written outside the binlog,
// naming it.
const (
	rywQuery  = "SELECT w.name, t.v FROM ryw t JOIN whoami w ON w.id = 1 WHERE t.id = ?"
	rywUpdate = "UPDATE ryw SET v = ? WHERE id = ?"
)

func (e *replicasEnv) createRYWTables(ctx context.Context) error {
	p, err := sql.Open("mysql", e.repl.Primary.AppDSN)
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	defer p.Close()
	stmts := []string{"CREATE TABLE ryw (id INT PRIMARY KEY, v BIGINT NOT NULL)", "CREATE TABLE whoami (id INT PRIMARY KEY, name VARCHAR(20))"}
	for i := 1; i <= e.o.Writers; i++ {
		stmts = append(stmts, fmt.Sprintf("INSERT INTO ryw VALUES (%d, 0)", i))
	}
	for _, s := range stmts {
		if _, err := p.ExecContext(ctx, s); err != nil {
			return fmt.Errorf("bench: %s: %w", s, err)
		}
	}
	if err := e.repl.Sync(ctx, time.Minute); err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	for i, m := range e.repl.Members() {
		if err := m.ExecUnlogged(ctx, "REPLACE INTO test.whoami VALUES (1, '"+e.names[i]+"')"); err != nil {
			return fmt.Errorf("bench: whoami on %s: %w", e.names[i], err)
		}
	}
	return nil
}

// rywRun is what one read-your-writes run counted.
type rywRun struct {
	mu         sync.Mutex
	pairs      int64
	violations int64
	errs       int64
	byServer   map[string]int64
	firstErr   error
}

// readYourWrites runs part 2 on targets, alternating.
func (e *replicasEnv) readYourWrites(ctx context.Context, targets []target) (*ReadYourWrites, error) {
	r := &ReadYourWrites{Writers: e.o.Writers,
		Load: fmt.Sprintf("%d Go clients (go-sql-driver, interpolateParams), each in a loop: %q on one session, then %q on another; for %v",
			e.o.Writers, rywUpdate, rywQuery, e.o.Duration)}
	for _, t := range rywTargets {
		r.Targets = append(r.Targets, RYWTarget{Target: t})
	}
	load := func(ctx context.Context, addr string) (sample, error) {
		run, elapsed, err := e.rywDrive(ctx, addr)
		if err != nil {
			return sample{}, err
		}
		i := slices.IndexFunc(r.Targets, func(t RYWTarget) bool { return t.Target == e.byAddr[addr] })
		if i < 0 {
			return sample{}, fmt.Errorf("bench: no target serves %s", addr)
		}
		t := &r.Targets[i]
		var reads int64
		counts := make([]float64, len(e.names))
		for j, name := range e.names {
			counts[j] = float64(run.byServer[name])
			reads += run.byServer[name]
		}
		t.Reads.Runs = append(t.Reads.Runs, float64(reads))
		t.Violations.Runs = append(t.Violations.Runs, float64(run.violations))
		t.Errors.Runs = append(t.Errors.Runs, float64(run.errs))
		addShares(&t.Servers, e.names, counts)
		note := fmt.Sprintf("(%d pairs, %d violations, %d errors; reads by server %v)", run.pairs, run.violations, run.errs, run.byServer)
		if run.firstErr != nil {
			note += "; first error: " + run.firstErr.Error()
		}
		return sample{ops: float64(run.pairs) / elapsed.Seconds(), n: run.pairs, note: note}, nil
	}
	results, err := runTargets(ctx, targets, e.o.Repetitions, load, meter{client: selfClient, shared: e.servers()},
		e.o.Out, e.o.Progress, "replicas read-your-writes")
	if err != nil {
		return nil, err
	}
	r.Results = results
	for i := range r.Targets {
		t := &r.Targets[i]
		for _, s := range []*Series{&t.Reads, &t.Violations, &t.Errors} {
			s.summarize()
		}
		summarizeShares(t.Servers)
	}
	return r, nil
}

// rywDrive runs the writers against keyway at addr for the run's duration.
func (e *replicasEnv) rywDrive(ctx context.Context, addr string) (*rywRun, time.Duration, error) {
	cfg := mysql.NewConfig()
	cfg.User, cfg.Passwd, cfg.Net, cfg.Addr, cfg.DBName = sqlUser, sqlPassword, "tcp", addr, sqlDatabase
	cfg.InterpolateParams = true
	connector, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, 0, fmt.Errorf("bench: %w", err)
	}
	db := sql.OpenDB(connector)
	defer db.Close()
	db.SetMaxIdleConns(2 * e.o.Writers)
	run := &rywRun{byServer: map[string]int64{}}
	fail := func(err error) {
		run.mu.Lock()
		defer run.mu.Unlock()
		run.errs++
		if run.firstErr == nil {
			run.firstErr = err
		}
	}
	type conns struct{ w, r *sql.Conn }
	cs := make([]conns, e.o.Writers)
	defer func() {
		for _, c := range cs {
			for _, x := range []*sql.Conn{c.w, c.r} {
				if x != nil {
					x.Close()
				}
			}
		}
	}()
	for i := range cs {
		if cs[i].w, err = db.Conn(ctx); err == nil {
			cs[i].r, err = db.Conn(ctx)
		}
		if err != nil {
			return nil, 0, fmt.Errorf("bench: connect to keyway at %s: %w", addr, err)
		}
	}
	began := time.Now()
	dctx, cancel := context.WithDeadline(ctx, began.Add(e.o.Duration))
	defer cancel()
	var wg sync.WaitGroup
	for i, c := range cs {
		id := i + 1
		wg.Go(func() {
			var last int64
			for dctx.Err() == nil {
				v := max(last+1, time.Now().UnixNano())
				if _, err := c.w.ExecContext(ctx, rywUpdate, v, id); err != nil {
					fail(fmt.Errorf("update: %w", err))
					continue
				}
				last = v
				var server string
				var got int64
				if err := c.r.QueryRowContext(ctx, rywQuery, id).Scan(&server, &got); err != nil {
					fail(fmt.Errorf("select: %w", err))
					continue
				}
				run.mu.Lock()
				run.pairs++
				run.byServer[server]++
				if got < v {
					run.violations++
				}
				run.mu.Unlock()
			}
		})
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, 0, err
	}
	return run, time.Since(began), nil
}

// WriteText writes the three parts as tables: per sysbench case and target, queries/s min/median/max, p95, the
// ratio to direct, errors and the share of rows read per server, then the CPU per query by process; read-your-writes
// per target; and the failover line.
func (r *ReplicasReport) WriteText(w io.Writer) {
	fmt.Fprintf(w, "server: %s; members: %s\n", r.Server, strings.Join(r.Members, ", "))
	if s := r.SQL; s != nil {
		fmt.Fprintf(w, "load: %s\n", s.Load)
		ww := len("workload")
		for _, c := range s.Cases {
			ww = max(ww, len(c.Workload))
		}
		fmt.Fprintf(w, "%-*s  %7s  %-15s  %4s  %10s  %10s  %10s  %7s  %9s  %6s  %s\n", ww, "workload", "threads", "target", "runs",
			"min qps", "median qps", "max qps", "p95 ms", "vs direct", "errors", r.RowsCounter+" per server (median share)")
		for i, c := range s.Cases {
			var work ReplicasWork
			if i < len(r.Work) {
				work = r.Work[i]
			}
			for _, res := range c.Results {
				p95, ratio, errs, shares := "-", "", "-", ""
				if res.P95 != nil {
					p95 = strconv.FormatFloat(res.P95.Median, 'f', 2, 64)
				}
				if v := c.Ratios[res.Target]; v > 0 {
					ratio = strconv.FormatFloat(v, 'f', 2, 64)
				}
				if j := slices.IndexFunc(work.Targets, func(t TargetWork) bool { return t.Target == res.Target }); j >= 0 {
					errs = formatOps(work.Targets[j].Errors.Max)
					shares = sharesText(work.Targets[j].Servers)
				}
				line := fmt.Sprintf("%-*s  %7d  %-15s  %4d  %10s  %10s  %10s  %7s  %9s  %6s  %s", ww, c.Workload, c.Threads, res.Target,
					len(res.Runs), formatOps(res.Min), formatOps(res.Median), formatOps(res.Max), p95, ratio, errs, shares)
				fmt.Fprintln(w, strings.TrimRight(line, " "))
			}
			writeCPUPer(w, c.Results, "query")
		}
		fmt.Fprintln(w, "errors: the most in a run (sysbench's errors, ignored errors and reconnects)")
	}
	if y := r.ReadYourWrites; y != nil {
		fmt.Fprintf(w, "read-your-writes: %s; %s\n", y.Load, y.Delayed)
		fmt.Fprintf(w, "%-15s  %4s  %11s  %14s  %11s  %10s  %6s  %s\n", "target", "runs", "min pairs/s", "median pairs/s", "max pairs/s",
			"violations", "errors", "reads per server (median share)")
		for _, res := range y.Results {
			viol, errs, shares := "-", "-", ""
			if j := slices.IndexFunc(y.Targets, func(t RYWTarget) bool { return t.Target == res.Target }); j >= 0 {
				t := y.Targets[j]
				var v, e float64
				for k := range t.Violations.Runs {
					v += t.Violations.Runs[k]
				}
				for k := range t.Errors.Runs {
					e += t.Errors.Runs[k]
				}
				viol, errs, shares = formatOps(v), formatOps(e), sharesText(t.Servers)
			}
			line := fmt.Sprintf("%-15s  %4d  %11s  %14s  %11s  %10s  %6s  %s", res.Target, len(res.Runs),
				formatOps(res.Min), formatOps(res.Median), formatOps(res.Max), viol, errs, shares)
			fmt.Fprintln(w, strings.TrimRight(line, " "))
		}
		writeCPUPer(w, y.Results, "pair")
		fmt.Fprintln(w, "violations and errors: over all runs (target: 0 violations)")
	}
	if r.Promotions != nil {
		r.Promotions.writeText(w)
	}
	if r.Failover != "" {
		fmt.Fprintln(w, r.Failover)
	}
}

// sharesText is the servers' median shares: "primary 34% replica1 33% replica2 33%".
func sharesText(shares []ServerShare) string {
	parts := make([]string, len(shares))
	for i, s := range shares {
		parts[i] = fmt.Sprintf("%s %.0f%%", s.Server, 100*s.Share.Median)
	}
	return strings.Join(parts, " ")
}
