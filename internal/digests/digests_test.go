package digests

import (
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"
)

func key(d string) Key {
	return Key{Digest: d, Normalized: "select ? from " + d, Class: "read", Schema: "shop", User: "app"}
}

func TestDigestsAggregate(t *testing.T) {
	d := New(10)
	before := time.Now()
	d.Record(key("a"), 1, 3*time.Millisecond, false)
	d.Record(key("a"), 2, 1*time.Millisecond, false)
	d.Record(key("a"), 0, 5*time.Millisecond, true)
	d.Record(key("b"), 7, 20*time.Millisecond, false)
	other := key("a")
	other.User = "admin" // same digest, other user: its own row
	d.Record(other, 1, time.Millisecond, false)

	s := d.Snapshot()
	if len(s) != 3 {
		t.Fatalf("rows = %d, want 3: %+v", len(s), s)
	}
	if s[0].Digest != "b" || s[1].Digest != "a" || s[1].User != "app" || s[2].User != "admin" {
		t.Fatalf("order by total time wrong: %+v", s)
	}
	a := s[1]
	if a.Count != 3 || a.Rows != 3 || a.Errors != 1 {
		t.Errorf("count/rows/errors = %d/%d/%d, want 3/3/1", a.Count, a.Rows, a.Errors)
	}
	if a.MinLatency != time.Millisecond || a.MaxLatency != 5*time.Millisecond || a.AvgLatency != 3*time.Millisecond ||
		a.SumLatency != 9*time.Millisecond {
		t.Errorf("min/avg/max/sum = %v/%v/%v/%v", a.MinLatency, a.AvgLatency, a.MaxLatency, a.SumLatency)
	}
	if a.FirstSeen.Before(before) || a.LastSeen.Before(a.FirstSeen) {
		t.Errorf("first/last seen %v %v", a.FirstSeen, a.LastSeen)
	}
	if a.Normalized != "select ? from a" || a.Class != "read" || a.Schema != "shop" {
		t.Errorf("key fields lost: %+v", a)
	}
}

func TestDigestsOverflowAndReset(t *testing.T) {
	d := New(3)
	for i := 0; i < 10; i++ {
		d.Record(key(fmt.Sprint(i)), 1, time.Millisecond, false)
	}
	d.Record(key("0"), 1, time.Millisecond, false) // an existing key still counts in its own row
	s := d.Snapshot()
	if len(s) != 4 || d.Len() != 4 {
		t.Fatalf("rows = %d (Len %d), want 3 + overflow", len(s), d.Len())
	}
	var total, overflow int64
	for _, r := range s {
		total += r.Count
		if r.Digest == Overflow {
			overflow = r.Count
		}
	}
	if total != 11 || overflow != 7 {
		t.Fatalf("total %d overflow %d, want 11 and 7", total, overflow)
	}
	got := d.SnapshotAndReset()
	if len(got) != 4 {
		t.Fatalf("SnapshotAndReset rows = %d", len(got))
	}
	if n := len(d.Snapshot()); n != 0 || d.Len() != 0 {
		t.Fatalf("after reset: %d rows, Len %d", n, d.Len())
	}
	// Room again after the reset.
	for i := 0; i < 3; i++ {
		d.Record(key(fmt.Sprint("n", i)), 1, time.Millisecond, false)
	}
	for _, r := range d.Snapshot() {
		if r.Digest == Overflow {
			t.Fatal("overflow row after reset with room")
		}
	}
	d.Reset()
	if d.Len() != 0 {
		t.Fatal("Reset left rows")
	}
}

func TestDigestStatsJSON(t *testing.T) {
	in := Row{Digest: "abc", Normalized: "select ?", Class: "read", Schema: "s", User: "u",
		Count: 4, Rows: 9, Errors: 1, MinLatency: 10 * time.Microsecond, AvgLatency: 25 * time.Microsecond,
		MaxLatency: 50 * time.Microsecond, SumLatency: 100 * time.Microsecond,
		FirstSeen: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), LastSeen: time.Date(2026, 1, 2, 3, 4, 6, 0, time.UTC)}
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]float64{"min_us": 10, "avg_us": 25, "max_us": 50, "sum_us": 100, "count_star": 4} {
		if m[k] != v {
			t.Errorf("%s = %v, want %v (%s)", k, m[k], v, b)
		}
	}
	var out Row
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	if out != in {
		t.Errorf("round trip:\n got %+v\nwant %+v", out, in)
	}
}

func TestDigestsConcurrent(t *testing.T) {
	d := New(50)
	var wg sync.WaitGroup
	const goroutines, each = 8, 5000
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < each; i++ {
				d.Record(key(fmt.Sprint(i%80)), 1, time.Microsecond, i%10 == 0)
				if g == 0 && i%1000 == 0 {
					d.Snapshot()
				}
			}
		}(g)
	}
	wg.Wait()
	var total int64
	rows := d.Snapshot()
	for _, r := range rows {
		total += r.Count
	}
	if total != goroutines*each {
		t.Fatalf("total = %d, want %d", total, goroutines*each)
	}
	if len(rows) != 51 {
		t.Fatalf("rows = %d, want 50 + overflow", len(rows))
	}
}

func BenchmarkDigestsRecord(b *testing.B) {
	d := New(1000)
	k := key("0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef")
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			d.Record(k, 1, time.Millisecond, false)
		}
	})
}

// TestDigestsKeyedByFingerprint: a row is found by fingerprint, schema and user; the statement's text is kept from
// its first record and not compared per query.
func TestDigestsKeyedByFingerprint(t *testing.T) {
	d := New(10)
	k := Key{Fingerprint: 42, Digest: "d", Normalized: "select ?", Class: "read", Schema: "shop", User: "app"}
	d.Record(k, 1, time.Millisecond, false)
	same := k
	same.Normalized = "(not compared)"
	d.Record(same, 1, time.Millisecond, false)
	otherFP := k
	otherFP.Fingerprint = 43 // another statement with the same display digest (a placeholder where k has a literal)
	d.Record(otherFP, 1, time.Millisecond, false)
	otherSchema := k
	otherSchema.Schema = "audit"
	d.Record(otherSchema, 1, time.Millisecond, false)

	s := d.Snapshot()
	if len(s) != 3 {
		t.Fatalf("rows = %d, want 3: %+v", len(s), s)
	}
	for _, r := range s {
		if r.Normalized != "select ?" || r.Digest != "d" {
			t.Errorf("row %+v: text not kept from the first record", r)
		}
		if r.Schema == "shop" && r.Count == 2 {
			return
		}
	}
	t.Errorf("the two records of one fingerprint did not share a row: %+v", s)
}
