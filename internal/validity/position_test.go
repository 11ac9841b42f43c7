package validity

import (
	"sync"
	"testing"
)

func mustPos(t testing.TB, s string) Position {
	t.Helper()
	p, err := ParsePosition(s)
	if err != nil {
		t.Fatalf("ParsePosition(%q): %v", s, err)
	}
	return p
}

func TestParsePosition(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"", ""},
		{"  ", ""},
		{"0-1-100", "0-1-100"},
		{"1-2-7,0-1-100", "0-1-100,1-2-7"},
		{"0-1-100,\n1-2-7", "0-1-100,1-2-7"}, // SHOW SLAVE STATUS breaks long positions
		{"4294967295-4294967295-18446744073709551615", "4294967295-4294967295-18446744073709551615"},
		{"0-1-100,", "0-1-100"},
	} {
		if got := mustPos(t, c.in).String(); got != c.want {
			t.Errorf("ParsePosition(%q).String() = %q, want %q", c.in, got, c.want)
		}
	}
	for _, bad := range []string{"0-1", "0-1-", "a-1-2", "0-1-2-3", "0-+1-2", "0-1-2,0-3-4", "4294967296-1-1", "0-1-18446744073709551616", " 0 -1-2", "-1-2"} {
		if p, err := ParsePosition(bad); err == nil {
			t.Errorf("ParsePosition(%q) = %v, want an error", bad, p)
		}
	}
	if p := mustPos(t, "0-1-100,3-2-7"); p.Seq(0) != 100 || p.Seq(3) != 7 || p.Seq(1) != 0 || p.IsZero() {
		t.Errorf("Seq of %v: %d %d %d", p, p.Seq(0), p.Seq(3), p.Seq(1))
	}
	if !mustPos(t, "").IsZero() || !(Position{}).IsZero() {
		t.Error("the empty position is not zero")
	}
}

// FuzzParsePosition: whatever ParsePosition accepts prints as a position it reads back as the same, in domain
// order with one GTID per domain.
func FuzzParsePosition(f *testing.F) {
	for _, s := range []string{"", "0-1-100", "0-1-100,1-2-7", "1-2-7, 0-1-100", "0-1-2,0-3-4", "x", "0-1-18446744073709551615"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := ParsePosition(s)
		if err != nil {
			return
		}
		out := p.String()
		q, err := ParsePosition(out)
		if err != nil {
			t.Fatalf("ParsePosition(%q) = %v, whose String %q does not parse: %v", s, p, out, err)
		}
		if !q.Equal(p) || q.String() != out {
			t.Fatalf("%q → %q → %q", s, out, q.String())
		}
		for i := 1; i < len(p.gtids); i++ {
			if p.gtids[i-1].Domain >= p.gtids[i].Domain {
				t.Fatalf("%q: domains out of order: %v", s, p.gtids)
			}
		}
		if !p.Covers(p) || !p.Covers(Position{}) || !p.Merge(p).Equal(p) {
			t.Fatalf("%q: a position must cover itself and zero", s)
		}
	})
}

func TestCovers(t *testing.T) {
	for _, c := range []struct {
		have, need string
		want       bool
	}{
		{"", "", true},
		{"0-1-5", "", true},
		{"", "0-1-5", false},
		{"0-1-5", "0-1-5", true},
		{"0-1-5", "0-9-5", true}, // server ids are not compared
		{"0-1-5", "0-1-6", false},
		{"0-2-6", "0-1-5", true},
		{"0-1-5,1-1-3", "1-1-3", true},
		{"0-1-5,1-1-3", "0-1-5,1-1-4", false},
		{"1-1-3", "0-1-1,1-1-3", false}, // a domain we lack
		{"0-1-9,2-1-9", "1-1-1", false},
		{"0-1-9,1-1-1,2-1-9", "0-1-9,1-1-1,2-1-9", true},
		{"0-1-9", "0-1-0", true}, // seq 0 needs nothing
	} {
		if got := mustPos(t, c.have).Covers(mustPos(t, c.need)); got != c.want {
			t.Errorf("%q.Covers(%q) = %v, want %v", c.have, c.need, got, c.want)
		}
	}
}

func TestMerge(t *testing.T) {
	for _, c := range []struct{ a, b, want string }{
		{"", "", ""},
		{"0-1-5", "", "0-1-5"},
		{"", "0-1-5", "0-1-5"},
		{"0-1-5", "0-2-7", "0-2-7"},
		{"0-2-7", "0-1-5", "0-2-7"},
		{"0-1-5", "0-2-5", "0-1-5"}, // a tie keeps the receiver's
		{"0-1-5,2-1-1", "1-3-4", "0-1-5,1-3-4,2-1-1"},
		{"0-1-5,1-1-9", "0-1-8,1-1-2", "0-1-8,1-1-9"},
		{"3-1-1", "0-1-1,5-1-1", "0-1-1,3-1-1,5-1-1"},
	} {
		a, b := mustPos(t, c.a), mustPos(t, c.b)
		if got := a.Merge(b).String(); got != c.want {
			t.Errorf("%q.Merge(%q) = %q, want %q", c.a, c.b, got, c.want)
		}
		if a.String() != mustPos(t, c.a).String() || b.String() != mustPos(t, c.b).String() {
			t.Errorf("%q.Merge(%q) changed an input: %q, %q", c.a, c.b, a, b)
		}
		if m := a.Merge(b); !m.Covers(a) || !m.Covers(b) {
			t.Errorf("%q.Merge(%q) = %q covers not both", c.a, c.b, m)
		}
	}
	a, b := mustPos(t, "0-1-5"), mustPos(t, "0-1-3")
	if n := testing.AllocsPerRun(100, func() { _ = a.Merge(b); _ = b.Merge(a) }); n != 0 {
		t.Errorf("merging positions one of which covers the other allocated %v times", n)
	}
}

