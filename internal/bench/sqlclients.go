package bench

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/keywaydb/keyway/internal/peers"
)

// Two SQL cases that are not sysbench scripts, for what a proxy in front of MariaDB is for beyond relaying:
//
//   - many_clients: Clients connections (2,000 by default), each held open for the run and sending one point select
//     a second, against a MariaDB started with max_connections = 151. Direct, MariaDB refuses all but 151 of them
//     with error 1040 (Too many connections); a plain relay (haproxy) passes the refusal on; keyway's SQL door is
//     meant to serve every client on a pool of Pool backend connections. Measured per target: the selects answered
//     per second, the p50 and p99 of their latency, the selects that failed (1040, or anything else), the clients
//     that held a connection when the timed run began, and the most connections MariaDB had at once.
//   - connect_only: one PHP process connecting with mysqli and closing, sequentially, for the run's duration:
//     connects per second. A proxy that does no backend work at connect can answer a handshake for less than
//     MariaDB spends on one.
//
// Both run inside RunSQL against the suite's MariaDB and targets, alternating like the sysbench cases.
const (
	manyClientsWorkload = "many_clients"
	connectWorkload     = "connect_only"
)

// clientWorkloads are the SQL cases that are not sysbench scripts.
var clientWorkloads = []string{manyClientsWorkload, connectWorkload, loneWorkload}

// isClientWorkload reports whether w is one of clientWorkloads: it runs once per target (lone_client once per page
// size), not once per thread count.
func isClientWorkload(w string) bool { return slices.Contains(clientWorkloads, w) }

const (
	// defaultClients and defaultPool are many_clients' client connections and keyway's pool (max_open).
	defaultClients = 2000
	defaultPool    = 64
	// manyClientsServerMax is the max_connections MariaDB runs many_clients with: its default.
	manyClientsServerMax = 151
	// manyClientsDialers bounds the connects in flight while the clients log in before the timed run (keyway's
	// default max_handshakes), and loginPhase the time they have for it: clients not connected by then start the
	// run without a connection and try again at their first second.
	manyClientsDialers = 256
	loginPhase         = 15 * time.Second
	// clientOpTimeout bounds one connect or one select of a many_clients client.
	clientOpTimeout = 10 * time.Second
)

// manyClientsQuery is the point select each client sends, with a random id, in the text protocol (the driver
// interpolates the id, as PHP's mysqli_query and most ORMs send a statement).
const manyClientsQuery = "SELECT c FROM sbtest1 WHERE id = ?"

// Error 1040, ER_CON_COUNT_ERROR: "Too many connections", from MariaDB, or from keyway when its backend
// connections are all in use.
const erTooManyConnections = 1040

// ErrorCounts is what failed in each repetition of a load that counts its failures. In many_clients every second
// of every client is either one answered select or one failure, counted under one of these.
type ErrorCounts struct {
	TooMany Series // refused with error 1040 (Too many connections), at connect or at a statement
	// Timeouts are waits that ran out (a connect or select unanswered after clientOpTimeout) and, in many_clients,
	// the seconds a client let pass because it was still waiting on an earlier connect or select.
	Timeouts Series
	Other    Series   // every other failure
	Samples  []string `json:",omitempty"` // the first distinct messages of the other failures, over every repetition
}

// maxErrorSamples bounds ErrorCounts.Samples.
const maxErrorSamples = 3

// runErrors counts one run's failures; safe for concurrent use.
type runErrors struct {
	mu       sync.Mutex
	tooMany  int64
	timeouts int64
	other    int64
	samples  []string
}

// add counts err as a 1040, a timeout or another failure, keeping the first distinct messages of the others.
func (e *runErrors) add(err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	switch {
	case isTooMany(err):
		e.tooMany++
	case isTimeout(err):
		e.timeouts++
	default:
		e.other++
		e.sample(err.Error())
	}
}

// late counts a second a client let pass while it still waited on an earlier connect or select.
func (e *runErrors) late() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.timeouts++
}

// isTimeout reports whether err is a wait that ran out: a deadline, or a network timeout.
func isTimeout(err error) bool {
	var ne interface{ Timeout() bool }
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()
}

