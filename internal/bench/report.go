package bench

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
)

// Series is one measured quantity over all repetitions.
type Series struct {
	Runs             []float64 // one per repetition, in run order
	Min, Median, Max float64
}

// summarize fills Min, Median and Max from Runs.
func (s *Series) summarize() {
	if len(s.Runs) == 0 {
		return
	}
	v := slices.Clone(s.Runs)
	slices.Sort(v)
	s.Min, s.Max = v[0], v[len(v)-1]
	if n := len(v); n%2 == 1 {
		s.Median = v[n/2]
	} else {
		s.Median = (v[n/2-1] + v[n/2]) / 2
	}
}

// Result is one target's measurements over all repetitions. Its embedded Series is the throughput in ops/s (for
// sysbench: queries/s); JSON shows its fields at the top level of the Result.
type Result struct {
	Target string
	Series
	// P95 is the 95th-percentile latency in ms per repetition, where the load generator reports one (sysbench);
	// nil otherwise (memcaslap).
	P95 *Series `json:",omitempty"`
	// P50 and P99 are latency percentiles in ms per repetition, where the load measures every operation's
	// (many_clients: the selects that were answered); nil otherwise.
	P50, P99 *Series `json:",omitempty"`
	// Errors counts what failed per repetition, where the load counts failures (many_clients, connect_only).
	Errors *ErrorCounts `json:",omitempty"`
	// Connected is how many clients held a connection when each timed run began, BackendConns the most
	// connections MariaDB had at once during it, and IdleConns those it had before the clients logged in: the
	// target's own, keyway's health check and binlog follower (many_clients).
	Connected    *Series `json:",omitempty"`
	BackendConns *Series `json:",omitempty"`
	IdleConns    *Series `json:",omitempty"`
	// CacheHits is the share of the statements keyway's result cache answered, per repetition, where the load
	// reads keyway's hit counter (lone_client, on keyway with its cache on).
	CacheHits *Series `json:",omitempty"`
	// CPU is what the runs cost the processes that served and sent them, where measured.
	CPU *CPU `json:",omitempty"`
}

// add records one run.
func (r *Result) add(s sample) {
	r.Runs = append(r.Runs, s.ops)
	if s.hasP95 {
		if r.P95 == nil {
			r.P95 = &Series{}
		}
		r.P95.Runs = append(r.P95.Runs, s.p95)
	}
	if s.hasP50P99 {
		r.P50 = appendRun(r.P50, s.p50)
		r.P99 = appendRun(r.P99, s.p99)
	}
	if s.errs != nil {
		if r.Errors == nil {
			r.Errors = &ErrorCounts{}
		}
		r.Errors.add(s.errs)
	}
	if s.clients != nil {
		r.Connected = appendRun(r.Connected, float64(s.clients.connected))
		r.BackendConns = appendRun(r.BackendConns, float64(s.clients.backendConns))
		r.IdleConns = appendRun(r.IdleConns, float64(s.clients.idleConns))
	}
	if s.hasHits {
		r.CacheHits = appendRun(r.CacheHits, s.hits)
	}
	if s.cpu != nil {
		if r.CPU == nil {
			r.CPU = &CPU{}
		}
		r.CPU.add(s.cpu, s.busy)
	}
}

// summarize fills Min, Median and Max of every series.
func (r *Result) summarize() {
	r.Series.summarize()
	if r.CPU != nil {
		r.CPU.summarize()
	}
	for _, s := range []*Series{r.P95, r.P50, r.P99, r.Connected, r.BackendConns, r.IdleConns, r.CacheHits} {
		if s != nil {
			s.summarize()
		}
	}
	if r.Errors != nil {
		r.Errors.summarize()
	}
}

// appendRun adds a run to s, making s when it is nil.
func appendRun(s *Series, v float64) *Series {
	if s == nil {
		s = &Series{}
	}
	s.Runs = append(s.Runs, v)
	return s
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

// writeCPU prints the CPU figures of the results that have them (medians).
func writeCPU(w io.Writer, results []Result) { writeCPUPer(w, results, "op") }

// writeCPUPer is writeCPU for a load whose operation has a name of its own ("page").
func writeCPUPer(w io.Writer, results []Result, op string) {
	width := 0
	for _, r := range results {
		width = max(width, len(r.Target))
	}
	for _, r := range results {
		if r.CPU != nil {
			fmt.Fprintf(w, "  %-*s  CPU per %s: %s (medians)\n", width, r.Target, op, r.CPU.text())
		}
	}
}

func formatOps(v float64) string { return strconv.FormatFloat(v, 'f', 0, 64) }
