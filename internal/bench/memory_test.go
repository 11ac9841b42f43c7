package bench

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/keywaydb/keyway/internal/peers"
	"github.com/keywaydb/keyway/internal/testenv"
)

func TestParseMemoryCases(t *testing.T) {
	cases, err := ParseMemoryCases(DefaultMemoryCases + ",10M/100/2048,2500/7/1")
	if err != nil {
		t.Fatal(err)
	}
	want := []MemoryCase{{1_000_000, 100, 320}, {200_000, 0, 96}, {10_000_000, 100, 2048}, {2500, 7, 1}}
	if len(cases) != len(want) {
		t.Fatalf("cases = %+v, want %+v", cases, want)
	}
	for i, c := range cases {
		if c != want[i] {
			t.Errorf("case %d = %+v, want %+v", i, c, want[i])
		}
	}
	if got := strings.Join([]string{cases[0].String(), cases[1].String(), cases[3].String()}, ","); got != "1M/100/320,200K/mix/96,2500/7/1" {
		t.Errorf("String: %s", got)
	}
	if cases, err := ParseMemoryCases("none"); err != nil || cases != nil {
		t.Errorf("none: %v %v", cases, err)
	}
	for _, bad := range []string{"1M/100", "x/100/320", "1M/0/320", "1M/mixed/320", "1M/100/0", "0/100/320"} {
		if _, err := ParseMemoryCases(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// TestMixValues: the mix's sizes are the same every time, within 10 B–4 KB, and spread over that range.
func TestMixValues(t *testing.T) {
	c := MemoryCase{Items: 100_000}
	var small, large int
	for i := range c.Items {
		n := c.valueLen(i)
		if n != c.valueLen(i) || n < mixMin || n > mixMax {
			t.Fatalf("item %d: %d bytes", i, n)
		}
		if n < 100 {
			small++
		}
		if n > 1000 {
			large++
		}
	}
	// Log-uniform: ln(10)/ln(409.6) ≈ 38% under 100 B, ln(4.096)/ln(409.6) ≈ 23% over 1000 B.
	if small < 35_000 || small > 42_000 || large < 20_000 || large > 26_000 {
		t.Fatalf("%d under 100 B, %d over 1000 B of %d", small, large, c.Items)
	}
}

const memcaslapHistogram = `Total Statistics (1000 events)
   Min:        17
   Max:     17720
   Avg:       162
   Geo:    129.37
   Std:    263.25
   Log2 Dist:
       4:        0      100      300      400
       8:      180       10        5        3
      12:        1        1        0        0

cmd_get: 900
`

func TestParseMemcaslapP99(t *testing.T) {
	// 990 of 1000 lie at or below the bucket (2^8, 2^9]: its upper bound, 512 µs, is the p99.
	p99, err := parseMemcaslapP99([]byte(memcaslapHistogram))
	if err != nil || p99 != 512 {
		t.Fatalf("p99 = %v, %v; want 512", p99, err)
	}
	if _, err := parseMemcaslapP99([]byte(sampleOutput)); err == nil {
		t.Fatal("no histogram: no error")
	}
}

// TestMemoryCaseAgainstMemcached loads a small case into a real memcached and a real keyway with a data_dir and
// checks that every figure was measured and the restart brought the items back.
func TestMemoryCaseAgainstMemcached(t *testing.T) {
	if testing.Short() {
		t.Skip("starts memcached and keyway")
	}
	testenv.Need(t, "memcached")
	testenv.Need(t, "memcaslap")
	bin, err := peers.KeywayBinary()
	if err != nil {
		t.Fatal(err)
	}
	c := MemoryCase{Items: 20_000, MemoryMB: 16}
	var out bytes.Buffer
	o := MemcacheOptions{KeywayBinary: bin, Repetitions: 1, MemoryDuration: time.Second, MemoryCases: []MemoryCase{c}, MemoryOnly: true, Out: &out}
	rep, err := RunMemcache(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Results) != 0 || len(rep.Memory) != 1 || len(rep.Memory[0].Results) != 3 {
		t.Fatalf("report: %+v, want the memory case alone, 3 targets", rep)
	}
	for _, r := range rep.Memory[0].Results {
		if r.RSSMiB.Median <= 0 || r.AnonMiB.Median <= 0 || r.Held.Median <= 0 || r.LoadSeconds.Median <= 0 || r.Ops.Median <= 0 || r.P99us.Median <= 0 || r.StartMiB.Median <= 0 {
			t.Errorf("%s: %+v, want every figure measured", r.Target, r)
		}
		if d := r.RSSMiB.Runs[0] - r.StartMiB.Runs[0]; r.AddedMiB.Runs[0] != d {
			t.Errorf("%s: added %v MiB, want RSS less RSS at start, %v", r.Target, r.AddedMiB.Runs[0], d)
		}
		if (r.Target == memKeywayAsync) != (r.RestartSeconds != nil) {
			t.Errorf("%s: restart %+v", r.Target, r.RestartSeconds)
		}
		if r.Target == memKeywayAsync && r.RestartHeld.Median != r.BeforeStop.Median {
			t.Errorf("%s: %v items after the restart, %v before the stop", r.Target, r.RestartHeld.Median, r.BeforeStop.Median)
		}
	}
	var text bytes.Buffer
	rep.WriteText(&text)
	if !strings.Contains(text.String(), "memory 20K/mix/16") || !strings.Contains(text.String(), "restart, s") || !strings.Contains(text.String(), "RSS at start") {
		t.Fatalf("text:\n%s", text.String())
	}
	t.Logf("%s\n%s", out.String(), text.String())
}