// sample keeps msg if it is new and there is room. The caller holds mu.
func (e *runErrors) sample(msg string) {
	if len(msg) > 200 {
		msg = msg[:200] + "…"
	}
	if len(e.samples) < maxErrorSamples && !slices.Contains(e.samples, msg) {
		e.samples = append(e.samples, msg)
	}
}

// isTooMany reports whether err is error 1040.
func isTooMany(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && me.Number == erTooManyConnections
}

// add records one run's counts.
func (c *ErrorCounts) add(e *runErrors) {
	c.TooMany.Runs = append(c.TooMany.Runs, float64(e.tooMany))
	c.Timeouts.Runs = append(c.Timeouts.Runs, float64(e.timeouts))
	c.Other.Runs = append(c.Other.Runs, float64(e.other))
	for _, s := range e.samples {
		if len(c.Samples) < maxErrorSamples && !slices.Contains(c.Samples, s) {
			c.Samples = append(c.Samples, s)
		}
	}
}

func (c *ErrorCounts) summarize() {
	c.TooMany.summarize()
	c.Timeouts.summarize()
	c.Other.summarize()
}

// percentile is the p-th percentile (0–100) of sorted, nearest rank; 0 for none.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(float64(len(sorted))*p/100+0.999999) - 1
	return sorted[min(max(rank, 0), len(sorted)-1)]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// serverMonitor is one root connection to the suite's MariaDB over its unix socket, opened before any client so
// that it always has a connection slot, which reads how many connections the server had.
type serverMonitor struct {
	db *sql.DB
}

func openMonitor(ctx context.Context, m *peers.MariaDB) (*serverMonitor, error) {
	db, err := sql.Open("mysql", m.RootDSN)
	if err != nil {
		return nil, fmt.Errorf("bench: monitor: %w", err)
	}
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	db.SetConnMaxLifetime(0)
	db.SetConnMaxIdleTime(0)
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("bench: monitor: %w", err)
	}
	return &serverMonitor{db: db}, nil
}

func (s *serverMonitor) Close() error { return s.db.Close() }

// setMaxConnections sets the server's max_connections and returns the value it had.
func (s *serverMonitor) setMaxConnections(ctx context.Context, n int) (was int, err error) {
	if err := s.db.QueryRowContext(ctx, "SELECT @@GLOBAL.max_connections").Scan(&was); err != nil {
		return 0, fmt.Errorf("bench: max_connections: %w", err)
	}
	if _, err := s.db.ExecContext(ctx, "SET GLOBAL max_connections = "+strconv.Itoa(n)); err != nil {
		return 0, fmt.Errorf("bench: SET GLOBAL max_connections = %d: %w", n, err)
	}
	return was, nil
}

// resetMaxUsed starts a new peak: FLUSH STATUS sets Max_used_connections to the connections open now.
func (s *serverMonitor) resetMaxUsed(ctx context.Context) error {
	if _, err := s.db.ExecContext(ctx, "FLUSH STATUS"); err != nil {
		return fmt.Errorf("bench: FLUSH STATUS: %w", err)
	}
	return nil
}

// maxUsed is the most connections the server had at once since resetMaxUsed, less the monitor's own.
func (s *serverMonitor) maxUsed(ctx context.Context) (int, error) {
	return s.status(ctx, "Max_used_connections")
}

// connected is the connections the server has now, less the monitor's own.
func (s *serverMonitor) connected(ctx context.Context) (int, error) {
	return s.status(ctx, "Threads_connected")
}

// status reads a connection count from SHOW GLOBAL STATUS and takes the monitor's own connection off it.
func (s *serverMonitor) status(ctx context.Context, name string) (int, error) {
	var got string
	var n int
	if err := s.db.QueryRowContext(ctx, "SHOW GLOBAL STATUS LIKE '"+name+"'").Scan(&got, &n); err != nil {
		return 0, fmt.Errorf("bench: %s: %w", name, err)
	}
	return n - 1, nil
}

