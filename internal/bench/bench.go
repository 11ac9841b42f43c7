// Package bench runs the load generators behind `keyway bench` and reports
// the results side by side with the real peers: memcached 1.6 for the memcache
// door (memcache: memcaslap), MariaDB direct and haproxy as a plain relay for
// the SQL door (sql: sysbench, then many clients of one select a second each,
// PHP's connect + close, and one PHP client's pages of point selects on a
// connection each), MariaDB and memcached for the containers (kv),
// and the consistent cache against what it replaces (cache, staleness).
//
// Invariants:
//   - Every run gets a freshly started server (and a fresh data directory
//     where the target has one), started through internal/peers on free
//     loopback ports, and stopped before the next run starts, so only one
//     server competes with the load generator for the CPUs. The exception is
//     the MariaDB that targets read through (and the kv suite's memcached):
//     it is started once per bench, so every target reads the same data from
//     the same warm buffer pool; the keyway in front of it is fresh per run.
//   - Runs alternate between targets (repetition 1: every target, repetition
//     2: every target, ...), so drift on the machine hits all targets alike.
//   - Results are throughputs (and latency percentiles, where the load
//     generator reports them) as the load generator reports them; ratios are
//     taken between medians. Nothing here asserts a speed. Each run also
//     meters the CPU its processes used per operation (the target's, the
//     shared MariaDB's, the load generator's: cpuMeter), so that a ratio on
//     shared CPUs can be read as what each side spent.
//
// Report gathers the suites' results (run now, or read back from their
// --json) with the machine they ran on, and draws them as one self-contained
// HTML page (charts from internal/chart, inline); Compare judges two reports
// figure by figure. Both keep to what was measured: a latency percentile the
// load generator did not report is neither charted nor compared, and a
// difference inside the old min–max band is called noise, not a change.
package bench

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"slices"
	"time"

	"github.com/keywaydb/keyway/internal/peers"
)

// target is one server under test. start brings up a fresh instance.
type target struct {
	name  string
	start func(ctx context.Context) (running, error)
}

// running is a started instance: its address, a stop function that also removes whatever the instance owned (its
// data directory), and its processes, whose CPU is metered while the load runs.
type running struct {
	addr  string
	stop  func() error
	procs []cpuProc
}

// sample is what one run measured.
type sample struct {
	ops    float64 // throughput, ops/s as the load generator counts them
	n      int64   // operations the load generator counted (0: unknown, taken as ops/s over the run's time)
	p95    float64 // 95th-percentile latency in ms, if hasP95
	hasP95 bool    // the load generator reports latency (sysbench does, memcaslap does not)
	note   string  // a short note for the progress line
	// p50 and p99 latency in ms, if hasP50P99 (many_clients measures each select)
	p50, p99  float64
	hasP50P99 bool
	errs      *runErrors     // the failures, where the load counts them (many_clients, connect_only); else nil
	clients   *clientsSample // many_clients' connections; else nil
	// the share of the statements keyway's result cache answered, if hasHits (lone_client, on keyway)
	hits    float64
	hasHits bool
	// CPU per operation by process, and the CPUs' busy share, over the run (nil when not measured)
	cpu  []procCPU
	busy float64
}

// loadFunc drives the server at addr for one run.
type loadFunc func(ctx context.Context, addr string) (sample, error)

// meter says whose CPU runTargets meters in each run besides the target's own processes: the load generator, a
// command the load runs and waits for (see cpuMeter), and the servers every target reaches (one MariaDB).
type meter struct {
	client cpuProc
	shared []cpuProc
}

// namedByAddr returns targets that file each run's address under their name in byAddr when they start, so that a
// load, which sees only the address, can file what it measured by target.
func namedByAddr(byAddr map[string]string, targets ...target) []target {
	out := make([]target, len(targets))
	for i, t := range targets {
		start := t.start
		t.start = func(ctx context.Context) (running, error) {
			r, err := start(ctx)
			if err == nil {
				byAddr[r.addr] = t.name
			}
			return r, err
		}
		out[i] = t
	}
	return out
}

// runTargets runs load reps times against every target, a fresh server per
// run, alternating targets within each repetition. Result lines go to out;
// prog (nil for none) shows scenario, round and target while each runs.
func runTargets(ctx context.Context, targets []target, reps int, load loadFunc, m meter, out io.Writer, prog *Progress, scenario string) ([]Result, error) {
	results := make([]Result, len(targets))
	for i, t := range targets {
		results[i].Target = t.name
	}
	for rep := 1; rep <= reps; rep++ {
		for i, t := range targets {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			prog.Start(scenario, rep, reps, t.name)
			s, err := runOne(ctx, t, load, m, out)
			prog.Done()
			if err != nil {
				return nil, fmt.Errorf("bench: %s, repetition %d: %w", t.name, rep, err)
			}
			results[i].add(s)
			fmt.Fprintf(out, "rep %d/%d %-14s %10.0f ops/s  %s\n", rep, reps, t.name, s.ops, s.note)
			if s.cpu != nil {
				fmt.Fprintf(out, "  %s: CPU per op %s\n", t.name, runCPUText(s.cpu, s.busy, runtime.NumCPU()))
			}
		}
	}
	for i := range results {
		results[i].summarize()
	}
	return results, nil
}

// runOne starts t, runs load against it, metering the CPU m and t's processes use, and stops it. A failed stop
// after a good run is reported on out but does not discard the measurement.
func runOne(ctx context.Context, t target, load loadFunc, m meter, out io.Writer) (sample, error) {
	r, err := t.start(ctx)
	if err != nil {
		return sample{}, fmt.Errorf("start: %w", err)
	}
	cpu := startCPU(m.client, append(slices.Clip(r.procs), m.shared...)...)
	began := time.Now()
	s, err := load(ctx, r.addr)
	if err == nil {
		n := s.n
		if n <= 0 {
			n = int64(s.ops * time.Since(began).Seconds())
		}
		s.cpu, s.busy, _ = cpu.stop(int(n), runtime.NumCPU())
	}
	if serr := r.stop(); serr != nil {
		if err != nil {
			return sample{}, fmt.Errorf("%w (and stopping it: %v)", err, serr)
		}
		fmt.Fprintf(out, "warning: %s: stop: %v\n", t.name, serr)
	}
	if err != nil {
		return sample{}, err
	}
	return s, nil
}

// prepare checks that the commands a benchmark drives are installed and
// returns the keyway binary to run: bin, or one built from this module when
// bin is empty.
func prepare(bin string, commands ...string) (string, error) {
	for _, c := range commands {
		if _, err := peers.LookPath(c); err != nil {
			return "", fmt.Errorf("bench: %w", err)
		}
	}
	if bin != "" {
		return bin, nil
	}
	bin, err := peers.KeywayBinary()
	if err != nil {
		return "", fmt.Errorf("bench: no keyway binary (set the options' KeywayBinary): %w", err)
	}
	return bin, nil
}
