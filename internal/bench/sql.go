package bench

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	_ "github.com/go-sql-driver/mysql" // database/sql driver "mysql", for the server's version

	"github.com/keywaydb/keyway/internal/peers"
)

// SQLOptions configures RunSQL. Zero fields take the defaults EnsureDefaults
// documents.
type SQLOptions struct {
	KeywayBinary string        // path; if empty, peers.KeywayBinary() builds one
	Duration     time.Duration // per run, whole seconds (sysbench's unit); default 10s
	Repetitions  int           // default 3
	Threads      []int         // sysbench --threads, one case each; default 1, 4, 8
	// Workloads are sysbench scripts, one case per thread count each, and the client cases many_clients and
	// connect_only (sqlclients.go), one case each, and lone_client (sqllone.go), one case per page size; default
	// oltp_point_select, oltp_read_only, many_clients, connect_only, lone_client.
	Workloads []string
	Clients   int // many_clients: client connections; default 2000
	Pool      int // many_clients: keyway's backend connections per pool ([[groups]] max_open); default 64
	// PageSizes are lone_client's selects per page, one case each; default 1, 5, 20. The statement costs are fitted
	// from two sizes or more.
	PageSizes []int
	Tables    int // sysbench --tables; default 4
	TableSize int // sysbench --table-size, rows per table; default 10000
	// BackendTCP makes keyway reach MariaDB over loopback TCP instead of its
	// unix socket. The socket is the default: keyway is meant to sit beside
	// the server, and a socket hop costs less CPU than a TCP one.
	BackendTCP bool
	// Targets picks which of direct, haproxy, keyway and kw-nocache run, in that order; default all four.
	Targets  []string
	Out      io.Writer // progress lines; default io.Discard
	Progress *Progress // the terminal's status line, or nil; the caller plans it with Plan
}

// Plan is how many runs RunSQL makes and the time their loads run in all.
func (o SQLOptions) Plan() (runs int, hint time.Duration) {
	o.EnsureDefaults()
	for _, w := range o.Workloads {
		switch {
		case w == loneWorkload:
			runs += len(o.PageSizes)
		case isClientWorkload(w):
			runs++
		default:
			runs += len(o.Threads)
		}
	}
	runs *= o.Repetitions * len(o.Targets)
	return runs, time.Duration(runs) * o.Duration
}

// SQL benchmark targets, in run order. directTarget is the baseline.
const (
	directTarget  = "direct"     // sysbench straight to MariaDB
	keywayTarget  = "keyway"     // sysbench through keyway's SQL door to the same MariaDB, result cache on
	nocacheTarget = "kw-nocache" // the same with [cache] enabled = false: the relay alone
	haproxyTarget = "haproxy"    // sysbench through haproxy in TCP mode to the same MariaDB: a plain relay, kw-nocache's peer
)

// The account sysbench logs in with, on MariaDB (peers creates it) and on
// keyway (the generated configuration has it).
const (
	sqlUser     = "app"
	sqlPassword = "secret"
	sqlDatabase = "test"
)

// sysbenchWorkloads are the OLTP scripts sysbench 1.0 ships. Every one reads
// and writes the sbtest tables `prepare` creates.
var sysbenchWorkloads = []string{
	"oltp_point_select", "oltp_read_only", "oltp_read_write", "oltp_write_only",
	"oltp_update_index", "oltp_update_non_index", "oltp_insert", "oltp_delete",
}

