package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/keywaydb/keyway/internal/bench"
)

const benchUsage = `usage: keyway bench memcache [flags]
       keyway bench sql [flags]
       keyway bench kv [flags]
       keyway bench staleness [flags]
       keyway bench cache [flags]
       keyway bench replicas [flags]
       keyway bench shard [flags]
       keyway bench report --out DIR [--suites LIST] [--duration D] [--reps N] [--SUITE.FLAG V ...]
       keyway bench report --out DIR --json FILE.json...
       keyway bench compare OLD.json NEW.json

memcache: runs keyway (memory-only, async, sync) and memcached 1.6 side by
side under memcaslap and prints ops/s min/median/max and the ratios to
memcached. Then the memory case (--memory): loads the same items into
memcached and keyway (no disk, and async on a data_dir) at the same -m and
prints RSS after the load, items held, load time, memcaslap ops/s and p99
on the loaded store, and keyway's restart time on its data_dir.

sql: runs sysbench (oltp_point_select and oltp_read_only at 1, 4 and 8
threads) against a private MariaDB, direct, through haproxy and through
keyway's SQL door with the result cache on and off, alternating, and prints
queries/s min/median/max, the ratios to direct and the p95 latency keyway
adds. Then the same targets under two client cases: many_clients (2,000
connections, each one point select a second, MariaDB at max_connections
151: selects answered, p50/p99, 1040 and other errors, MariaDB's peak
connections) and connect_only (PHP mysqli connect + close in a loop:
connects/s); and lone_client: one PHP mysqli process loading pages of 1, 5
and 20 point selects one after another, a new connection per page (pages/s,
CPU per page, the µs each path adds to a statement over direct, fitted from
the page sizes, and the targets). --workloads many_clients,connect_only,lone_client
runs those alone.

kv: the InnoDB memcached plugin's experiment side by side: loads 10,000
pairs with single-row autocommit INSERTs direct to a private MariaDB vs
memcache sets through a keyway container (sync, group commit) at 1, 4, 8
and 16 clients, then fetches them with a prepared SELECT direct vs memcache
gets through keyway (caching, warm) vs memcached 1.6; prints ops/s
min/median/max, p50/p99 latency and the ratios.

staleness: commits writes directly to a private MariaDB while clients poll
the row through keyway's SQL result cache, and prints p50/p99/max from each
commit to the first read that returns it.

cache: keyway's consistent cache side by side in one run: sysbench
oltp_point_select direct and through keyway with the cache on and off (at
1, 4 and 8 threads); seed 003's PHP mysqli loops (SELECT 2 and a 6-row
SELECT *) direct, through keyway uncached and cached; staleness under load;
and seed 002's restart (hit ratio and qps per second after restarting
keyway on its data_dir vs memcached cache-aside). Prints min/median/max,
the ratios, and the targets next to them (it asserts none).

replicas: a MariaDB primary with two GTID replicas: sysbench oltp_read_only
and oltp_read_write at 8 threads (--skip_trx=on) direct to the primary,
through keyway to the primary alone (keyway-primary) and through keyway
with read_from = "replicas" (keyway-replicas), the result cache off,
alternating; prints queries/s min/median/max, errors, each server's share
of the rows read and the CPU per query of every process. Then
read-your-writes with one replica's SQL thread stopped: clients update a
row and read it back on another session; violations (target 0) and the
share of reads each server answered. Then a switchover and a failover
through keyway's admin listener under writers, with asynchronous and then
semi-synchronous replication: the longest write, kill to first write,
errors, acknowledged rows lost.

shard: seed 004's experiment: a global MariaDB and two shards; one PHP
process runs loops of prepared UPDATE and SELECT by id through keyway with
its local shard map (keyway-sharded), through keyway to one unsharded
server holding the whole table (keyway-unsharded, the baseline), direct to
the shard the application computes (direct-shard), and through keyway with
a map lookup query on the global server before each statement (strawman,
Fabric's pattern; --strawman=false leaves it out); statements/s
min/median/max, the ratios (target: sharded ≥ 0.95× unsharded) and the
strawman's slowdown beside the seed's 83×.

report: runs the suites (default all four; --duration and --reps go to
every suite that has them, --sql.threads 1,4 and the like to one) or reads
their --json outputs, and writes DIR/index.html, one self-contained page
with the machine, a chart of ops/s (min/median/max per target, grouped by
concurrency) and of latency per scenario, a "who wins" table and the
commands to reproduce, and DIR/report.json, the data behind it.

compare: prints each figure's change between two reports (report.json or
a suite's --json) and marks a regression when the new median lies outside
the old min-max band on the bad side; exits 1 if any did.

On a terminal, a status line shows the scenario, the round and the time left.

keyway bench memcache -h, sql -h, kv -h, staleness -h, cache -h, replicas -h, shard -h and report -h list the flags.
`

