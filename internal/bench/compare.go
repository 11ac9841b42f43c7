package bench

import (
	"fmt"
	"io"
	"strconv"
	"strings"
)

// Verdict is how a figure moved between two reports, judged against the noise the old report saw.
type Verdict string

const (
	// Regression: the new median is outside the old min–max band on the bad side (below it for a throughput,
	// above it for a latency). A median merely worse, but inside the band, is within the noise.
	Regression  Verdict = "REGRESSION"
	Improvement Verdict = "improved"
	WithinNoise Verdict = "within noise"
	OnlyOld     Verdict = "only in old"
	OnlyNew     Verdict = "only in new"
)

// Change is one figure (a target's throughput or latency percentile at one concurrency of a scenario) in both
// reports.
type Change struct {
	Figure   string // "sql/oltp_point_select threads=4 keyway queries/s"
	Old, New Series // zero where the figure is missing
	Verdict  Verdict
}

// figure is one comparable number of a report.
type figure struct {
	key            string
	series         Series
	higherIsBetter bool
}

// figures lists every throughput and latency percentile in r, in report order.
func figures(r *Report) []figure {
	var out []figure
	for _, s := range r.Scenarios() {
		for _, c := range s.Cases {
			at := fmt.Sprintf("%s %s=%d", s.ID, s.Clients, c.Concurrency)
			for _, res := range c.Results {
				out = append(out, figure{at + " " + res.Target + " " + s.Unit, res.Series, true})
				// Counts where the load keeps them (the SQL client cases): fewer is better.
				if e := res.Errors; e != nil {
					out = append(out, figure{at + " " + res.Target + " 1040 errors", e.TooMany, false},
						figure{at + " " + res.Target + " timeouts", e.Timeouts, false},
						figure{at + " " + res.Target + " other errors", e.Other, false})
				}
				if b := res.BackendConns; b != nil {
					out = append(out, figure{at + " " + res.Target + " MariaDB connections", *b, false})
				}
			}
			for _, l := range c.Latency {
				for _, p := range l.Percentiles {
					out = append(out, figure{at + " " + l.Target + " " + p.Name + " ms", p.Series, false})
				}
			}
		}
		// The statement costs fitted over the cases (lone_client): fewer µs is better.
		for _, f := range s.Fit {
			out = append(out, figure{s.ID + " " + f.Target + " µs a statement", f.PerStatement, false},
				figure{s.ID + " " + f.Target + " µs connect + close", f.Connect, false})
			if f.Added != nil {
				out = append(out, figure{s.ID + " " + f.Target + " µs added a statement", *f.Added, false})
			}
		}
	}
	if st := r.Staleness; st != nil {
		// One measurement each: its band is the value itself.
		for _, p := range []struct {
			name string
			v    float64
		}{{"p50", st.P50MS}, {"p99", st.P99MS}, {"max", st.MaxMS}} {
			out = append(out, figure{"staleness " + p.name + " ms", Series{Runs: []float64{p.v}, Min: p.v, Median: p.v, Max: p.v}, false})
		}
	}
	if c := r.Cache; c != nil {
		if st := c.Staleness; st != nil {
			out = append(out, figure{"cache/staleness p99 ms", Series{Runs: []float64{st.P99MS}, Min: st.P99MS, Median: st.P99MS, Max: st.P99MS}, false})
		}
		for _, rr := range c.Restart {
			out = append(out, figure{"cache/restart " + rr.Target + " first-second hit ratio", rr.FirstHit, true},
				figure{"cache/restart " + rr.Target + " qps", rr.QPS, true})
		}
	}
	return out
}

