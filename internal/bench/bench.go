// Package bench runs the load generators behind `keyway bench` and reports
// the results side by side with the real peer (memcached 1.6 for the memcache
// door).
//
// Invariants:
//   - Every run gets a freshly started server (and a fresh data directory
//     where the target has one), started through internal/testenv on free
//     loopback ports, and stopped before the next run starts, so only one
//     server competes with the load generator for the CPUs.
//   - Runs alternate between targets (repetition 1: every target, repetition
//     2: every target, ...), so drift on the machine hits all targets alike.
//   - Results are throughputs as the load generator reports them; ratios are
//     taken between medians. Nothing here asserts a speed.
package bench

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
)

// Result is one target's throughput over all repetitions.
type Result struct {
	Target           string
	Runs             []float64 // ops/s, one per repetition, in run order
	Min, Median, Max float64
}

// summarize fills Min, Median and Max from Runs.
func (r *Result) summarize() {
	if len(r.Runs) == 0 {
		return
	}
	s := slices.Clone(r.Runs)
	slices.Sort(s)
	r.Min, r.Max = s[0], s[len(s)-1]
	if n := len(s); n%2 == 1 {
		r.Median = s[n/2]
	} else {
		r.Median = (s[n/2-1] + s[n/2]) / 2
	}
}

// target is one server under test. start brings up a fresh instance and
// returns its address and a stop function that also removes whatever the
// instance owned (its data directory).
type target struct {
	name  string
	start func(ctx context.Context) (addr string, stop func() error, err error)
}

// loadFunc drives the server at addr for one run and returns its throughput
// in ops/s and a short note for the progress line.
type loadFunc func(ctx context.Context, addr string) (opsPerSec float64, note string, err error)

// runTargets runs load reps times against every target, a fresh server per
// run, alternating targets within each repetition. Progress lines go to out.
func runTargets(ctx context.Context, targets []target, reps int, load loadFunc, out io.Writer) ([]Result, error) {
	results := make([]Result, len(targets))
	for i, t := range targets {
		results[i].Target = t.name
	}
	for rep := 1; rep <= reps; rep++ {
		for i, t := range targets {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			ops, note, err := runOne(ctx, t, load, out)
			if err != nil {
				return nil, fmt.Errorf("bench: %s, repetition %d: %w", t.name, rep, err)
			}
			results[i].Runs = append(results[i].Runs, ops)
			fmt.Fprintf(out, "rep %d/%d %-14s %10.0f ops/s  %s\n", rep, reps, t.name, ops, note)
		}
	}
	for i := range results {
		results[i].summarize()
	}
	return results, nil
}

// runOne starts t, runs load against it and stops it. A failed stop after a
// good run is reported on out but does not discard the measurement.
func runOne(ctx context.Context, t target, load loadFunc, out io.Writer) (float64, string, error) {
	addr, stop, err := t.start(ctx)
	if err != nil {
		return 0, "", fmt.Errorf("start: %w", err)
	}
	ops, note, err := load(ctx, addr)
	if serr := stop(); serr != nil {
		if err != nil {
			return 0, "", fmt.Errorf("%w (and stopping it: %v)", err, serr)
		}
		fmt.Fprintf(out, "warning: %s: stop: %v\n", t.name, serr)
	}
	if err != nil {
		return 0, "", err
	}
	return ops, note, nil
}

// ratios divides every target's median by the baseline's median. A key is the
// target name without its "keyway-" prefix, then "/", then the baseline name:
// "memory/memcached".
func ratios(results []Result, baseline string) map[string]float64 {
	var base float64
	for _, r := range results {
		if r.Target == baseline {
			base = r.Median
		}
	}
	m := make(map[string]float64)
	if base <= 0 {
		return m
	}
	for _, r := range results {
		if r.Target == baseline {
			continue
		}
		m[ratioKey(r.Target, baseline)] = r.Median / base
	}
	return m
}

func ratioKey(target, baseline string) string {
	return strings.TrimPrefix(target, "keyway-") + "/" + baseline
}

// writeTable prints results as an aligned table with a ratio column against
// baseline.
func writeTable(w io.Writer, results []Result, baseline string, rs map[string]float64) {
	width := len("target")
	for _, r := range results {
		width = max(width, len(r.Target))
	}
	fmt.Fprintf(w, "%-*s  %4s  %12s  %12s  %12s  %s\n", width, "target", "runs", "min ops/s", "median ops/s", "max ops/s", "median vs "+baseline)
	for _, r := range results {
		ratio := "-"
		if r.Target == baseline {
			ratio = "1.00"
		} else if v, ok := rs[ratioKey(r.Target, baseline)]; ok {
			ratio = strconv.FormatFloat(v, 'f', 2, 64)
		}
		fmt.Fprintf(w, "%-*s  %4d  %12s  %12s  %12s  %s\n", width, r.Target, len(r.Runs),
			formatOps(r.Min), formatOps(r.Median), formatOps(r.Max), ratio)
	}
}

func formatOps(v float64) string { return strconv.FormatFloat(v, 'f', 0, 64) }