func runBench(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, benchUsage)
		return 2
	}
	switch args[0] {
	case "report":
		return benchReport(args[1:], stdout, stderr)
	case "compare":
		return benchCompare(args[1:], stdout, stderr)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, benchUsage)
		return 0
	}
	for _, s := range suites {
		if s.name == args[0] {
			return benchSuite(s, args[1:], stdout, stderr)
		}
	}
	fmt.Fprintf(stderr, "keyway bench: unknown benchmark %q\n\n%s", args[0], benchUsage)
	return 2
}

// suite is one benchmark of `keyway bench`: define adds its flags to a flag set and returns how to run it once they
// are parsed.
type suite struct {
	name   string
	define func(fs *flag.FlagSet) suiteRun
}

type suiteRun struct {
	plan func() (runs int, hint time.Duration)
	run  func(ctx context.Context, self string, out io.Writer, prog *bench.Progress) (report, error)
}

// suites in the order `keyway bench report` runs them.
var suites = []suite{{"memcache", memcacheFlags}, {"sql", sqlFlags}, {"kv", kvFlags}, {"staleness", stalenessFlags}, {"cache", cacheFlags}, {"replicas", replicasFlags}, {"shard", shardFlags}}

func memcacheFlags(fs *flag.FlagSet) suiteRun {
	o := &bench.MemcacheOptions{}
	fs.DurationVar(&o.Duration, "duration", 0, "`length` of each run, whole seconds (default 10s)")
	fs.IntVar(&o.Repetitions, "reps", 0, "`runs` per target, alternating between targets (default 3)")
	fs.IntVar(&o.Concurrency, "c", 0, "memcaslap `concurrency` (default 8)")
	fs.IntVar(&o.ValueSize, "value-size", 0, "value `bytes` (default 400)")
	fs.IntVar(&o.MemoryMB, "m", 0, "memory limit of both servers in `MB` (default 1024)")
	o.MemoryCases, _ = bench.ParseMemoryCases(bench.DefaultMemoryCases)
	fs.Func("memory", "the memory case's loads, `ITEMS/VALUE/MB,...` (VALUE bytes or mix: 10 B to 4 KB; MB the -m of both servers), or none; 10M/100/2048 is the ten-million case (default "+bench.DefaultMemoryCases+")", func(s string) error {
		cases, err := bench.ParseMemoryCases(s)
		o.MemoryCases = cases
		return err
	})
	fs.BoolVar(&o.MemoryOnly, "memory-only", false, "run the memory case alone, without the throughput runs")
	fs.DurationVar(&o.MemoryDuration, "memory-duration", 0, "`length` of the memcaslap run on each loaded store, whole seconds (default 5s)")
	return suiteRun{func() (int, time.Duration) { return o.Plan() }, func(ctx context.Context, self string, out io.Writer, prog *bench.Progress) (report, error) {
		o.KeywayBinary, o.Out, o.Progress = self, out, prog
		return bench.RunMemcache(ctx, *o)
	}}
}

func sqlFlags(fs *flag.FlagSet) suiteRun {
	o := &bench.SQLOptions{}
	fs.DurationVar(&o.Duration, "duration", 0, "`length` of each run, whole seconds (default 10s)")
	fs.IntVar(&o.Repetitions, "reps", 0, "`runs` per target, alternating between targets (default 3)")
	fs.Func("threads", "comma-separated sysbench thread `counts`, one case each (default 1,4,8)", intList(&o.Threads))
	fs.Func("workloads", "comma-separated `workloads`: sysbench scripts, and many_clients, connect_only and lone_client (default oltp_point_select,oltp_read_only,many_clients,connect_only,lone_client)", stringList(&o.Workloads))
	fs.IntVar(&o.Clients, "clients", 0, "many_clients: client `connections`, each one point select a second (default 2000)")
	fs.IntVar(&o.Pool, "pool", 0, "many_clients: keyway's backend `connections`, [[groups]] max_open (default 64)")
	fs.Func("page-sizes", "lone_client: comma-separated `selects` per page, one case each (default 1,5,20)", intList(&o.PageSizes))
	fs.IntVar(&o.Tables, "tables", 0, "`number` of sysbench tables, --tables (default 4)")
	fs.IntVar(&o.TableSize, "table-size", 0, "sysbench --table-size, `rows` per table (default 10000)")
	fs.BoolVar(&o.BackendTCP, "backend-tcp", false, "keyway reaches MariaDB over loopback TCP instead of its unix socket")
	fs.Func("targets", "comma-separated `targets` to run, of direct, haproxy, keyway, kw-nocache (default all)", stringList(&o.Targets))
	return suiteRun{func() (int, time.Duration) { return o.Plan() }, func(ctx context.Context, self string, out io.Writer, prog *bench.Progress) (report, error) {
		o.KeywayBinary, o.Out, o.Progress = self, out, prog
		return bench.RunSQL(ctx, *o)
	}}
}

