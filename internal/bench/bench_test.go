package bench

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/keywaydb/keyway/internal/testenv"
)

const sampleOutput = `servers: 127.0.0.1:22122
threads count: 2
concurrency: 8
run time: 3s
windows size: 10k
set proportion: set_prop=0.10
get proportion: get_prop=0.90
cmd_get: 523516
cmd_set: 58173
get_misses: 0
written_bytes: 64567780
read_bytes: 254367718
object_bytes: 26992272

Run time: 3.0s Ops: 581689 TPS: 193883 Net_rate: 101.4M/s
`

func TestParseMemcaslap(t *testing.T) {
	s, err := parseMemcaslap([]byte(sampleOutput))
	if err != nil {
		t.Fatal(err)
	}
	want := memcaslapSummary{tps: 193883, ops: 581689, seconds: 3, gets: 523516, sets: 58173}
	if s != want {
		t.Fatalf("parse = %+v, want %+v", s, want)
	}
	if _, err := parseMemcaslap([]byte("servers: x\n")); err == nil {
		t.Fatal("output without a summary parsed")
	}
	if _, err := parseMemcaslap([]byte("Run time: 1.0s Ops: 0 TPS: 0 Net_rate: 0.0M/s\n")); err == nil {
		t.Fatal("a run with zero ops parsed as a result")
	}
}

func TestMemcaslapThreads(t *testing.T) {
	for _, c := range []struct{ cpus, conc, want int }{
		{2, 8, 2}, {2, 3, 1}, {2, 1, 1}, {4, 6, 3}, {8, 8, 8}, {1, 8, 1},
	} {
		if got := memcaslapThreads(c.cpus, c.conc); got != c.want {
			t.Errorf("memcaslapThreads(%d, %d) = %d, want %d", c.cpus, c.conc, got, c.want)
		}
	}
}

func TestSummaryAndReport(t *testing.T) {
	r := Result{Target: "memcached", Series: Series{Runs: []float64{300, 100, 200}}}
	r.summarize()
	if r.Min != 100 || r.Median != 200 || r.Max != 300 {
		t.Fatalf("summarize = %+v", r)
	}
	k := Result{Target: "keyway-memory", Series: Series{Runs: []float64{50, 150}}}
	k.summarize()
	if k.Median != 100 {
		t.Fatalf("even median = %v, want 100", k.Median)
	}
	results := []Result{r, k}
	rep := &MemcacheReport{Results: results, Ratios: ratios(results, "memcached")}
	if got := rep.Ratios["memory/memcached"]; got != 0.5 {
		t.Fatalf("ratio = %v, want 0.5 (map %v)", got, rep.Ratios)
	}
	var b bytes.Buffer
	rep.WriteText(&b)
	for _, want := range []string{"median", "keyway-memory", "0.50", "1.00"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, b.String())
		}
	}
}

func TestValidateReportsEverything(t *testing.T) {
	o := MemcacheOptions{Duration: 1500 * time.Millisecond, Repetitions: -1, SetRatio: 2}
	o.EnsureDefaults()
	err := o.Validate()
	if err == nil {
		t.Fatal("invalid options validated")
	}
	for _, want := range []string{"duration", "repetitions", "set ratio"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %s", err, want)
		}
	}
}

// TestMemcaslapAgainstMemcached runs the real load generator for one second
// against a real memcached and checks that a throughput was measured.
func TestMemcaslapAgainstMemcached(t *testing.T) {
	testenv.Need(t, "memcached")
	testenv.Need(t, "memcaslap")
	o := MemcacheOptions{Duration: time.Second, Repetitions: 1, MemoryMB: 64}
	o.EnsureDefaults()
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	ml, err := newMemcaslap(o)
	if err != nil {
		t.Fatal(err)
	}
	defer ml.close()
	var progress bytes.Buffer
	results, err := runTargets(context.Background(), []target{memcachedStarter("64")}, 1, ml.run, meter{client: loadGenerator("memcaslap")}, &progress, nil, "memcache")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s", progress.String())
	if len(results) != 1 || len(results[0].Runs) != 1 {
		t.Fatalf("results = %+v, want one target with one run", results)
	}
	if r := results[0]; r.Runs[0] <= 0 || r.Median != r.Runs[0] {
		t.Fatalf("result = %+v, want a positive ops/s", r)
	}
	// The run's CPU per op: memcached's from /proc, memcaslap's as the child it was; both did work.
	c := results[0].CPU
	if c == nil || len(c.Processes) != 2 || c.Processes[0].Process != "memcached" || c.Processes[1].Process != "memcaslap" {
		t.Fatalf("CPU = %+v, want memcached's and memcaslap's", c)
	}
	for _, p := range c.Processes {
		if p.MicrosPerOp.Median <= 0 {
			t.Errorf("%s: %.2f µs per op, want some", p.Process, p.MicrosPerOp.Median)
		}
	}
}
