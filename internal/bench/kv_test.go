package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/keywaydb/keyway/internal/testenv"
)

// TestRunKV runs a tiny kv bench end to end and checks that every target
// measured something (behaviour, not speed).
func TestRunKV(t *testing.T) {
	if testing.Short() {
		t.Skip("starts MariaDB, memcached and keyway")
	}
	for _, c := range []string{"memcached", "mariadbd", "mariadb-install-db"} {
		testenv.Need(t, c)
	}
	bin, err := testenv.KeywayBinary()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var progress bytes.Buffer
	rep, err := RunKV(ctx, KVOptions{
		KeywayBinary:     bin,
		Pairs:            100,
		LoadConcurrency:  []int{3},
		FetchConcurrency: []int{1},
		Duration:         300 * time.Millisecond,
		Repetitions:      1,
		Out:              &progress,
	})
	if err != nil {
		t.Fatalf("RunKV: %v\n%s", err, progress.String())
	}
	if len(rep.Cases) != 2 {
		t.Fatalf("cases = %d, want a load and a fetch", len(rep.Cases))
	}
	want := [][]string{loadTargets, fetchTargets}
	for i, c := range rep.Cases {
		if len(c.Results) != len(want[i]) {
			t.Fatalf("%s: %d results, want %v", c.Phase, len(c.Results), want[i])
		}
		for j, r := range c.Results {
			if r.Target != want[i][j] || len(r.Runs) != 1 || r.Median <= 0 {
				t.Errorf("%s: result %d = %+v, want target %s with one positive run", c.Phase, j, r, want[i][j])
			}
			if l := c.Latency[j]; l.P50.Median <= 0 || l.P99.Median < l.P50.Median {
				t.Errorf("%s %s: latency p50 %v p99 %v", c.Phase, r.Target, l.P50.Median, l.P99.Median)
			}
		}
	}
	// MariaDB's counters for each target that writes the table: one autocommit INSERT is one commit per row.
	var committed []string
	for _, m := range rep.Cases[0].Commits {
		committed = append(committed, m.Target)
		if m.RowsPerCommit.Median <= 0 || m.RowsPerFsync.Median <= 0 {
			t.Errorf("%s: %+v, want rows per commit and per fsync", m.Target, m)
		}
		if m.Target == insertTarget && m.RowsPerCommit.Median != 1 {
			t.Errorf("insert: %v rows per commit, want 1", m.RowsPerCommit.Median)
		}
		// 100 pairs in 3-row statements: 33 of 3 rows and one of 1.
		if m.Target == upsertBatchTarget && m.RowsPerCommit.Median != 100.0/34 {
			t.Errorf("upsert-batch: %v rows per commit, want %v", m.RowsPerCommit.Median, 100.0/34)
		}
	}
	if want := []string{insertTarget, upsertBatchTarget, kwSetTarget, kwAsyncTarget, kwAsyncLazyTarget}; !slices.Equal(committed, want) {
		t.Errorf("commit figures for %v, want %v", committed, want)
	}
	// Every target's CPU per op, by the processes that served it and the client.
	procs := map[string][]string{insertTarget: {"mariadb", clientProc}, upsertBatchTarget: {"mariadb", clientProc}, selectTarget: {"mariadb", clientProc},
		kvMemcachedSetTarget: {"memcached", clientProc}, kvMemcachedName: {"memcached", clientProc}}
	for _, k := range []string{kwSetTarget, kwAsyncTarget, kwAsyncLazyTarget, kwGetTarget} {
		procs[k] = []string{"keyway", "mariadb", clientProc}
	}
	for _, c := range rep.Cases {
		for _, r := range c.Results {
			if r.CPU == nil {
				t.Errorf("%s %s: no CPU figures", c.Phase, r.Target)
				continue
			}
			var names []string
			for _, p := range r.CPU.Processes {
				names = append(names, p.Process)
				if len(p.MicrosPerOp.Runs) != 1 || p.MicrosPerOp.Median < 0 {
					t.Errorf("%s %s %s: %+v", c.Phase, r.Target, p.Process, p.MicrosPerOp)
				}
			}
			if !slices.Equal(names, procs[r.Target]) {
				t.Errorf("%s %s: CPU of %v, want %v", c.Phase, r.Target, names, procs[r.Target])
			}
		}
	}
	for _, k := range []string{"set/insert", "async/insert", "async-1s/insert", "async/memcached-set", "set/upsert-batch"} {
		if rep.Cases[0].Ratios[k] <= 0 {
			t.Errorf("load ratio %s missing: %v", k, rep.Cases[0].Ratios)
		}
	}
	for _, k := range []string{"get/select", "get/memcached"} {
		if rep.Cases[1].Ratios[k] <= 0 {
			t.Errorf("fetch ratio %s missing: %v", k, rep.Cases[1].Ratios)
		}
	}
	var text bytes.Buffer
	rep.WriteText(&text)
	if !strings.Contains(text.String(), "keyway-get") || !strings.Contains(text.String(), "get/memcached") ||
		!strings.Contains(text.String(), "rows per fsync") || !strings.Contains(text.String(), "CPU per op") ||
		!strings.Contains(text.String(), "answer the writers") {
		t.Errorf("text report lacks keyway-get, get/memcached, rows per fsync, CPU or the sync commit's cycle:\n%s", text.String())
	}
	if _, err := json.Marshal(rep); err != nil {
		t.Errorf("JSON: %v", err)
	}
	t.Logf("\n%s", text.String())
}

// TestSyncCycle: keyway-set's commit cycle is its rows per commit over its sets per second, and the statement's
// share what upsert-batch's statement of its own rows took.
func TestSyncCycle(t *testing.T) {
	result := func(target string, ops float64) Result { return Result{Target: target, Series: Series{Median: ops}} }
	commits := func(target string, rows float64) KVCommits {
		return KVCommits{Target: target, RowsPerCommit: Series{Median: rows}}
	}
	kc := KVCase{Phase: "load", Concurrency: 8,
		Results: []Result{result(insertTarget, 8000), result(upsertBatchTarget, 20000), result(kwSetTarget, 10000)},
		Commits: []KVCommits{commits(insertTarget, 1), commits(upsertBatchTarget, 8), commits(kwSetTarget, 7.5)}}
	got, ok := kc.syncCycle()
	if want := (syncCycle{rows: 7.5, cycle: 750, boundRows: 8, statement: 400}); !ok || got != want {
		t.Errorf("syncCycle = %+v, %v; want %+v", got, ok, want)
	}
	kc.Results = kc.Results[:2] // no keyway-set
	if _, ok := kc.syncCycle(); ok {
		t.Error("syncCycle without keyway-set's figures: ok")
	}
	if _, ok := (&KVCase{Phase: "fetch"}).syncCycle(); ok {
		t.Error("syncCycle of a fetch: ok")
	}
}

func TestKVOptionsValidate(t *testing.T) {
	o := KVOptions{Pairs: 100000, KeySize: 4, LoadConcurrency: []int{0}}
	o.EnsureDefaults()
	err := o.Validate()
	if err == nil || !strings.Contains(err.Error(), "key size 4") || !strings.Contains(err.Error(), "concurrency 0") {
		t.Fatalf("Validate = %v, want key size and concurrency errors", err)
	}
	o = KVOptions{}
	o.EnsureDefaults()
	if err := o.Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	keys, values := kvPairs(3, 10, 40)
	if len(keys[2]) != 10 || len(values[2]) != 40 || keys[0] == keys[1] {
		t.Fatalf("kvPairs: %q %q", keys, values)
	}
}
