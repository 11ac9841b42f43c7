package bench

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// result is a Result summarized from runs.
func result(target string, runs ...float64) Result {
	r := Result{Target: target, Series: Series{Runs: runs}}
	r.summarize()
	return r
}

func writeJSONFile(t *testing.T, name string, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestCompare compares two memcache runs as `keyway bench memcache --json` writes them: keyway-sync fell below the
// old min–max band (a regression), memcached's median fell but stayed inside its band (noise), keyway-memory rose
// above its band, and keyway-async is new.
func TestCompare(t *testing.T) {
	old := &MemcacheReport{Concurrency: 8, Results: []Result{
		result("memcached", 100000, 110000, 120000),
		result("keyway-memory", 90000, 95000, 100000),
		result("keyway-sync", 40000, 42000, 44000),
	}}
	new := &MemcacheReport{Concurrency: 8, Results: []Result{
		result("memcached", 101000, 104000, 119000),     // median 104000 < 110000, inside [100000, 120000]
		result("keyway-memory", 105000, 108000, 111000), // median above 100000
		result("keyway-sync", 30000, 31000, 43000),      // median 31000 below 40000
		result("keyway-async", 60000, 61000, 62000),
	}}
	oldR, err := ReadReports(writeJSONFile(t, "old.json", old))
	if err != nil {
		t.Fatal(err)
	}
	newR, err := ReadReports(writeJSONFile(t, "new.json", new))
	if err != nil {
		t.Fatal(err)
	}
	changes := Compare(oldR, newR)
	want := map[string]Verdict{
		"memcache clients=8 memcached ops/s":     WithinNoise,
		"memcache clients=8 keyway-memory ops/s": Improvement,
		"memcache clients=8 keyway-sync ops/s":   Regression,
		"memcache clients=8 keyway-async ops/s":  OnlyNew,
	}
	if len(changes) != len(want) {
		t.Errorf("%d changes, want %d: %+v", len(changes), len(want), changes)
	}
	for _, c := range changes {
		if v, ok := want[c.Figure]; !ok || v != c.Verdict {
			t.Errorf("%s: %s, want %q", c.Figure, c.Verdict, v)
		}
	}
	if n := Regressions(changes); n != 1 {
		t.Errorf("%d regressions, want 1", n)
	}
	var b bytes.Buffer
	WriteChanges(&b, changes)
	for _, line := range strings.Split(b.String(), "\n") {
		if strings.Contains(line, "keyway-sync") && !strings.Contains(line, "REGRESSION") ||
			strings.Contains(line, "memcached") && strings.Contains(line, "REGRESSION") {
			t.Errorf("wrong mark: %s", line)
		}
	}
	if !strings.Contains(b.String(), "-26.2%") { // keyway-sync: 31000 / 42000 - 1
		t.Errorf("the change of keyway-sync's median is not printed:\n%s", b.String())
	}
}

// TestCompareLatency: a latency regresses when it rises above the old band, and improves when it falls below it.
func TestCompareLatency(t *testing.T) {
	p95 := func(runs ...float64) *Series {
		s := &Series{Runs: runs}
		s.summarize()
		return s
	}
	sqlReport := func(direct, keyway *Series) *SQLReport {
		d, k := result("direct", 1000, 1000), result("keyway", 900, 900)
		d.P95, k.P95 = direct, keyway
		return &SQLReport{Cases: []SQLCase{{Workload: "oltp_point_select", Threads: 4, Results: []Result{d, k}}}}
	}
	got := verdicts(t, sqlReport(p95(1, 1.2), p95(2, 2.2)), sqlReport(p95(0.5, 0.6), p95(3, 3.1)))
	if v := got["sql/oltp_point_select threads=4 keyway p95 ms"]; v != Regression {
		t.Errorf("keyway p95 2.1 → 3.05 ms: %q, want a regression (%v)", v, got)
	}
	if v := got["sql/oltp_point_select threads=4 direct p95 ms"]; v != Improvement {
		t.Errorf("direct p95 1.1 → 0.55 ms: %q, want an improvement (%v)", v, got)
	}
}

// verdicts is Compare's verdict per figure from report old to report new, both written out and read back as
// keyway bench compare reads them.
func verdicts(t *testing.T, old, new any) map[string]Verdict {
	t.Helper()
	oldR, err := ReadReports(writeJSONFile(t, "old.json", old))
	if err != nil {
		t.Fatal(err)
	}
	newR, err := ReadReports(writeJSONFile(t, "new.json", new))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]Verdict{}
	for _, c := range Compare(oldR, newR) {
		got[c.Figure] = c.Verdict
	}
	return got
}

func TestMachineDifferences(t *testing.T) {
	a := Machine{CPUs: 2, Kernel: "6.1", Keyway: "keyway 0.1", MariaDB: "10.11"}
	b := a
	b.Keyway = "keyway 0.2" // what compare is for: not a difference to warn about
	if d := MachineDifferences(a, b); len(d) != 0 {
		t.Errorf("differences %q, want none", d)
	}
	b.CPUs, b.MariaDB = 8, "11.4"
	if d := MachineDifferences(a, b); len(d) != 2 || d[0] != "CPUs: 2 → 8" || d[1] != "MariaDB: 10.11 → 11.4" {
		t.Errorf("differences %q", d)
	}
}