// Compare lines up every figure of old and new, in new's order, then figures only old has.
func Compare(old, new *Report) []Change {
	olds := map[string]figure{}
	for _, f := range figures(old) {
		olds[f.key] = f
	}
	var out []Change
	seen := map[string]bool{}
	for _, f := range figures(new) {
		seen[f.key] = true
		o, ok := olds[f.key]
		if !ok {
			out = append(out, Change{Figure: f.key, New: f.series, Verdict: OnlyNew})
			continue
		}
		out = append(out, Change{Figure: f.key, Old: o.series, New: f.series, Verdict: judge(o.series, f.series, f.higherIsBetter)})
	}
	for _, f := range figures(old) {
		if !seen[f.key] {
			out = append(out, Change{Figure: f.key, Old: f.series, Verdict: OnlyOld})
		}
	}
	return out
}

// judge places new's median against old's min–max band.
func judge(old, new Series, higherIsBetter bool) Verdict {
	below, above := new.Median < old.Min, new.Median > old.Max
	switch {
	case higherIsBetter && below, !higherIsBetter && above:
		return Regression
	case higherIsBetter && above, !higherIsBetter && below:
		return Improvement
	}
	return WithinNoise
}

// Regressions counts the changes judged regressions.
func Regressions(changes []Change) int {
	n := 0
	for _, c := range changes {
		if c.Verdict == Regression {
			n++
		}
	}
	return n
}

// WriteChanges prints one line per figure: old median [min–max], new median [min–max], the change of the median
// and the verdict.
func WriteChanges(w io.Writer, changes []Change) {
	width := len("figure")
	for _, c := range changes {
		width = max(width, len(c.Figure))
	}
	fmt.Fprintf(w, "%-*s  %26s  %26s  %8s  %s\n", width, "figure", "old median [min–max]", "new median [min–max]", "change", "verdict")
	for _, c := range changes {
		old, new, change := "-", "-", ""
		if c.Verdict != OnlyNew {
			old = band(c.Old)
		}
		if c.Verdict != OnlyOld {
			new = band(c.New)
		}
		if c.Verdict != OnlyNew && c.Verdict != OnlyOld && c.Old.Median != 0 {
			change = fmt.Sprintf("%+.1f%%", (c.New.Median/c.Old.Median-1)*100)
		}
		line := fmt.Sprintf("%-*s  %26s  %26s  %8s  %s", width, c.Figure, old, new, change, c.Verdict)
		fmt.Fprintln(w, strings.TrimRight(line, " "))
	}
	n, single := Regressions(changes), 0
	for _, c := range changes {
		if c.Verdict != OnlyNew && len(c.Old.Runs) < 2 {
			single++
		}
	}
	fmt.Fprintf(w, "%d figures, %d regressions beyond the old min–max band\n", len(changes), n)
	if single > 0 {
		fmt.Fprintf(w, "%d figures had one old run: their band is that run, which shows no noise; run with --reps 3 or more to judge\n", single)
	}
}

func band(s Series) string {
	return fmtFigure(s.Median) + " [" + fmtFigure(s.Min) + "–" + fmtFigure(s.Max) + "]"
}

// fmtFigure prints throughputs whole and latencies (small numbers) with 3 significant decimals.
func fmtFigure(v float64) string {
	if v >= 100 {
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	return strconv.FormatFloat(v, 'g', 3, 64)
}

// MachineDifferences names what differs between the machines of two reports, other than keyway itself: a change
// there (CPUs, kernel, a peer's version) can move every figure, which compare cannot tell from keyway's doing.
// Reports drawn from suite files alone carry the machine the report was drawn on, not the one they ran on.
func MachineDifferences(old, new Machine) []string {
	var out []string
	for _, f := range []struct{ name, a, b string }{
		{"CPUs", strconv.Itoa(old.CPUs), strconv.Itoa(new.CPUs)},
		{"CPU", old.CPUModel, new.CPUModel},
		{"kernel", old.Kernel, new.Kernel},
		{"memcached", old.Memcached, new.Memcached},
		{"MariaDB", old.MariaDB, new.MariaDB},
		{"sysbench", old.Sysbench, new.Sysbench},
		{"memcaslap", old.Memcaslap, new.Memcaslap},
	} {
		if f.a != f.b {
			out = append(out, fmt.Sprintf("%s: %s → %s", f.name, f.a, f.b))
		}
	}
	return out
}