// raiseOpenFiles raises this process's soft RLIMIT_NOFILE to at least need, up to the hard limit, so that it can
// hold the many_clients connections. A child started after it (keyway) inherits the raised limit.
func raiseOpenFiles(need uint64) error {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return fmt.Errorf("bench: RLIMIT_NOFILE: %w", err)
	}
	if l.Max < need {
		return fmt.Errorf("bench: %d clients need about %d open files, and the hard limit is %d: raise it (ulimit -Hn, or LimitNOFILE) or use fewer --clients", (need-1024)/2, need, l.Max)
	}
	// Set even when the soft limit suffices: an explicit Setrlimit makes children inherit it, where Go would
	// otherwise give them the limit the process started with.
	l.Cur = max(l.Cur, need)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return fmt.Errorf("bench: raising RLIMIT_NOFILE to %d: %w", l.Cur, err)
	}
	return nil
}

// openFilesFor is the files many_clients needs with n clients: a socket per client here, and in keyway a socket
// per client and per backend connection, with room for everything else.
func openFilesFor(n int) uint64 { return uint64(2*n + 1024) }

// manyClients is the many_clients load against one target: n clients log in (manyClientsDialers at a time, for at
// most loginPhase), then for duration each sends one point select a second, client i at i/n of every second. A
// client without a connection (refused at login, or whose connection failed) tries to connect again at its next
// second; that second's select counts as failed when it cannot. A second that passes while the client still waits
// on an earlier connect or select counts as a timeout. mon reads the server's peak connections.
type manyClients struct {
	n         int
	duration  time.Duration
	tableSize int
	mon       *serverMonitor
}

func (mc manyClients) load(ctx context.Context, addr string) (sample, error) {
	if err := mc.mon.resetMaxUsed(ctx); err != nil {
		return sample{}, err
	}
	// What the target holds before any client: keyway's own connections (health check, binlog follower).
	idle, err := mc.mon.connected(ctx)
	if err != nil {
		return sample{}, err
	}
	cfg := mysql.NewConfig()
	cfg.User, cfg.Passwd, cfg.Net, cfg.Addr, cfg.DBName = sqlUser, sqlPassword, "tcp", addr, sqlDatabase
	cfg.InterpolateParams = true
	cfg.Timeout, cfg.ReadTimeout, cfg.WriteTimeout = clientOpTimeout, clientOpTimeout, clientOpTimeout
	cfg.Logger = log.New(io.Discard, "", 0) // the driver's own lines ("unexpected EOF"): every failure is counted instead
	connector, err := mysql.NewConnector(cfg)
	if err != nil {
		return sample{}, fmt.Errorf("bench: %w", err)
	}
	// One pool, but each client holds its own connection (sql.Conn) for the run: no connection is shared, and one
	// given back (after a failure) is closed, not reused, since no connection stays idle.
	db := sql.OpenDB(connector)
	defer db.Close()
	db.SetMaxIdleConns(0)

	var errs runErrors
	conns := make([]*sql.Conn, mc.n)
	defer func() { // before db.Close: a held connection goes back to the pool, which closes it
		for _, c := range conns {
			if c != nil {
				c.Close()
			}
		}
	}()
	connect := func(ctx context.Context, i int) error {
		cctx, cancel := context.WithTimeout(ctx, clientOpTimeout)
		defer cancel()
		c, err := db.Conn(cctx) // dials and logs in
		if err != nil {
			return err
		}
		conns[i] = c
		return nil
	}
	// Log in before the timed run, as sysbench does; a refusal here is not yet a failed select.
	var wg sync.WaitGroup
	sem := make(chan struct{}, manyClientsDialers)
	lctx, cancelLogins := context.WithTimeout(ctx, loginPhase)
	for i := range mc.n {
		select {
		case sem <- struct{}{}:
		case <-lctx.Done():
		}
		if lctx.Err() != nil {
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			_ = connect(lctx, i)
		}()
	}
	wg.Wait()
	cancelLogins()
	if err := ctx.Err(); err != nil {
		return sample{}, err
	}
	connected := 0
	for _, c := range conns {
		if c != nil {
			connected++
		}
	}

	seconds := int(mc.duration / time.Second)
	lat := make([][]time.Duration, mc.n)
	t0 := time.Now().Add(50 * time.Millisecond)
	for i := range mc.n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(i), uint64(t0.UnixNano())))
			offset := time.Duration(int64(time.Second) * int64(i) / int64(mc.n))
			timer := time.NewTimer(0)
			defer timer.Stop()
			for k := range seconds {
				slot := t0.Add(offset + time.Duration(k)*time.Second)
				if time.Since(slot) > time.Second {
					errs.late()
					continue
				}
				timer.Reset(time.Until(slot))
				select {
				case <-ctx.Done():
					return
				case <-timer.C:
				}
				if conns[i] == nil {
					if err := connect(ctx, i); err != nil {
						errs.add(err)
						continue
					}
				}
				qctx, cancel := context.WithTimeout(ctx, clientOpTimeout)
				var c string
				began := time.Now()
				err := conns[i].QueryRowContext(qctx, manyClientsQuery, 1+rng.IntN(mc.tableSize)).Scan(&c)
				took := time.Since(began)
				cancel()
				if err != nil {
					errs.add(err)
					// A statement error leaves the connection usable; anything else (a refusal, a broken
					// connection) makes the client connect again at its next second.
					var me *mysql.MySQLError
					if !errors.As(err, &me) || me.Number == erTooManyConnections {
						conns[i].Close()
						conns[i] = nil
					}
					continue
				}
				lat[i] = append(lat[i], took)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(t0)
	if err := ctx.Err(); err != nil {
		return sample{}, err
	}
	peak, err := mc.mon.maxUsed(ctx)
	if err != nil {
		return sample{}, err
	}

	all := slices.Concat(lat...)
	slices.Sort(all)
	s := sample{
		ops: float64(len(all)) / mc.duration.Seconds(), n: int64(len(all)),
		p50: ms(percentile(all, 50)), p99: ms(percentile(all, 99)), hasP50P99: len(all) > 0,
		errs: &errs, clients: &clientsSample{connected: connected, backendConns: peak, idleConns: idle},
	}
	s.note = fmt.Sprintf("(%d of %d clients connected; %d selects answered, failed: 1040 %d, timeouts %d, other %d, in %.1fs; p50 %.2f ms, p99 %.2f ms; MariaDB connections at most %d, %d before the clients)",
		connected, mc.n, len(all), errs.tooMany, errs.timeouts, errs.other, elapsed.Seconds(), s.p50, s.p99, peak, idle)
	if len(errs.samples) > 0 {
		s.note += "; first other failure: " + errs.samples[0]
	}
	return s, nil
}

