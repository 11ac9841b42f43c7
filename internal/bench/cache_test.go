package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/keywaydb/keyway/internal/testenv"
)

// TestRunCache runs a tiny cache bench end to end and checks that every part measured something and that the text
// report has every table and target (behaviour, not speed: no figure is compared with a target).
func TestRunCache(t *testing.T) {
	if testing.Short() {
		t.Skip("starts MariaDB, memcached and keyway")
	}
	for _, c := range []string{"sysbench", "php", "memcached", "mariadbd", "mariadb-install-db"} {
		testenv.Need(t, c)
	}
	bin, err := testenv.KeywayBinary()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var progress bytes.Buffer
	rep, err := RunCache(ctx, CacheOptions{
		KeywayBinary:  bin,
		Duration:      time.Second,
		Repetitions:   1,
		Threads:       []int{1},
		TableSize:     100,
		Loops:         200,
		Keys:          300,
		RestartWindow: time.Second,
		Writes:        20,
		Out:           &progress,
	})
	if err != nil {
		t.Fatalf("RunCache: %v\n%s", err, progress.String())
	}
	if rep.SQL == nil || len(rep.SQL.Cases) != 1 {
		t.Fatalf("sql part = %+v, want one case", rep.SQL)
	}
	var got []string
	for _, r := range rep.SQL.Cases[0].Results {
		got = append(got, r.Target)
		if r.Median <= 0 {
			t.Errorf("sysbench %s: %+v, want a positive run", r.Target, r)
		}
	}
	if strings.Join(got, ",") != "direct,keyway,kw-nocache" {
		t.Errorf("sysbench targets %v, want direct, keyway and kw-nocache (no haproxy)", got)
	}
	if len(rep.PHP) != len(phpQueries) {
		t.Fatalf("php cases = %d, want %d", len(rep.PHP), len(phpQueries))
	}
	for _, c := range rep.PHP {
		for i, r := range c.Results {
			if r.Target != phpTargets[i] || len(r.Runs) != 1 || r.Median <= 0 {
				t.Errorf("%s: result %d = %+v, want %s with one positive run", c.Query, i, r, phpTargets[i])
			}
		}
		if c.Ratios[ratioKey(phpCachedTarget, directTarget)] <= 0 {
			t.Errorf("%s: no cached/direct ratio: %v", c.Query, c.Ratios)
		}
	}
	// The 6-row table is cacheable with the hint: keyway answered from its cache.
	if h := rep.PHP[1].Hits[phpCachedTarget]; len(h) != 1 || h[0] <= 0 {
		t.Errorf("%s: keyway's cache hits %v, want some", rep.PHP[1].Query, h)
	}
	if st := rep.Staleness; st == nil || st.Writes != 20 || st.MaxMS < st.P50MS {
		t.Errorf("staleness = %+v", st)
	}
	// A write keyway never served fresh is reported, not fatal to the bench (what keyway must guarantee is tested
	// where it is built).
	if st := rep.Staleness; st != nil && st.Unseen > 0 {
		var b bytes.Buffer
		st.WriteText(&b)
		if !strings.Contains(b.String(), "STALE: ") {
			t.Errorf("%d unseen writes, not reported:\n%s", st.Unseen, b.String())
		}
		t.Logf("keyway served %d of %d direct writes stale until the readers stopped", st.Unseen, st.Writes)
	}
	if len(rep.Restart) != 2 {
		t.Fatalf("restart results = %+v, want keyway-warm and memcached-cold", rep.Restart)
	}
	for i, rr := range rep.Restart {
		if rr.Target != restartTargets[i] || len(rr.Seconds) != 1 || len(rr.Seconds[0]) != 1 || rr.QPS.Median <= 0 {
			t.Errorf("restart %d = %+v, want %s with one second of reads", i, rr, restartTargets[i])
		}
		if rr.Hit.Median < 0 || rr.Hit.Median > 1 {
			t.Errorf("%s: hit ratio %v", rr.Target, rr.Hit.Median)
		}
	}
	// The warm-up filled keyway's cache before the restart (what the restart keeps is the lead's to build, and the
	// bench only reports it).
	if e := rep.Restart[0].EntriesBefore; len(e) != 1 || e[0] <= 0 {
		t.Errorf("keyway's cache entries before the restart = %v, want some", e)
	}
	var text bytes.Buffer
	rep.WriteText(&text)
	for _, want := range []string{"1. sysbench", "2. seed 003", "SELECT 2", "SELECT * FROM test.t1", "cached/direct",
		"3. staleness", "target ≤ 10 ms", "4. seed 002", "first second hit ratio", "1s hit ratio", "keyway-warm",
		"memcached-cold", "target ≥ 0.95"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("text report lacks %q", want)
		}
	}
	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatalf("JSON: %v", err)
	}
	// `keyway bench cache --json` reads back as the report's cache suite, and the page draws it.
	file := filepath.Join(t.TempDir(), "cache.json")
	if err := os.WriteFile(file, b, 0o644); err != nil {
		t.Fatal(err)
	}
	all, err := ReadReports(file)
	if err != nil || all.Cache == nil || len(all.Cache.Restart) != 2 || all.SQL != nil {
		t.Fatalf("ReadReports(cache.json) = %+v, %v; want the cache suite alone", all, err)
	}
	var ids []string
	for _, s := range all.Scenarios() {
		ids = append(ids, s.ID)
	}
	if want := "cache/oltp_point_select,cache/php SELECT 2,cache/php SELECT * FROM test.t1"; strings.Join(ids, ",") != want {
		t.Errorf("scenarios %q, want %s", ids, want)
	}
	var page bytes.Buffer
	if err := all.WriteHTML(&page); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Cache: sysbench oltp_point_select", "seed 003", "Cache: staleness under load and a restart",
		"keyway-warm", "memcached-cold"} {
		if !strings.Contains(page.String(), want) {
			t.Errorf("page lacks %q", want)
		}
	}
	if changes := Compare(all, all); Regressions(changes) != 0 || len(changes) == 0 {
		t.Errorf("the report compared with itself: %d figures, %d regressions", len(changes), Regressions(changes))
	}
	t.Logf("\n%s", text.String())
}