func kvFlags(fs *flag.FlagSet) suiteRun {
	o := &bench.KVOptions{}
	fs.DurationVar(&o.Duration, "duration", 0, "`length` of each fetch run (default 5s); a load run is the pairs' writes")
	fs.IntVar(&o.Repetitions, "reps", 0, "`runs` per target, alternating between targets (default 3)")
	fs.IntVar(&o.Pairs, "pairs", 0, "key-value `pairs` (default 10000)")
	fs.IntVar(&o.KeySize, "key-size", 0, "key `bytes` (default 10)")
	fs.IntVar(&o.ValueSize, "value-size", 0, "value `bytes` (default 40)")
	fs.Func("c", "comma-separated load client `counts`, one case each (default 1,8)", intList(&o.LoadConcurrency))
	fs.Func("fetch-c", "comma-separated fetch client `counts`, one case each (default 1,8)", intList(&o.FetchConcurrency))
	return suiteRun{func() (int, time.Duration) { return o.Plan() }, func(ctx context.Context, self string, out io.Writer, prog *bench.Progress) (report, error) {
		o.KeywayBinary, o.Out, o.Progress = self, out, prog
		return bench.RunKV(ctx, *o)
	}}
}

func stalenessFlags(fs *flag.FlagSet) suiteRun {
	o := &bench.StalenessOptions{}
	fs.IntVar(&o.Writes, "writes", 0, "direct `commits` measured (default 300)")
	fs.IntVar(&o.Readers, "readers", 0, "`clients` polling through keyway (default 4)")
	return suiteRun{func() (int, time.Duration) { return o.Plan() }, func(ctx context.Context, self string, out io.Writer, prog *bench.Progress) (report, error) {
		o.KeywayBinary, o.Out, o.Progress = self, out, prog
		return bench.RunStaleness(ctx, *o)
	}}
}

func cacheFlags(fs *flag.FlagSet) suiteRun {
	o := &bench.CacheOptions{}
	fs.DurationVar(&o.Duration, "duration", 0, "`length` of each sysbench run, whole seconds (default 10s)")
	fs.IntVar(&o.Repetitions, "reps", 0, "`runs` per target, alternating between targets (default 3)")
	fs.Func("threads", "comma-separated sysbench thread `counts`, one case each (default 1,4,8)", intList(&o.Threads))
	fs.IntVar(&o.TableSize, "table-size", 0, "sysbench --table-size, `rows` per table (default 10000)")
	fs.IntVar(&o.Loops, "loops", 0, "`iterations` of each PHP loop, seed 003 (default 10000)")
	fs.IntVar(&o.Keys, "keys", 0, "`rows` the restart loop reads, seed 002 (default 100000, the seed's)")
	fs.DurationVar(&o.RestartWindow, "restart-window", 0, "`time` counted per second after each restart, whole seconds (default 10s)")
	fs.IntVar(&o.Writes, "writes", 0, "staleness: direct `commits` measured (default 300)")
	return suiteRun{func() (int, time.Duration) { return o.Plan() }, func(ctx context.Context, self string, out io.Writer, prog *bench.Progress) (report, error) {
		o.KeywayBinary, o.Out, o.Progress = self, out, prog
		return bench.RunCache(ctx, *o)
	}}
}