// clientsSample is what one many_clients run saw besides its selects.
type clientsSample struct {
	connected    int // clients holding a connection when the timed run began
	backendConns int // the most connections MariaDB had at once (less the bench's monitor)
	idleConns    int // the connections MariaDB had before the clients logged in: the target's own
}

// connectPHP is connect_only's loop: mysqli_connect and mysqli_close as fast as one process goes, for SECONDS;
// prints "connects failures elapsed first-failure". Failures (mysqli_connect returning false) are counted, not
// fatal.
const connectPHP = `<?php
mysqli_report(MYSQLI_REPORT_OFF);
[$host, $port, $secs] = [$argv[1], (int)$argv[2], (float)$argv[3]];
$n = 0; $fail = 0; $first = '';
$t = microtime(true); $end = $t + $secs;
while (microtime(true) < $end) {
	$db = @mysqli_connect($host, 'app', 'secret', 'test', $port);
	if ($db === false) {
		$fail++;
		if ($first === '') { $first = mysqli_connect_errno() . ' ' . mysqli_connect_error(); }
		continue;
	}
	mysqli_close($db);
	$n++;
}
printf("%d %d %.6f %s\n", $n, $fail, microtime(true) - $t, $first);
`

// checkMysqli fails when php cannot connect with mysqli.
func checkMysqli(ctx context.Context) error {
	out, err := runPHPCode(ctx, `echo function_exists('mysqli_connect') ? 'yes' : 'no';`)
	if err != nil {
		return err
	}
	if strings.TrimSpace(out) != "yes" {
		return errors.New("bench: php has no mysqli: install php-mysql (apt-get install php-mysql)")
	}
	return nil
}