// EnsureDefaults replaces zero fields with their defaults.
func (o *SQLOptions) EnsureDefaults() {
	if o.Duration == 0 {
		o.Duration = 10 * time.Second
	}
	if o.Repetitions == 0 {
		o.Repetitions = 3
	}
	if len(o.Threads) == 0 {
		o.Threads = []int{1, 4, 8}
	}
	if len(o.Workloads) == 0 {
		o.Workloads = []string{"oltp_point_select", "oltp_read_only", manyClientsWorkload, connectWorkload, loneWorkload}
	}
	if len(o.PageSizes) == 0 {
		o.PageSizes = defaultPageSizes
	}
	if o.Clients == 0 {
		o.Clients = defaultClients
	}
	if o.Pool == 0 {
		o.Pool = defaultPool
	}
	if o.Tables == 0 {
		o.Tables = 4
	}
	if o.TableSize == 0 {
		o.TableSize = 10000
	}
	if len(o.Targets) == 0 {
		o.Targets = sqlTargets
	}
	if o.Out == nil {
		o.Out = io.Discard
	}
}

// sqlTargets are the SQL bench's targets in run order.
var sqlTargets = []string{directTarget, haproxyTarget, keywayTarget, nocacheTarget}

// Validate reports every invalid field at once.
func (o *SQLOptions) Validate() error {
	var errs []error
	if o.Duration < time.Second || o.Duration%time.Second != 0 {
		errs = append(errs, fmt.Errorf("duration %v: sysbench runs for whole seconds; use 1s or more in whole seconds", o.Duration))
	}
	if o.Repetitions < 1 {
		errs = append(errs, fmt.Errorf("repetitions %d: use 1 or more", o.Repetitions))
	}
	for _, n := range o.Threads {
		if n < 1 || n > 4096 {
			errs = append(errs, fmt.Errorf("threads %d: use 1 to 4096", n))
		}
	}
	for _, w := range o.Workloads {
		if !slices.Contains(sysbenchWorkloads, w) && !isClientWorkload(w) {
			errs = append(errs, fmt.Errorf("workload %q: use one of %s", w, strings.Join(slices.Concat(sysbenchWorkloads, clientWorkloads), ", ")))
		}
	}
	if o.Clients < 1 || o.Clients > 100000 {
		errs = append(errs, fmt.Errorf("clients %d: use 1 to 100000", o.Clients))
	}
	if o.Pool < 1 || o.Pool > manyClientsServerMax {
		errs = append(errs, fmt.Errorf("pool %d: use 1 to %d, MariaDB's max_connections in many_clients", o.Pool, manyClientsServerMax))
	}
	for i, n := range o.PageSizes {
		switch {
		case n < 1 || n > maxPageSize:
			errs = append(errs, fmt.Errorf("page size %d: use 1 to %d selects a page", n, maxPageSize))
		case slices.Contains(o.PageSizes[:i], n):
			errs = append(errs, fmt.Errorf("page size %d given twice: give each once", n))
		}
	}
	if o.Tables < 1 {
		errs = append(errs, fmt.Errorf("tables %d: use 1 or more", o.Tables))
	}
	if o.TableSize < 1 {
		errs = append(errs, fmt.Errorf("table size %d: use 1 row or more", o.TableSize))
	}
	for _, t := range o.Targets {
		if !slices.Contains(sqlTargets, t) {
			errs = append(errs, fmt.Errorf("target %q: use some of %s", t, strings.Join(sqlTargets, ", ")))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("bench: invalid sql options: %w", err)
	}
	return nil
}

// SQLReport is the outcome of RunSQL.
type SQLReport struct {
	Command string    `json:",omitempty"` // the keyway command that made it, when the CLI ran it
	Load    string    // the sysbench command line, for the record
	Server  string    // the MariaDB both targets reach: its version()
	Cases   []SQLCase // per workload, per thread count (lone_client: per page size)
	// StatementCosts is lone_client's fit over its page sizes, per target: what a statement costs on each path and
	// what it adds over direct.
	StatementCosts []StatementCost `json:",omitempty"`
}

// SQLCase is one workload at one thread count, measured on every target
// SQLOptions.Targets picks (direct, haproxy, keyway, kw-nocache).
type SQLCase struct {
	Workload string
	// Threads is sysbench's --threads; for many_clients the client connections, for connect_only and lone_client 1
	// (one PHP process).
	Threads int
	// PageSize is lone_client's selects per page, each page on a new connection.
	PageSize int `json:",omitempty"`
	// Results are the targets' queries/s (connect_only: connects/s; lone_client: pages/s) and latency in ms, in run order: sysbench's
	// P95; many_clients' P50 and P99, with its failures, connected clients and MariaDB's peak connections.
	Results []Result
	// many_clients: keyway's pool ([[groups]] max_open), MariaDB's max_connections, keyway's [sql] max_connections.
	Pool                 int `json:",omitempty"`
	ServerMaxConnections int `json:",omitempty"`
	KeywayMaxConnections int `json:",omitempty"`
	// Ratio is keyway's median queries/s over direct's; Ratios has it for every target but direct.
	Ratio  float64
	Ratios map[string]float64
	// P95Added is the latency keyway adds at the 95th percentile, in ms:
	// keyway's median p95 minus direct's.
	P95Added float64
	// RelayRatio is kw-nocache's median queries/s over haproxy's: the SQL door as a relay against a plain one.
	RelayRatio float64 `json:",omitempty"`
}

// RunSQL benchmarks keyway's SQL door against MariaDB direct (and haproxy as a
// plain relay) with sysbench: one private MariaDB, prepared once; per workload
// and thread count, Repetitions runs alternating the targets, a fresh keyway
// per run.
func RunSQL(ctx context.Context, o SQLOptions) (*SQLReport, error) {
	o.EnsureDefaults()
	if err := o.Validate(); err != nil {
		return nil, err
	}
	commands := []string{"sysbench", "mariadbd", "mariadb-install-db"}
	if slices.Contains(o.Targets, haproxyTarget) {
		commands = append(commands, "haproxy")
	}
	needPHP := slices.Contains(o.Workloads, connectWorkload) || slices.Contains(o.Workloads, loneWorkload)
	if needPHP {
		commands = append(commands, "php")
	}
	bin, err := prepare(o.KeywayBinary, commands...)
	if err != nil {
		return nil, err
	}
	if needPHP {
		if err := checkMysqli(ctx); err != nil {
			return nil, err
		}
	}
	sb, err := newSysbench(o)
	if err != nil {
		return nil, err
	}

	fmt.Fprintf(o.Out, "sql bench: starting MariaDB\n")
	m, version, err := startMariaDB(ctx)
	if err != nil {
		return nil, err
	}
	defer m.Stop()
	fmt.Fprintf(o.Out, "sql bench: MariaDB %s at %s; sysbench prepare: %d tables of %d rows\n", version, m.Addr, o.Tables, o.TableSize)
	if err := sb.prepare(ctx, m.Addr); err != nil {
		return nil, err
	}
	e := &sqlEnv{o: o, bin: bin, m: m, primary: m.Socket}
	if o.BackendTCP {
		e.primary = m.Addr
	}
	targets, cleanup, err := e.targets(keywayLimits{})
	if err != nil {
		return nil, err
	}
	defer cleanup()
	rep := &SQLReport{Load: sb.describe(), Server: "MariaDB " + version}
	fmt.Fprintf(o.Out, "sql bench: %s\n", rep.Load)
	for _, w := range o.Workloads {
		if w == loneWorkload {
			cases, costs, err := e.runLoneClient(ctx)
			if err != nil {
				return nil, err
			}
			rep.Cases = append(rep.Cases, cases...)
			rep.StatementCosts = costs
			continue
		}
		if isClientWorkload(w) {
			c, err := e.runClientCase(ctx, w)
			if err != nil {
				return nil, err
			}
			rep.Cases = append(rep.Cases, c)
			continue
		}
		for _, n := range o.Threads {
			fmt.Fprintf(o.Out, "%s, %d threads:\n", w, n)
			results, err := runTargets(ctx, targets, o.Repetitions, sb.load(w, n),
				meter{client: loadGenerator("sysbench"), shared: []cpuProc{procOf("mariadb", m.Process())}}, o.Out, o.Progress,
				fmt.Sprintf("sql %s, %d threads", w, n))
			if err != nil {
				return nil, fmt.Errorf("%s, %d threads: %w", w, n, err)
			}
			rep.Cases = append(rep.Cases, newSQLCase(w, n, results))
		}
	}
	return rep, nil
}

// sqlEnv is what RunSQL's cases share: the options, the keyway binary and the one MariaDB every target reaches
// (keyway and haproxy at primary, its socket unless BackendTCP).
type sqlEnv struct {
	o       SQLOptions
	bin     string
	m       *peers.MariaDB
	primary string
}

// keywayLimits are the limits (and the group's replicas) a case serves keyway with; zero fields keep keyway's
// defaults.
type keywayLimits struct {
	maxClients int      // [sql] max_connections
	pool       int      // [[groups]] max_open
	replicas   []string // [[groups]] replicas, addresses or socket paths (bench replicas)
	readFrom   string   // [[groups]] read_from: "primary", "replicas" or "any"
}

// targets are the targets the options pick, in run order, keyway's configured with l; cleanup removes the
// configuration files.
func (e *sqlEnv) targets(l keywayLimits) (_ []target, cleanup func(), err error) {
	var files []string
	cleanup = func() {
		for _, f := range files {
			os.Remove(f)
		}
	}
	defer func() {
		if err != nil {
			cleanup()
		}
	}()
	cfg, err := writeKeywaySQLConfig(e.primary, true, l)
	if err != nil {
		return nil, nil, err
	}
	files = append(files, cfg)
	nocache, err := writeKeywaySQLConfig(e.primary, false, l)
	if err != nil {
		return nil, nil, err
	}
	files = append(files, nocache)
	all := map[string]target{directTarget: directStarter(e.m.Addr), haproxyTarget: haproxyStarter(e.primary),
		keywayTarget: keywaySQLStarter(keywayTarget, e.bin, cfg), nocacheTarget: keywaySQLStarter(nocacheTarget, e.bin, nocache)}
	var targets []target
	for _, t := range sqlTargets { // run order, whatever order they were asked in
		if slices.Contains(e.o.Targets, t) {
			targets = append(targets, all[t])
		}
	}
	return targets, cleanup, nil
}

// newSQLCase compares keyway with direct in results.
func newSQLCase(workload string, threads int, results []Result) SQLCase {
	c := SQLCase{Workload: workload, Threads: threads, Results: results}
	c.RelayRatio = ratios(results, haproxyTarget)[ratioKey(nocacheTarget, haproxyTarget)]
	var direct, keyway *Result
	for i := range results {
		switch results[i].Target {
		case directTarget:
			direct = &results[i]
		case keywayTarget:
			keyway = &results[i]
		}
	}
	if direct == nil || keyway == nil {
		return c
	}
	all := ratios(results, directTarget)
	c.Ratio = all[ratioKey(keywayTarget, directTarget)]
	c.Ratios = map[string]float64{}
	for _, r := range results {
		if r.Target != directTarget {
			c.Ratios[r.Target] = all[ratioKey(r.Target, directTarget)]
		}
	}
	if direct.P95 != nil && keyway.P95 != nil {
		c.P95Added = keyway.P95.Median - direct.P95.Median
	}
	return c
}

// WriteText writes the report as a table: per workload and thread count, the
// min, median and max queries/s and median p95 of each target, keyway's
// median over direct's and the p95 latency keyway adds.
func (r *SQLReport) WriteText(w io.Writer) {
	if r.Server != "" {
		fmt.Fprintf(w, "server: %s\n", r.Server)
	}
	ww := len("workload")
	var sysbenchCases []SQLCase
	for _, c := range r.Cases {
		if !isClientWorkload(c.Workload) {
			sysbenchCases = append(sysbenchCases, c)
			ww = max(ww, len(c.Workload))
		}
	}
	defer r.writeClientCases(w)
	if len(sysbenchCases) == 0 {
		return // the client cases say what their load is
	}
	if r.Load != "" {
		fmt.Fprintf(w, "load: %s\n", r.Load)
	}
	fmt.Fprintf(w, "%-*s  %7s  %-10s  %4s  %10s  %10s  %10s  %9s  %13s  %9s\n", ww, "workload", "threads", "target", "runs",
		"min qps", "median qps", "max qps", "p95 ms", "keyway/direct", "p95 added")
	for _, c := range sysbenchCases {
		for _, res := range c.Results {
			p95, ratio, added := "-", "", ""
			if res.P95 != nil {
				p95 = strconv.FormatFloat(res.P95.Median, 'f', 2, 64)
			}
			if r := c.Ratios[res.Target]; r > 0 {
				ratio = strconv.FormatFloat(r, 'f', 2, 64)
			}
			if res.Target == keywayTarget && c.Ratio > 0 {
				added = strconv.FormatFloat(c.P95Added, 'f', 2, 64) + " ms"
				if c.P95Added >= 0 {
					added = "+" + added
				}
			}
			line := fmt.Sprintf("%-*s  %7d  %-10s  %4d  %10s  %10s  %10s  %9s  %13s  %9s", ww, c.Workload, c.Threads, res.Target,
				len(res.Runs), formatOps(res.Min), formatOps(res.Median), formatOps(res.Max), p95, ratio, added)
			fmt.Fprintln(w, strings.TrimRight(line, " "))
		}
		if c.RelayRatio > 0 {
			fmt.Fprintf(w, "%-*s  %7d  kw-nocache/haproxy (relay vs relay): %.2f\n", ww, c.Workload, c.Threads, c.RelayRatio)
		}
		writeCPU(w, c.Results)
	}
}

// startMariaDB starts a private MariaDB for a suite and reads its version (VERSION()); the caller stops it.
func startMariaDB(ctx context.Context) (*peers.MariaDB, string, error) {
	m, err := peers.StartMariaDB(ctx)
	if err != nil {
		return nil, "", fmt.Errorf("bench: %w", err)
	}
	v, err := serverVersion(ctx, m.AppDSN)
	if err != nil {
		m.Stop()
		return nil, "", err
	}
	return m, v, nil
}

// serverVersion is the VERSION() of the server at dsn.
func serverVersion(ctx context.Context, dsn string) (string, error) {
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		return "", fmt.Errorf("bench: %w", err)
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var v string
	if err := db.QueryRowContext(ctx, "SELECT VERSION()").Scan(&v); err != nil {
		return "", fmt.Errorf("bench: SELECT VERSION(): %w", err)
	}
	return v, nil
}

// directStarter is MariaDB itself: nothing to start or stop per run.
func directStarter(addr string) target {
	return target{
		name: directTarget,
		start: func(context.Context) (running, error) {
			return running{addr: addr, stop: func() error { return nil }}, nil
		},
	}
}

// haproxyStarter is haproxy relaying to backend, the same address keyway's SQL door uses (MariaDB's socket unless
// BackendTCP), so the relay and the door pay the same backend hop.
func haproxyStarter(backend string) target {
	return target{
		name: haproxyTarget,
		start: func(ctx context.Context) (running, error) {
			h, err := peers.StartHAProxy(ctx, backend, 0)
			if err != nil {
				return running{}, err
			}
			return running{h.Addr, h.Stop, []cpuProc{procOf("haproxy", h.Process())}}, nil
		},
	}
}

// KeywaySQLConfig is the configuration `keyway bench sql` serves with: user
// app (password secret, mysql_native_password, which every libmysqlclient
// and libmariadb speaks without TLS) relayed to the backend primary as the
// same account. It has no sql.listen: the caller passes --sql-listen. With cache false the result cache is off.
func KeywaySQLConfig(primary string, cache bool) string {
	return keywaySQLConfig(primary, cache, keywayLimits{})
}

// keywaySQLConfig is KeywaySQLConfig with the limits l sets ([sql] max_connections, the group's max_open, replicas
// and read_from).
func keywaySQLConfig(primary string, cache bool, l keywayLimits) string {
	var sqlLimits, groupLimits string
	if l.maxClients > 0 {
		sqlLimits = fmt.Sprintf("max_connections = %d\n", l.maxClients)
	}
	if l.pool > 0 {
		groupLimits = fmt.Sprintf("max_open = %d\n", l.pool)
	}
	if len(l.replicas) > 0 {
		quoted := make([]string, len(l.replicas))
		for i, r := range l.replicas {
			quoted[i] = strconv.Quote(r)
		}
		groupLimits += "replicas = [" + strings.Join(quoted, ", ") + "]\n"
	}
	if l.readFrom != "" {
		groupLimits += fmt.Sprintf("read_from = %q\n", l.readFrom)
	}
	return fmt.Sprintf(`# keyway bench sql: the SQL door in front of one MariaDB.
[cache]
enabled = %[4]t

[sql]
%[5]s
[[sql.users]]
name = %[1]q
password = %[2]q
auth_plugin = "mysql_native_password"

[[groups]]
name = "main"
primary = %[3]q
user = %[1]q
password = %[2]q
%[6]s`, sqlUser, sqlPassword, primary, cache, sqlLimits, groupLimits)
}

// writeKeywaySQLConfig writes keywaySQLConfig(primary, cache, l) to a temporary file
// and returns its path; the caller removes it.
func writeKeywaySQLConfig(primary string, cache bool, l keywayLimits) (string, error) {
	return writeTemp("keyway-bench-sql-*.toml", keywaySQLConfig(primary, cache, l), "keyway config")
}

// sqlStartTimeout bounds the wait for keyway's SQL port once its memcache
// port accepts.
const sqlStartTimeout = 30 * time.Second

// keywaySQLStarter starts `keyway serve --config cfg --sql-listen ADDR [extra...]`
// on a free port and waits until the SQL door accepts connections. A start
// that lost its port to another process is retried on a new one.
func keywaySQLStarter(name, bin, cfg string, extra ...string) target {
	return target{
		name: name,
		start: func(ctx context.Context) (running, error) {
			var lastErr error
			for attempt := 0; attempt < 3; attempt++ {
				port, err := peers.FreePort()
				if err != nil {
					return running{}, err
				}
				addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
				p, err := peers.StartKeywayBinary(ctx, bin, append([]string{"--config", cfg, "--sql-listen", addr}, extra...)...)
				if err != nil {
					lastErr = err
					if strings.Contains(strings.ToLower(err.Error()), "address already in use") && ctx.Err() == nil {
						continue
					}
					return running{}, err
				}
				if err := waitForSQL(ctx, p, addr); err != nil {
					_ = p.Kill()
					lastErr = fmt.Errorf("%w\n%s", err, tail([]byte(p.Output())))
					if strings.Contains(strings.ToLower(p.Output()), "address already in use") && ctx.Err() == nil {
						continue
					}
					return running{}, lastErr
				}
				return running{addr, p.Stop, []cpuProc{procOf("keyway", p)}}, nil
			}
			return running{}, lastErr
		},
	}
}

// waitForSQL waits until addr accepts TCP connections, giving up when p
// exits.
func waitForSQL(ctx context.Context, p *peers.Process, addr string) error {
	ctx, cancel := context.WithTimeout(ctx, sqlStartTimeout)
	defer cancel()
	go func() {
		select {
		case <-p.Done():
			cancel()
		case <-ctx.Done():
		}
	}()
	if err := peers.WaitForPort(ctx, addr); err != nil {
		if p.Exited() {
			return fmt.Errorf("keyway exited before its SQL door %s accepted connections", addr)
		}
		return fmt.Errorf("keyway's SQL door %s: %w", addr, err)
	}
	return nil
}

// sysbench runs sysbench's OLTP scripts against one server per run.
type sysbench struct {
	path     string
	common   []string // connection, table and timing options, without host and port
	duration time.Duration
}

func newSysbench(o SQLOptions) (*sysbench, error) {
	path, err := peers.LookPath("sysbench")
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	return &sysbench{
		path: path,
		common: []string{
			"--db-driver=mysql",
			"--mysql-user=" + sqlUser,
			"--mysql-password=" + sqlPassword,
			"--mysql-db=" + sqlDatabase,
			"--tables=" + strconv.Itoa(o.Tables),
			"--table-size=" + strconv.Itoa(o.TableSize),
			"--time=" + strconv.Itoa(int(o.Duration/time.Second)),
			"--report-interval=0",
			"--percentile=95",
		},
		duration: o.Duration,
	}, nil
}

func (s *sysbench) describe() string {
	return "sysbench WORKLOAD --mysql-host=127.0.0.1 --mysql-port=PORT " + strings.Join(s.common, " ") +
		" --threads=N run (server-side prepared statements: --db-ps-mode=auto)"
}

// argv is the command line for workload against the server at addr.
func (s *sysbench) argv(workload, addr string, extra ...string) ([]string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("bench: server address %q: %w", addr, err)
	}
	argv := append([]string{workload, "--mysql-host=" + host, "--mysql-port=" + port}, s.common...)
	return append(argv, extra...), nil
}