func TestCacheOptionsValidate(t *testing.T) {
	o := CacheOptions{Loops: -1, Keys: -1, RestartWindow: 1500 * time.Millisecond, Threads: []int{0}}
	o.EnsureDefaults()
	err := o.Validate()
	if err == nil {
		t.Fatal("invalid options validated")
	}
	for _, want := range []string{"loops", "keys", "restart window", "threads 0"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %s", err, want)
		}
	}
	o = CacheOptions{}
	o.EnsureDefaults()
	if err := o.Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	if runs, _ := o.Plan(); runs != 3*3*3+2*3*3+1+2*3 {
		t.Errorf("plan = %d runs", runs)
	}
}

// A staleness run with writes never read says so in the text and on the page.
func TestStalenessReportUnseen(t *testing.T) {
	st := &StalenessReport{Writes: 20, Reads: 100, P50MS: 1, P99MS: 2000, MaxMS: 2000, Guarantee: "max_staleness 1s", Unseen: 1}
	var b bytes.Buffer
	st.WriteText(&b)
	if !strings.Contains(b.String(), "STALE: 1 of 20 writes") {
		t.Errorf("text lacks the unseen write:\n%s", b.String())
	}
	var page bytes.Buffer
	for _, r := range []*Report{{Staleness: st}, {Cache: &CacheReport{Staleness: st}}} {
		page.Reset()
		if err := r.WriteHTML(&page); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(page.String(), "STALE: 1 of 20 writes") {
			t.Errorf("page lacks the unseen write")
		}
	}
	st.Unseen = 0
	b.Reset()
	st.WriteText(&b)
	if strings.Contains(b.String(), "STALE") {
		t.Errorf("no unseen write, yet:\n%s", b.String())
	}
}