func runPHPCode(ctx context.Context, code string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "php", "-r", code).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("bench: php -r: %w\n%s", err, tail(out))
	}
	return string(out), nil
}

// phpErrors are the failures a PHP load reported, with the first one's message: all 1040s when that one was.
func phpErrors(failures int64, first string) *runErrors {
	errs := &runErrors{other: failures}
	if first != "" {
		errs.samples = []string{first}
		if strings.HasPrefix(first, strconv.Itoa(erTooManyConnections)+" ") {
			errs.tooMany, errs.other = failures, 0
		}
	}
	return errs
}

// connectLoop is connect_only's load: the PHP loop against addr for duration.
func connectLoop(script string, duration time.Duration) loadFunc {
	return func(ctx context.Context, addr string) (sample, error) {
		host, port, err := splitAddr(addr)
		if err != nil {
			return sample{}, err
		}
		out, err := runPHP(ctx, duration+time.Minute, script, host, port, strconv.FormatFloat(duration.Seconds(), 'f', -1, 64))
		if err != nil {
			return sample{}, err
		}
		r, err := parseConnectLoop(out)
		if err != nil {
			return sample{}, err
		}
		errs := phpErrors(r.failures, r.first)
		note := fmt.Sprintf("(%d connects, %d failed, in %.2fs", r.connects, r.failures, r.seconds)
		if r.first != "" {
			note += "; first failure: " + r.first
		}
		return sample{ops: float64(r.connects) / r.seconds, n: r.connects, errs: errs, note: note + ")"}, nil
	}
}

// connectResult is what connectPHP printed.
type connectResult struct {
	connects, failures int64
	seconds            float64
	first              string // the first failure's "errno message", or ""
}

// parseConnectLoop reads connectPHP's line: "connects failures seconds [first failure]".
func parseConnectLoop(out string) (connectResult, error) {
	var r connectResult
	line := strings.TrimSpace(out)
	f := strings.SplitN(line, " ", 4)
	if len(f) < 3 {
		return r, fmt.Errorf("bench: the connect loop printed %q, not its connects, failures and time", out)
	}
	var err1, err2, err3 error
	r.connects, err1 = strconv.ParseInt(f[0], 10, 64)
	r.failures, err2 = strconv.ParseInt(f[1], 10, 64)
	r.seconds, err3 = strconv.ParseFloat(f[2], 64)
	if err := errors.Join(err1, err2, err3); err != nil || r.seconds <= 0 {
		return r, fmt.Errorf("bench: the connect loop printed %q, not its connects, failures and time", out)
	}
	if len(f) == 4 {
		r.first = f[3]
	}
	if r.connects == 0 {
		return r, fmt.Errorf("bench: the connect loop connected not once in %.1fs (%d failures; first: %s)", r.seconds, r.failures, r.first)
	}
	return r, nil
}