// prepareTimeout bounds `sysbench prepare`, which creates and fills the
// tables.
const prepareTimeout = 10 * time.Minute

// prepare creates and fills the sbtest tables on the server at addr.
func (s *sysbench) prepare(ctx context.Context, addr string) error {
	argv, err := s.argv("oltp_common", addr, "prepare")
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, prepareTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, s.path, argv...)
	cmd.WaitDelay = 2 * time.Second
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("bench: sysbench %s: %w\n%s", strings.Join(argv, " "), err, tail(out))
	}
	return nil
}

// load runs workload with threads threads against one server per call.
func (s *sysbench) load(workload string, threads int) loadFunc {
	return s.loadSummary(workload, threads, nil)
}

// loadSummary is load that also hands each good run's summary to got (nil: to no one), with the address it ran
// against.
func (s *sysbench) loadSummary(workload string, threads int, got func(addr string, sum SysbenchSummary)) loadFunc {
	return func(ctx context.Context, addr string) (sample, error) {
		argv, err := s.argv(workload, addr, "--threads="+strconv.Itoa(threads), "run")
		if err != nil {
			return sample{}, err
		}
		// sysbench connects every thread before the timed run starts and
		// waits for the threads to finish their last event after it.
		ctx, cancel := context.WithTimeout(ctx, s.duration+time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, s.path, argv...)
		cmd.WaitDelay = 2 * time.Second
		out, err := cmd.CombinedOutput()
		if err != nil {
			return sample{}, fmt.Errorf("sysbench %s: %w\n%s", strings.Join(argv, " "), err, tail(out))
		}
		sum, err := ParseSysbench(out)
		if err != nil {
			return sample{}, fmt.Errorf("sysbench %s: %w\n%s", strings.Join(argv, " "), err, tail(out))
		}
		if got != nil {
			got(addr, sum)
		}
		note := fmt.Sprintf("(p95 %.2f ms; %d queries in %.1fs; ignored errors %d, reconnects %d)",
			sum.P95, sum.Queries, sum.Seconds, sum.IgnoredErrors, sum.Reconnects)
		return sample{ops: sum.QPS, n: sum.Queries, p95: sum.P95, hasP95: true, note: note}, nil
	}
}

