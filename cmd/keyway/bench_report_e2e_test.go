package main

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/keywaydb/keyway/internal/bench"
	"github.com/keywaydb/keyway/internal/testenv"
)

// TestBenchReportCommand runs `keyway bench report` for real on the memcache suite, briefly, and checks what it
// writes: the page, the data, and the commands that reproduce it. The page's charts and who-wins table are checked in
// depth by internal/bench's tests.
func TestBenchReportCommand(t *testing.T) {
	if testing.Short() {
		t.Skip("starts memcached and keyway")
	}
	testenv.Need(t, "memcached")
	testenv.Need(t, "memcaslap")
	bin, err := testenv.KeywayBinary()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	out, err := exec.Command(bin, "bench", "report", "--out", dir, "--suites", "memcache", "--duration", "1s", "--reps", "1",
		"--memcache.m", "64", "--memcache.memory", "20K/100/16", "--memcache.memory-duration", "1s").Output()
	if err != nil {
		t.Fatalf("keyway bench report: %v\n%s", err, stderrOf(err))
	}
	if !strings.Contains(string(out), "memcache") || !strings.Contains(string(out), "report: "+filepath.Join(dir, "index.html")) {
		t.Errorf("output lacks the who-wins table or the page's path:\n%s", out)
	}
	page, err := os.ReadFile(filepath.Join(dir, "index.html"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(page), "<svg") {
		t.Error("index.html has no chart")
	}
	if !strings.Contains(string(page), "Memory: 20,000 items") {
		t.Error("index.html has no memory case")
	}
	rep, err := bench.ReadReports(filepath.Join(dir, "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	if rep.Memcache == nil || len(rep.Memcache.Results) != 4 || len(rep.Memcache.Memory) != 1 || rep.SQL != nil {
		t.Fatalf("report.json: %+v, want the memcache suite alone, 4 targets and one memory case", rep)
	}
	if rep.Machine.CPUs < 1 || !strings.HasPrefix(rep.Machine.Keyway, "keyway ") || !strings.HasPrefix(rep.Machine.Memcached, "memcached ") {
		t.Errorf("machine %+v", rep.Machine)
	}
	// The suite's own command, with the flags the report passed it, and the report's.
	want := "keyway bench memcache --m=64 --memory=20K/100/16 --memory-duration=1s --duration=1s --reps=1 --json > memcache.json"
	if !slices.Contains(rep.Commands, want) || !slices.ContainsFunc(rep.Commands, func(c string) bool {
		return strings.HasPrefix(c, "keyway bench report --out ")
	}) {
		t.Errorf("commands %q, want %q and the report's", rep.Commands, want)
	}
}

// TestBenchReportFromJSONAndCompare draws a report from suite JSON files and compares reports: the same figures give
// no regression (exit 0); a throughput far below the old band gives one (exit 1, marked).
func TestBenchReportFromJSONAndCompare(t *testing.T) {
	bin, err := testenv.KeywayBinary()
	if err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob("../../internal/bench/testdata/short-run/*.json")
	if len(files) != 4 {
		t.Fatalf("testdata: %v", files)
	}
	dir := t.TempDir()
	if out, err := exec.Command(bin, append([]string{"bench", "report", "--out", dir, "--json"}, files...)...).CombinedOutput(); err != nil {
		t.Fatalf("keyway bench report --json: %v\n%s", err, out)
	}
	combined := filepath.Join(dir, "report.json")

	out, err := exec.Command(bin, "bench", "compare", combined, files[0]).CombinedOutput()
	if err != nil || !strings.Contains(string(out), " 0 regressions") {
		t.Fatalf("a report compared with its own part: %v\n%s", err, out)
	}

	// The memcache suite again, keyway-sync at a tenth of its old slowest run.
	b, err := os.ReadFile("../../internal/bench/testdata/short-run/memcache.json")
	if err != nil {
		t.Fatal(err)
	}
	var mc bench.MemcacheReport
	if err := json.Unmarshal(b, &mc); err != nil {
		t.Fatal(err)
	}
	for i := range mc.Results {
		if r := &mc.Results[i]; r.Target == "keyway-sync" {
			r.Min, r.Median, r.Max = r.Min/10, r.Min/10, r.Min/10
		}
	}
	b, _ = json.Marshal(mc)
	slower := filepath.Join(t.TempDir(), "slower.json")
	if err := os.WriteFile(slower, b, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err = exec.Command(bin, "bench", "compare", combined, slower).CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("compare with a regression: %v, want exit status 1\n%s", err, out)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if strings.Contains(line, "keyway-sync") != strings.Contains(line, "REGRESSION") {
			t.Errorf("only keyway-sync regressed: %s", line)
		}
	}
}

func stderrOf(err error) string {
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return string(exit.Stderr)
	}
	return ""
}