// runClientCase runs one of clientWorkloads on every target and returns its case.
func (e *sqlEnv) runClientCase(ctx context.Context, workload string) (SQLCase, error) {
	o := e.o
	switch workload {
	case manyClientsWorkload:
		if err := raiseOpenFiles(openFilesFor(o.Clients)); err != nil {
			return SQLCase{}, err
		}
		mon, err := openMonitor(ctx, e.m)
		if err != nil {
			return SQLCase{}, err
		}
		defer mon.Close()
		was, err := mon.setMaxConnections(ctx, manyClientsServerMax)
		if err != nil {
			return SQLCase{}, err
		}
		defer mon.setMaxConnections(context.WithoutCancel(ctx), was)
		maxClients := o.Clients + 100
		targets, cleanup, err := e.targets(keywayLimits{maxClients: maxClients, pool: o.Pool})
		if err != nil {
			return SQLCase{}, err
		}
		defer cleanup()
		fmt.Fprintf(o.Out, "%s: %d clients, one point select a second each; MariaDB max_connections %d; keyway's pool (max_open) %d, [sql] max_connections %d:\n",
			workload, o.Clients, manyClientsServerMax, o.Pool, maxClients)
		mc := manyClients{n: o.Clients, duration: o.Duration, tableSize: o.TableSize, mon: mon}
		results, err := runTargets(ctx, targets, o.Repetitions, mc.load,
			meter{client: selfClient, shared: []cpuProc{procOf("mariadb", e.m.Process())}}, o.Out, o.Progress,
			fmt.Sprintf("sql %s, %d clients", workload, o.Clients))
		if err != nil {
			return SQLCase{}, fmt.Errorf("%s: %w", workload, err)
		}
		c := newSQLCase(workload, o.Clients, results)
		c.Pool, c.ServerMaxConnections, c.KeywayMaxConnections = o.Pool, manyClientsServerMax, maxClients
		return c, nil
	case connectWorkload:
		script, err := writePHP("keyway-bench-connect-*.php", connectPHP)
		if err != nil {
			return SQLCase{}, err
		}
		defer os.Remove(script)
		targets, cleanup, err := e.targets(keywayLimits{})
		if err != nil {
			return SQLCase{}, err
		}
		defer cleanup()
		fmt.Fprintf(o.Out, "%s: PHP mysqli connect + close, one process, sequential:\n", workload)
		results, err := runTargets(ctx, targets, o.Repetitions, connectLoop(script, o.Duration),
			meter{client: loadGenerator("php"), shared: []cpuProc{procOf("mariadb", e.m.Process())}}, o.Out, o.Progress,
			"sql "+workload)
		if err != nil {
			return SQLCase{}, fmt.Errorf("%s: %w", workload, err)
		}
		return newSQLCase(workload, 1, results), nil
	}
	return SQLCase{}, fmt.Errorf("bench: %q is not a client workload", workload)
}

// Targets the report prints next to the client cases' figures (it never asserts them).
const (
	targetConnectRatio = 1.0 // keyway's connects/s over direct's
)

// writeClientCases prints the many_clients and connect_only cases of r, each as its own table, and lone_client's,
// a table per page size and then the statement costs.
func (r *SQLReport) writeClientCases(w io.Writer) {
	last := -1 // the last lone_client case: the statement costs follow it
	for i, c := range r.Cases {
		if c.Workload == loneWorkload {
			last = i
		}
	}
	var sizes []int
	for i, c := range r.Cases {
		switch c.Workload {
		case manyClientsWorkload:
			writeManyClients(w, c)
		case connectWorkload:
			writeConnectOnly(w, c)
		case loneWorkload:
			writeLoneClient(w, c, len(sizes) == 0)
			sizes = append(sizes, c.PageSize)
			if i == last {
				writeStatementCosts(w, r.StatementCosts, sizes)
			}
		}
	}
}