// SysbenchSummary is what ParseSysbench extracts from the report of
// `sysbench … run` (sysbench 1.0).
type SysbenchSummary struct {
	Queries       int64   // "queries:"
	QPS           float64 // queries per second over the timed run
	Transactions  int64   // "transactions:" (events)
	TPS           float64
	Errors        int64   // "errors:" where this sysbench prints it; 1.0 aborts on an error it does not ignore
	IgnoredErrors int64   // "ignored errors:": deadlocks and the like sysbench retried
	Reconnects    int64   // "reconnects:"
	Seconds       float64 // "total time:"
	P95           float64 // "95th percentile:" latency in ms
}

// The lines of sysbench's report, e.g.
//
//	transactions:                        28631  (28541.58 per sec.)
//	queries:                             28631  (28541.58 per sec.)
//	ignored errors:                      0      (0.00 per sec.)
//	reconnects:                          0      (0.00 per sec.)
//	total time:                          1.0012s
//	95th percentile:                        0.05
var (
	sysbenchQueriesRE      = regexp.MustCompile(`(?m)^\s*queries:\s+(\d+)\s+\(([0-9.]+) per sec\.\)`)
	sysbenchTransactionsRE = regexp.MustCompile(`(?m)^\s*transactions:\s+(\d+)\s+\(([0-9.]+) per sec\.\)`)
	sysbenchErrorsRE       = regexp.MustCompile(`(?m)^\s*errors:\s+(\d+)`)
	sysbenchIgnoredRE      = regexp.MustCompile(`(?m)^\s*ignored errors:\s+(\d+)`)
	sysbenchReconnectsRE   = regexp.MustCompile(`(?m)^\s*reconnects:\s+(\d+)`)
	sysbenchTimeRE         = regexp.MustCompile(`(?m)^\s*total time:\s+([0-9.]+)s`)
	sysbenchP95RE          = regexp.MustCompile(`(?m)^\s*95th percentile:\s+([0-9.]+)`)
)