func replicasFlags(fs *flag.FlagSet) suiteRun {
	o := &bench.ReplicasOptions{}
	fs.DurationVar(&o.Duration, "duration", 0, "`length` of each run (sysbench and read-your-writes), whole seconds (default 10s)")
	fs.IntVar(&o.Repetitions, "reps", 0, "`runs` per target, alternating between targets (default 3)")
	fs.Func("threads", "comma-separated sysbench thread `counts`, one case each (default 8)", intList(&o.Threads))
	fs.Func("workloads", "comma-separated sysbench `scripts` (default oltp_read_only,oltp_read_write)", stringList(&o.Workloads))
	fs.IntVar(&o.Tables, "tables", 0, "`number` of sysbench tables, --tables (default 4)")
	fs.IntVar(&o.TableSize, "table-size", 0, "sysbench --table-size, `rows` per table (default 10000)")
	fs.BoolVar(&o.Transactions, "transactions", false, "keep sysbench's BEGIN/COMMIT around each event (--skip_trx=off), which keeps every read on the primary")
	fs.IntVar(&o.Writers, "writers", 0, "read-your-writes `clients` (default 8)")
	return suiteRun{func() (int, time.Duration) { return o.Plan() }, func(ctx context.Context, self string, out io.Writer, prog *bench.Progress) (report, error) {
		o.KeywayBinary, o.Out, o.Progress = self, out, prog
		return bench.RunReplicas(ctx, *o)
	}}
}

func shardFlags(fs *flag.FlagSet) suiteRun {
	o := &bench.ShardOptions{}
	fs.IntVar(&o.Statements, "statements", 0, "`statements` per loop (default 2000)")
	fs.IntVar(&o.Rows, "rows", 0, "`rows` of the sharded table (default 10000)")
	fs.IntVar(&o.Repetitions, "reps", 0, "`loops` per target and statement, alternating between targets (default 5)")
	strawman := fs.Bool("strawman", true, "also run the strawman: a map lookup query on the global server before each statement")
	return suiteRun{func() (int, time.Duration) { o.NoStrawman = !*strawman; return o.Plan() }, func(ctx context.Context, self string, out io.Writer, prog *bench.Progress) (report, error) {
		o.KeywayBinary, o.Out, o.Progress, o.NoStrawman = self, out, prog, !*strawman
		return bench.RunShard(ctx, *o)
	}}
}

// benchSuite runs one benchmark and prints its table, or its JSON with --json.
func benchSuite(s suite, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("keyway bench "+s.name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	sr := s.define(fs)
	given := recordFlags(fs)
	jsonOut := fs.Bool("json", false, "print the report as JSON")
	if status, done := parseFlags(fs, args, stdout, stderr); done {
		return status
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "%s: unexpected argument %q: it takes flags only\n", fs.Name(), fs.Arg(0))
		return 2
	}
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintf(stderr, "keyway bench: cannot find own binary: %v\n", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	prog := newProgress(stdout, stderr)
	prog.Plan(sr.plan())
	var out io.Writer = stderr // the per-run lines, except with --json
	if *jsonOut {
		out = nil
	}
	rep, err := sr.run(ctx, self, prog.Log(out), prog)
	prog.Clear()
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", fs.Name(), err)
		return 1
	}
	cmd := append([]string{"keyway", "bench", s.name}, given.args...)
	if *jsonOut {
		cmd = append(cmd, "--json")
	}
	rep.SetCommand(shellJoin(cmd))
	if *jsonOut {
		return writeJSON(stdout, rep)
	}
	rep.WriteText(stdout)
	return 0
}

// intList parses a flag of comma-separated whole numbers into dst.
func intList(dst *[]int) func(string) error {
	return func(s string) error {
		for _, f := range strings.Split(s, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil {
				return fmt.Errorf("want whole numbers separated by commas, like 1,4,8")
			}
			*dst = append(*dst, n)
		}
		return nil
	}
}

// stringList parses a flag of comma-separated words into dst.
func stringList(dst *[]string) func(string) error {
	return func(s string) error {
		for _, f := range strings.Split(s, ",") {
			*dst = append(*dst, strings.TrimSpace(f))
		}
		return nil
	}
}

// report is what a benchmark returns: a table for people, JSON for machines, and the command that made it.
type report interface {
	WriteText(io.Writer)
	SetCommand(string)
}

func writeJSON(w io.Writer, v any) int {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return 1
	}
	return 0
}