func TestGatePositions(t *testing.T) {
	reg := NewRegistry()
	g := reg.Gate("g")
	t1, t2, t3 := TableID{"s", "t1"}, TableID{"s", "t2"}, TableID{"s", "t3"}
	other := TableID{"o", "t1"}
	if !g.Needs([]TableID{t1}).IsZero() || !g.Newest().IsZero() || !g.Needs(nil).IsZero() {
		t.Fatal("a new gate needs something")
	}

	g.NoteCommit([]TableID{t1, t2}, mustPos(t, "0-1-10"))
	g.NoteCommit([]TableID{t2}, mustPos(t, "0-1-11"))
	g.NoteCommit(nil, mustPos(t, "0-1-12"))          // tables not named: only Newest
	g.NoteCommit([]TableID{t1}, mustPos(t, "0-1-9")) // older: ignored
	g.NoteCommit([]TableID{t3}, mustPos(t, "1-2-4"))
	for _, c := range []struct {
		ids  []TableID
		want string
	}{
		{[]TableID{t1}, "0-1-10"},
		{[]TableID{t2}, "0-1-11"},
		{[]TableID{t1, t2}, "0-1-11"},
		{[]TableID{other}, ""},
		{[]TableID{{"s", "never"}}, ""},
		{[]TableID{t1, t3}, "0-1-10,1-2-4"},
		{[]TableID{{"", "t1"}}, "0-1-10"}, // no schema: that name in every schema
		{nil, ""},
	} {
		if got := g.Needs(c.ids).String(); got != c.want {
			t.Errorf("Needs(%v) = %q, want %q", c.ids, got, c.want)
		}
	}
	if got := g.Newest().String(); got != "0-1-12,1-2-4" {
		t.Errorf("Newest = %q", got)
	}
	if !reg.Gate("h").Needs([]TableID{t1}).IsZero() || !reg.Gate("h").Newest().IsZero() {
		t.Error("one group's commits reached another's gate")
	}

	// A write whose default database was not known raises the name in every schema.
	g.NoteCommit([]TableID{{"", "t1"}}, mustPos(t, "0-1-13"))
	if got := g.Needs([]TableID{other}).String(); got != "0-1-13" {
		t.Errorf("after a write of t1 without schema, Needs(o.t1) = %q", got)
	}

	// NoteAll: every table, those never noted included, needs at least its position.
	g.NoteAll(mustPos(t, "0-1-20"))
	for _, ids := range [][]TableID{{t1}, {t3}, {{"s", "never"}}, {{"", "nowhere"}}, nil} {
		if got := g.Needs(ids); !got.Covers(mustPos(t, "0-1-20")) {
			t.Errorf("after NoteAll, Needs(%v) = %q", ids, got)
		}
	}
	if got := g.Needs([]TableID{t3}).String(); got != "0-1-20,1-2-4" {
		t.Errorf("after NoteAll, Needs(t3) = %q", got)
	}
	g.NoteCommit([]TableID{{"s", "fresh"}}, mustPos(t, "1-2-5"))
	if got := g.Needs([]TableID{{"s", "fresh"}}).String(); got != "0-1-20,1-2-5" {
		t.Errorf("a table first noted after NoteAll: Needs = %q", got)
	}

	var nilGate *Gate
	nilGate.NoteCommit([]TableID{t1}, mustPos(t, "0-1-1"))
	nilGate.NoteAll(mustPos(t, "0-1-1"))
	if !nilGate.Needs([]TableID{t1}).IsZero() || !nilGate.Newest().IsZero() {
		t.Error("a nil gate needs something")
	}
}

// TestNeedsAllocatesNothing: the hot path (one table, or tables one of which covers the others) allocates nothing.
func TestNeedsAllocatesNothing(t *testing.T) {
	g := NewRegistry().Gate("g")
	t1, t2 := TableID{"s", "t1"}, TableID{"s", "t2"}
	g.NoteCommit([]TableID{t1}, mustPos(t, "0-1-10"))
	g.NoteCommit([]TableID{t2}, mustPos(t, "0-1-11"))
	one, two := []TableID{t1}, []TableID{t1, t2}
	if n := testing.AllocsPerRun(100, func() { _ = g.Needs(one); _ = g.Needs(two); _ = g.Newest() }); n != 0 {
		t.Errorf("Needs allocated %v times", n)
	}
}

// TestPositionsConcurrent: notes and reads from many goroutines; every table's position only rises and ends at
// its last commit.
func TestPositionsConcurrent(t *testing.T) {
	g := NewRegistry().Gate("g")
	ids := []TableID{{"s", "a"}, {"s", "b"}, {"s", "c"}}
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 500 {
				g.NoteCommit(ids[w%len(ids):w%len(ids)+1], PositionOf(GTID{Domain: uint32(w % 2), Server: 1, Seq: uint64(i + 1)}))
				if w == 3 && i%100 == 0 {
					g.NoteAll(PositionOf(GTID{Domain: 0, Server: 1, Seq: uint64(i / 2)}))
				}
			}
		}()
	}
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var last Position
			for range 1000 {
				p := g.Needs(ids)
				if !p.Covers(last) {
					t.Errorf("Needs went back: %v after %v", p, last)
					return
				}
				last = p
				_ = g.Newest()
			}
		}()
	}
	wg.Wait()
	if got := g.Needs(ids).String(); got != "0-1-500,1-1-500" {
		t.Errorf("Needs = %q, want 0-1-500,1-1-500", got)
	}
	if got := g.Newest().String(); got != "0-1-500,1-1-500" {
		t.Errorf("Newest = %q", got)
	}
}