func writeManyClients(w io.Writer, c SQLCase) {
	fmt.Fprintf(w, "\nmany_clients: %d client connections, each one point select a second (%s); MariaDB max_connections %d; keyway's pool (max_open) %d, its [sql] max_connections %d\n",
		c.Threads, manyClientsQuery, c.ServerMaxConnections, c.Pool, c.KeywayMaxConnections)
	tw := len("target")
	for _, res := range c.Results {
		tw = max(tw, len(res.Target))
	}
	fmt.Fprintf(w, "%-*s  %4s  %9s  %10s  %10s  %10s  %7s  %7s  %11s  %8s  %12s  %13s  %9s\n", tw, "target", "runs", "connected",
		"min qps", "median qps", "max qps", "p50 ms", "p99 ms", "1040 errors", "timeouts", "other errors", "MariaDB conns", "vs direct")
	conns := func(r Result) string {
		if r.BackendConns == nil {
			return "-"
		}
		s := strconv.FormatFloat(r.BackendConns.Median, 'f', 0, 64)
		if r.IdleConns != nil && r.IdleConns.Median > 0 {
			s += " (" + strconv.FormatFloat(r.IdleConns.Median, 'f', 0, 64) + ")"
		}
		return s
	}
	med := func(s *Series, prec int) string {
		if s == nil {
			return "-"
		}
		return strconv.FormatFloat(s.Median, 'f', prec, 64)
	}
	for _, res := range c.Results {
		var tooMany, timeouts, other *Series
		if res.Errors != nil {
			tooMany, timeouts, other = &res.Errors.TooMany, &res.Errors.Timeouts, &res.Errors.Other
		}
		ratio := ""
		if v := c.Ratios[res.Target]; v > 0 {
			ratio = strconv.FormatFloat(v, 'f', 2, 64)
		}
		line := fmt.Sprintf("%-*s  %4d  %9s  %10s  %10s  %10s  %7s  %7s  %11s  %8s  %12s  %13s  %9s", tw, res.Target, len(res.Runs),
			med(res.Connected, 0), formatOps(res.Min), formatOps(res.Median), formatOps(res.Max), med(res.P50, 2), med(res.P99, 2),
			med(tooMany, 0), med(timeouts, 0), med(other, 0), conns(res), ratio)
		fmt.Fprintln(w, strings.TrimRight(line, " "))
	}
	fmt.Fprintf(w, "(medians but for qps; connected: clients holding a connection when the timed run began; errors and timeouts: the client-seconds\n"+
		" without an answered select, by cause; MariaDB conns: the most connections MariaDB had at once, and in parentheses those it had\n"+
		" before the clients logged in: keyway's own, its health check and binlog follower)\n")
	for _, res := range c.Results {
		if res.Errors != nil {
			for _, s := range res.Errors.Samples {
				fmt.Fprintf(w, "  %s, other failure: %s\n", res.Target, s)
			}
		}
	}
	for _, res := range c.Results {
		if !strings.HasPrefix(res.Target, keywayTarget) && res.Target != nocacheTarget {
			continue
		}
		errs, peak := "-", "-"
		met := res.Errors != nil && res.BackendConns != nil
		if e := res.Errors; e != nil {
			worst := e.TooMany.Max + e.Timeouts.Max + e.Other.Max
			errs = strconv.FormatFloat(worst, 'f', 0, 64)
			met = met && worst == 0
		}
		if res.BackendConns != nil {
			// keyway's own connections (health check, binlog follower) are not its pool's.
			own := 0.0
			if res.IdleConns != nil {
				own = res.IdleConns.Min
			}
			peak = strconv.FormatFloat(res.BackendConns.Max-own, 'f', 0, 64)
			met = met && res.BackendConns.Max-own <= float64(c.Pool)
		}
		verdict := "not met"
		if met {
			verdict = "met"
		}
		fmt.Fprintf(w, "%s: failed selects in the worst run %s (target 0); MariaDB connections for the clients at most %s, beyond keyway's own (target ≤ the pool, %d): %s\n",
			res.Target, errs, peak, c.Pool, verdict)
	}
	writeCPU(w, c.Results)
}

func writeConnectOnly(w io.Writer, c SQLCase) {
	fmt.Fprintf(w, "\nconnect_only: one PHP process, mysqli_connect + mysqli_close in a loop; connects/s\n")
	tw := len("target")
	for _, res := range c.Results {
		tw = max(tw, len(res.Target))
	}
	fmt.Fprintf(w, "%-*s  %4s  %12s  %12s  %12s  %8s  %9s\n", tw, "target", "runs", "min conn/s", "median conn/s", "max conn/s", "failures", "vs direct")
	for _, res := range c.Results {
		fails, ratio := "-", ""
		if res.Errors != nil {
			fails = strconv.FormatFloat(res.Errors.TooMany.Median+res.Errors.Timeouts.Median+res.Errors.Other.Median, 'f', 0, 64)
		}
		if v := c.Ratios[res.Target]; v > 0 {
			ratio = strconv.FormatFloat(v, 'f', 2, 64)
		}
		line := fmt.Sprintf("%-*s  %4d  %12s  %12s  %12s  %8s  %9s", tw, res.Target, len(res.Runs), formatOps(res.Min), formatOps(res.Median),
			formatOps(res.Max), fails, ratio)
		fmt.Fprintln(w, strings.TrimRight(line, " "))
		if res.Errors != nil {
			for _, s := range res.Errors.Samples {
				fmt.Fprintf(w, "  %s, failure: %s\n", res.Target, s)
			}
		}
	}
	if c.Ratio > 0 {
		fmt.Fprintf(w, "keyway/direct connects/s: %.2f (target ≥ %.1f)\n", c.Ratio, targetConnectRatio)
	}
	writeCPU(w, c.Results)
}