// ParseSysbench reads the final report of `sysbench … run`. It fails when the
// queries line or the 95th percentile is missing or when no query was run.
func ParseSysbench(out []byte) (SysbenchSummary, error) {
	var s SysbenchSummary
	m := sysbenchQueriesRE.FindSubmatch(out)
	if m == nil {
		return s, errors.New(`no "queries: N (R per sec.)" line in sysbench's output`)
	}
	var err1, err2 error
	s.Queries, err1 = strconv.ParseInt(string(m[1]), 10, 64)
	s.QPS, err2 = strconv.ParseFloat(string(m[2]), 64)
	if err := errors.Join(err1, err2); err != nil {
		return s, fmt.Errorf("sysbench queries line %q: %w", m[0], err)
	}
	p := sysbenchP95RE.FindSubmatch(out)
	if p == nil {
		return s, errors.New(`no "95th percentile:" line in sysbench's output`)
	}
	var err error
	if s.P95, err = strconv.ParseFloat(string(p[1]), 64); err != nil {
		return s, fmt.Errorf("sysbench 95th percentile %q: %w", p[1], err)
	}
	if m := sysbenchTransactionsRE.FindSubmatch(out); m != nil {
		s.Transactions, _ = strconv.ParseInt(string(m[1]), 10, 64)
		s.TPS, _ = strconv.ParseFloat(string(m[2]), 64)
	}
	for _, c := range []struct {
		re  *regexp.Regexp
		dst *int64
	}{{sysbenchErrorsRE, &s.Errors}, {sysbenchIgnoredRE, &s.IgnoredErrors}, {sysbenchReconnectsRE, &s.Reconnects}} {
		if m := c.re.FindSubmatch(out); m != nil {
			*c.dst, _ = strconv.ParseInt(string(m[1]), 10, 64)
		}
	}
	if m := sysbenchTimeRE.FindSubmatch(out); m != nil {
		s.Seconds, _ = strconv.ParseFloat(string(m[1]), 64)
	}
	if s.Queries <= 0 || s.QPS <= 0 {
		return s, fmt.Errorf("sysbench ran %d queries (%g per sec.): the server answered nothing", s.Queries, s.QPS)
	}
	return s, nil
}