// benchReport runs the suites (or reads their JSON) and writes DIR/index.html and DIR/report.json.
func benchReport(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("keyway bench report", flag.ContinueOnError)
	fs.SetOutput(stderr)
	outDir := fs.String("out", "", "directory to write index.html and report.json into (required)")
	fromJSON := fs.Bool("json", false, "draw the report from the JSON files given as arguments instead of running the suites")
	only := fs.String("suites", "memcache,sql,kv,staleness", "comma-separated suites to run")
	duration := fs.String("duration", "", "passed to every suite that has --duration")
	reps := fs.String("reps", "", "passed to every suite that has --reps")
	type prepared struct {
		suite
		fs    *flag.FlagSet
		run   suiteRun
		given *recorded
	}
	var all []prepared
	for _, s := range suites {
		sfs := flag.NewFlagSet("keyway bench "+s.name, flag.ContinueOnError)
		run := s.define(sfs)
		given := recordFlags(sfs)
		// Every suite flag is also a report flag, prefixed: --sql.threads 1,4 sets the sql suite's --threads.
		sfs.VisitAll(func(f *flag.Flag) {
			fs.Var(f.Value, s.name+"."+f.Name, f.Usage)
			fs.Lookup(s.name + "." + f.Name).DefValue = f.DefValue
		})
		all = append(all, prepared{s, sfs, run, given})
	}
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), "usage: keyway bench report --out DIR [--suites memcache,sql,kv,staleness] [--duration D] [--reps N] [--SUITE.FLAG V ...]\n"+
			"       keyway bench report --out DIR --json FILE.json...\n\nflags:\n")
		fs.PrintDefaults()
	}
	if status, done := parseFlags(fs, args, stdout, stderr); done {
		return status
	}
	if *outDir == "" {
		fmt.Fprintln(stderr, "keyway bench report: --out DIR is required")
		return 2
	}
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintf(stderr, "keyway bench report: cannot find own binary: %v\n", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	reportCmd := shellJoin(append([]string{"keyway", "bench", "report"}, args...))

	var rep *bench.Report
	if *fromJSON {
		if fs.NArg() == 0 {
			fmt.Fprintln(stderr, "keyway bench report: --json needs the JSON files as arguments")
			return 2
		}
		if rep, err = bench.ReadReports(fs.Args()...); err != nil {
			fmt.Fprintf(stderr, "keyway bench report: %v\n", err)
			return 1
		}
		if rep.Machine.When.IsZero() {
			// Suite files carry no machine: describe this one, where they are most likely to have been made.
			rep.Machine = bench.CollectMachine(ctx, self)
		}
		rep.Commands = append(rep.Commands, reportCmd)
	} else {
		if fs.NArg() > 0 {
			fmt.Fprintf(stderr, "keyway bench report: unexpected argument %q (JSON files need --json)\n", fs.Arg(0))
			return 2
		}
		var chosen []prepared
		for _, name := range strings.Split(*only, ",") {
			i := slices.IndexFunc(all, func(p prepared) bool { return p.name == strings.TrimSpace(name) })
			if i < 0 {
				fmt.Fprintf(stderr, "keyway bench report: unknown suite %q in --suites (have memcache, sql, kv, staleness, cache, replicas, shard)\n", name)
				return 2
			}
			chosen = append(chosen, all[i])
		}
		for _, p := range chosen {
			for _, f := range []struct{ name, v string }{{"duration", *duration}, {"reps", *reps}} {
				if f.v == "" || p.fs.Lookup(f.name) == nil || p.given.has(f.name) {
					continue // not given, not the suite's, or given to the suite itself
				}
				if err := p.fs.Set(f.name, f.v); err != nil {
					fmt.Fprintf(stderr, "keyway bench report: --%s %s: %v\n", f.name, f.v, err)
					return 2
				}
			}
		}
		rep = &bench.Report{Machine: bench.CollectMachine(ctx, self)}
		prog := newProgress(stdout, stderr)
		for _, p := range chosen {
			prog.Plan(p.run.plan())
		}
		for _, p := range chosen {
			sr, err := p.run.run(ctx, self, prog.Log(stderr), prog)
			if err != nil {
				prog.Clear()
				fmt.Fprintf(stderr, "keyway bench report: %s: %v\n", p.name, err)
				return 1
			}
			cmd := shellJoin(append(append([]string{"keyway", "bench", p.name}, p.given.args...), "--json")) + " > " + p.name + ".json"
			sr.SetCommand(cmd)
			rep.Commands = append(rep.Commands, cmd)
			prog.Clear()
			fmt.Fprintf(stdout, "== %s\n", p.name)
			sr.WriteText(stdout)
			fmt.Fprintln(stdout)
			if err := rep.Add(sr); err != nil {
				prog.Clear()
				fmt.Fprintf(stderr, "keyway bench report: %v\n", err)
				return 1
			}
		}
		prog.Clear()
		rep.Commands = append(rep.Commands, "# or all of the above, and this report, in one go:", reportCmd)
	}
	if err := rep.WriteFiles(*outDir); err != nil {
		fmt.Fprintf(stderr, "keyway bench report: %v\n", err)
		return 1
	}
	rep.WriteWins(stdout)
	fmt.Fprintf(stdout, "report: %s (data: %s)\n", filepath.Join(*outDir, "index.html"), filepath.Join(*outDir, "report.json"))
	return 0
}

