package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/keywaydb/keyway/internal/bench"
)

const benchUsage = `usage: keyway bench memcache [flags]
       keyway bench sql [flags]
       keyway bench kv [flags]
       keyway bench staleness [flags]

memcache: runs keyway (memory-only, async, sync) and memcached 1.6 side by
side under memcaslap and prints ops/s min/median/max and the ratios to
memcached.

sql: runs sysbench (oltp_point_select and oltp_read_only at 1, 4 and 8
threads) against a private MariaDB, direct and through keyway's SQL door
with the result cache on and off, alternating, and prints queries/s
min/median/max, the ratios to direct and the p95 latency keyway adds.

kv: the InnoDB memcached plugin's experiment side by side: loads 10,000
pairs with single-row autocommit INSERTs direct to a private MariaDB vs
memcache sets through a keyway container (sync, group commit) at 1, 4, 8
and 16 clients, then fetches them with a prepared SELECT direct vs memcache
gets through keyway (caching, warm) vs memcached 1.6; prints ops/s
min/median/max, p50/p99 latency and the ratios.

staleness: commits writes directly to a private MariaDB while clients poll
the row through keyway's SQL result cache, and prints p50/p99/max from each
commit to the first read that returns it.

keyway bench memcache -h, sql -h, kv -h and staleness -h list the flags.
`

func runBench(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, benchUsage)
		return 2
	}
	switch args[0] {
	case "memcache":
		return benchMemcache(args[1:], stdout, stderr)
	case "sql":
		return benchSQL(args[1:], stdout, stderr)
	case "kv":
		return benchKV(args[1:], stdout, stderr)
	case "staleness":
		return benchStaleness(args[1:], stdout, stderr)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, benchUsage)
		return 0
	}
	fmt.Fprintf(stderr, "keyway bench: unknown benchmark %q\n\n%s", args[0], benchUsage)
	return 2
}

func benchMemcache(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("keyway bench memcache", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := bench.MemcacheOptions{}
	fs.DurationVar(&o.Duration, "duration", 0, "length of each run, whole seconds (default 10s)")
	fs.IntVar(&o.Repetitions, "reps", 0, "runs per target, alternating between targets (default 3)")
	fs.IntVar(&o.Concurrency, "c", 0, "memcaslap concurrency (default 8)")
	fs.IntVar(&o.ValueSize, "value-size", 0, "value bytes (default 400)")
	fs.IntVar(&o.MemoryMB, "m", 0, "memory limit of both servers in MB (default 1024)")
	jsonOut := fs.Bool("json", false, "print the report as JSON")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	return runReport(fs, *jsonOut, stdout, stderr, func(ctx context.Context, self string, progress io.Writer) (report, error) {
		o.KeywayBinary, o.Out = self, progress
		return bench.RunMemcache(ctx, o)
	})
}

func benchSQL(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("keyway bench sql", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := bench.SQLOptions{}
	fs.DurationVar(&o.Duration, "duration", 0, "length of each run, whole seconds (default 10s)")
	fs.IntVar(&o.Repetitions, "reps", 0, "runs per target, alternating direct and keyway (default 3)")
	fs.Func("threads", "comma-separated sysbench thread `counts`, one case each (default 1,4,8)", intList(&o.Threads))
	fs.Func("workloads", "comma-separated sysbench `scripts` (default oltp_point_select,oltp_read_only)", func(s string) error {
		for _, f := range strings.Split(s, ",") {
			o.Workloads = append(o.Workloads, strings.TrimSpace(f))
		}
		return nil
	})
	fs.IntVar(&o.Tables, "tables", 0, "sysbench --tables (default 4)")
	fs.IntVar(&o.TableSize, "table-size", 0, "sysbench --table-size, rows per table (default 10000)")
	fs.BoolVar(&o.BackendTCP, "backend-tcp", false, "keyway reaches MariaDB over loopback TCP instead of its unix socket")
	jsonOut := fs.Bool("json", false, "print the report as JSON")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	return runReport(fs, *jsonOut, stdout, stderr, func(ctx context.Context, self string, progress io.Writer) (report, error) {
		o.KeywayBinary, o.Out = self, progress
		return bench.RunSQL(ctx, o)
	})
}

func benchKV(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("keyway bench kv", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := bench.KVOptions{}
	fs.DurationVar(&o.Duration, "duration", 0, "length of each fetch run (default 5s); a load run is the pairs' writes")
	fs.IntVar(&o.Repetitions, "reps", 0, "runs per target, alternating between targets (default 3)")
	fs.IntVar(&o.Pairs, "pairs", 0, "key-value pairs (default 10000)")
	fs.IntVar(&o.KeySize, "key-size", 0, "key bytes (default 10)")
	fs.IntVar(&o.ValueSize, "value-size", 0, "value bytes (default 40)")
	fs.Func("c", "comma-separated load client `counts`, one case each (default 1,4,8,16)", intList(&o.LoadConcurrency))
	fs.IntVar(&o.FetchConcurrency, "fetch-c", 0, "fetch clients (default 8)")
	jsonOut := fs.Bool("json", false, "print the report as JSON")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	return runReport(fs, *jsonOut, stdout, stderr, func(ctx context.Context, self string, progress io.Writer) (report, error) {
		o.KeywayBinary, o.Out = self, progress
		return bench.RunKV(ctx, o)
	})
}

func benchStaleness(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("keyway bench staleness", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := bench.StalenessOptions{}
	fs.IntVar(&o.Writes, "writes", 0, "direct commits measured (default 300)")
	fs.IntVar(&o.Readers, "readers", 0, "clients polling through keyway (default 4)")
	jsonOut := fs.Bool("json", false, "print the report as JSON")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	return runReport(fs, *jsonOut, stdout, stderr, func(ctx context.Context, self string, progress io.Writer) (report, error) {
		o.KeywayBinary, o.Out = self, progress
		return bench.RunStaleness(ctx, o)
	})
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

// report is what a benchmark returns: a table for people, JSON for machines.
type report interface{ WriteText(io.Writer) }

// runReport runs one benchmark with this binary as the keyway under test,
// progress on stderr (unless JSON is asked for), and prints its report.
func runReport(fs *flag.FlagSet, jsonOut bool, stdout, stderr io.Writer,
	run func(ctx context.Context, self string, progress io.Writer) (report, error)) int {
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "%s: unexpected argument %q: it takes flags only\n", fs.Name(), fs.Arg(0))
		return 2
	}
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintf(stderr, "keyway bench: cannot find own binary: %v\n", err)
		return 1
	}
	progress := stderr
	if jsonOut {
		progress = nil
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := run(ctx, self, progress)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", fs.Name(), err)
		return 1
	}
	if jsonOut {
		return writeJSON(stdout, rep)
	}
	rep.WriteText(stdout)
	return 0
}

func writeJSON(w io.Writer, v any) int {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return 1
	}
	return 0
}
