package bench

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/keywaydb/keyway/internal/config"
)

// The configuration keyway-replicas serves with: the replicas and read_from reach the group, the cache stays off.
func TestKeywaySQLConfigReplicas(t *testing.T) {
	text := keywaySQLConfig("/tmp/p.sock", false, keywayLimits{replicas: []string{"/tmp/r1.sock", "127.0.0.1:3307"}, readFrom: "replicas"})
	c, err := config.Parse([]byte(text))
	if err != nil {
		t.Fatalf("%v\n%s", err, text)
	}
	g := c.Groups[0]
	if !c.Cache.Disabled || g.ReadFrom != config.ReadReplicas || len(g.Replicas) != 2 ||
		g.Replicas[0].Address != "/tmp/r1.sock" || g.Replicas[1].Address != "127.0.0.1:3307" {
		t.Fatalf("cache disabled %v, group %+v", c.Cache.Disabled, g)
	}
	c, err = config.Parse([]byte(keywaySQLConfig("/tmp/p.sock", false, keywayLimits{readFrom: "primary"})))
	if err != nil {
		t.Fatal(err)
	}
	if g := c.Groups[0]; len(g.Replicas) != 0 || g.ReadFrom != "primary" {
		t.Fatalf("group %+v", g)
	}
}

func TestReplicasOptions(t *testing.T) {
	var o ReplicasOptions
	o.EnsureDefaults()
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	if o.Duration != 10*time.Second || o.Repetitions != 3 || len(o.Threads) != 1 || o.Threads[0] != 8 || o.Writers != 8 ||
		strings.Join(o.Workloads, ",") != "oltp_read_only,oltp_read_write" {
		t.Fatalf("defaults = %+v", o)
	}
	if runs, _ := o.Plan(); runs != 2*3*3+2*3 {
		t.Errorf("plan: %d runs, want 24", runs)
	}
	o = ReplicasOptions{Duration: 1500 * time.Millisecond, Workloads: []string{"many_clients"}, Writers: -1, Threads: []int{0}}
	o.EnsureDefaults()
	err := o.Validate()
	if err == nil {
		t.Fatal("invalid options validated")
	}
	for _, want := range []string{"duration", `workload "many_clients"`, "writers -1", "threads 0"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %s", err, want)
		}
	}
}

func TestAddShares(t *testing.T) {
	var shares []ServerShare
	names := []string{"primary", "replica1", "replica2"}
	addShares(&shares, names, []float64{0, 30, 10})
	addShares(&shares, names, []float64{0, 0, 0}) // nothing read: no share, not a division by zero
	summarizeShares(shares)
	if len(shares) != 3 || shares[1].Share.Runs[0] != 0.75 || shares[2].Share.Runs[0] != 0.25 || shares[0].Share.Runs[1] != 0 {
		t.Fatalf("shares = %+v", shares)
	}
	if got := sharesText(shares); got != "primary 0% replica1 38% replica2 12%" {
		t.Errorf("text = %q", got)
	}
}

// A replicas report prints every part, and its JSON is read back as the replicas suite's.
func TestReplicasReport(t *testing.T) {
	res := func(target string, qps float64) Result {
		r := Result{Target: target, Series: Series{Runs: []float64{qps}}, P95: &Series{Runs: []float64{1.5}}}
		r.summarize()
		return r
	}
	results := []Result{res(directTarget, 1000), res(kwPrimaryTarget, 500), res(kwReplicasTarget, 400)}
	c := newSQLCase("oltp_read_only", 8, results)
	c.Ratios = map[string]float64{kwPrimaryTarget: 0.5, kwReplicasTarget: 0.4}
	work := ReplicasWork{Workload: "oltp_read_only", Threads: 8}
	for _, tg := range replicasTargets {
		tw := TargetWork{Target: tg, Errors: Series{Runs: []float64{0}}}
		addShares(&tw.Servers, []string{"primary", "replica1", "replica2"}, []float64{0, 1, 1})
		tw.summarize()
		work.Targets = append(work.Targets, tw)
	}
	ryw := &ReadYourWrites{Writers: 8, Delayed: "replica2", Load: "loop",
		Results: []Result{res(kwPrimaryTarget, 100), res(kwReplicasTarget, 90)},
		Targets: []RYWTarget{{Target: kwPrimaryTarget, Violations: Series{Runs: []float64{0, 0}}}, {Target: kwReplicasTarget, Violations: Series{Runs: []float64{1, 2}}}}}
	rep := &ReplicasReport{Server: "MariaDB 10.11", Members: []string{"primary a", "replica1 b", "replica2 c"}, RowsCounter: "Rows_read",
		SQL: &SQLReport{Load: "sysbench", Cases: []SQLCase{c}}, Work: []ReplicasWork{work}, ReadYourWrites: ryw,
		Promotions: &Promotions{Writers: 4, Replicated: "asynchronous", Switchover: Promotion{Acked: 100, Pause: 250 * time.Millisecond},
			Failover:         Promotion{Acked: 90, Errors: 4, Lost: 1, Pause: 1200 * time.Millisecond},
			SemiSyncFailover: &Promotion{Acked: 80, Errors: 3, Pause: 900 * time.Millisecond}}}
	var b bytes.Buffer
	rep.WriteText(&b)
	out := b.String()
	for _, want := range []string{"keyway-replicas", "0.40", "Rows_read per server", "primary 0% replica1 50% replica2 50%",
		"read-your-writes", "longest write 250ms", "kill to first write acknowledged 1.2s",
		"kill to first write acknowledged 900ms", "semi-synchronous replication (AFTER_SYNC)"} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
	if !strings.Contains(out, "keyway-replicas     1           90              90           90           3       0") {
		t.Errorf("violations are not summed over the runs:\n%s", out)
	}

	file := filepath.Join(t.TempDir(), "replicas.json")
	j, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, j, 0o644); err != nil {
		t.Fatal(err)
	}
	all, err := ReadReports(file)
	if err != nil {
		t.Fatal(err)
	}
	if all.Replicas == nil || all.SQL != nil || all.Replicas.RowsCounter != "Rows_read" {
		t.Fatalf("read back as %+v", all)
	}
	sc := all.Scenarios()
	if len(sc) != 1 || sc[0].ID != "replicas/oltp_read_only" || len(sc[0].Cases[0].Results) != 3 {
		t.Fatalf("scenarios = %+v", sc)
	}
}