// benchCompare prints every figure's change between two reports and exits 1 when one regressed beyond the old noise.
func benchCompare(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("keyway bench compare", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), "usage: keyway bench compare OLD.json NEW.json\n\n"+
			"Each file is a report.json from `keyway bench report` or one suite's --json output.\n"+
			"A figure regressed when its new median lies outside the old min–max band on the bad side\n"+
			"(below it for a throughput, above it for a latency); the exit status is then 1.\n")
	}
	if status, done := parseFlags(fs, args, stdout, stderr); done {
		return status
	}
	if fs.NArg() != 2 {
		fs.Usage()
		return 2
	}
	old, err := bench.ReadReports(fs.Arg(0))
	if err != nil {
		fmt.Fprintf(stderr, "keyway bench compare: %v\n", err)
		return 1
	}
	cur, err := bench.ReadReports(fs.Arg(1))
	if err != nil {
		fmt.Fprintf(stderr, "keyway bench compare: %v\n", err)
		return 1
	}
	if !old.Machine.When.IsZero() && !cur.Machine.When.IsZero() {
		if diff := bench.MachineDifferences(old.Machine, cur.Machine); len(diff) > 0 {
			fmt.Fprintf(stdout, "note: the machines differ, which can move every figure: %s\n", strings.Join(diff, "; "))
		}
	}
	changes := bench.Compare(old, cur)
	bench.WriteChanges(stdout, changes)
	if bench.Regressions(changes) > 0 {
		return 1
	}
	return 0
}

// recorded keeps the flags given on a flag set, as written, so the command can be printed for reproduction.
type recorded struct {
	args  []string
	names map[string]bool
}

func (r *recorded) has(name string) bool { return r.names[name] }

// recordFlags wraps every flag defined on fs so far to record its settings. Every suite flag defaults to its zero
// value (the suite applies its real defaults), so the wrapped flags' DefValue is "", which keeps `-h` from printing a
// "(default …)" of its own.
func recordFlags(fs *flag.FlagSet) *recorded {
	r := &recorded{names: map[string]bool{}}
	fs.VisitAll(func(f *flag.Flag) {
		rv := &recordingValue{Value: f.Value, name: f.Name, r: r}
		if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
			f.Value = &recordingBool{rv}
		} else {
			f.Value = rv
		}
		f.DefValue = ""
	})
	return r
}

type recordingValue struct {
	flag.Value
	name string
	r    *recorded
}

// String works on the zero recordingValue too, which flag.PrintDefaults makes to find a flag's zero value.
func (v *recordingValue) String() string {
	if v == nil || v.Value == nil {
		return ""
	}
	return v.Value.String()
}

func (v *recordingValue) Set(s string) error {
	if err := v.Value.Set(s); err != nil {
		return err
	}
	v.r.args = append(v.r.args, "--"+v.name+"="+s)
	v.r.names[v.name] = true
	return nil
}

// recordingBool keeps a boolean flag boolean (given without a value).
type recordingBool struct{ *recordingValue }

func (*recordingBool) IsBoolFlag() bool { return true }

// shellJoin quotes args for a POSIX shell where needed.
func shellJoin(args []string) string {
	out := make([]string, len(args))
	for i, a := range args {
		if a != "" && strings.IndexFunc(a, func(r rune) bool {
			return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_=.,/:@%+", r))
		}) < 0 {
			out[i] = a
		} else {
			out[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
	}
	return strings.Join(out, " ")
}

// newProgress is the status line on stderr when both stdout and stderr are terminals; nil (nothing shown) otherwise.
func newProgress(stdout, stderr io.Writer) *bench.Progress {
	if isTerminal(stdout) && isTerminal(stderr) {
		return bench.NewProgress(stderr)
	}
	return nil
}
