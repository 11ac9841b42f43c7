package validity

import (
	"errors"
	"slices"
	"testing"
)

func TestResolveNamingRule(t *testing.T) {
	got := Resolve("Shop", []string{"Orders", "billing.Invoices", "orders", "SHOP.orders"})
	want := []TableID{{"shop", "orders"}, {"billing", "invoices"}}
	if !slices.Equal(got, want) {
		t.Fatalf("Resolve = %v, want %v", got, want)
	}
	if got := Resolve("", []string{"t"}); !slices.Equal(got, []TableID{{"", "t"}}) {
		t.Fatalf("no default database: %v", got)
	}
}

func TestLookupAndInvalidate(t *testing.T) {
	r := NewRegistry()
	a, b := r.Table(TableID{"s1", "t"}), r.Table(TableID{"s2", "t"})
	other := r.Table(TableID{"s1", "u"})
	if a.Epoch() != 1 || a.Gen([]byte("k")) != 0 {
		t.Fatalf("a new table starts at epoch 1, gen 0: %d %d", a.Epoch(), a.Gen([]byte("k")))
	}
	if r.Table(TableID{"s1", "t"}) != a {
		t.Fatal("a table's state is created once")
	}
	// A bare name matches the table in every schema; a qualified one only its own.
	if got := r.Lookup([]TableID{{"", "t"}, {"s1", "t"}}); len(got) != 2 || !slices.Contains(got, a) || !slices.Contains(got, b) {
		t.Fatalf("lookup bare t: %v", got)
	}
	if got := r.Lookup([]TableID{{"s3", "t"}}); len(got) != 0 {
		t.Fatalf("unknown table: %v", got)
	}
	r.Invalidate([]TableID{{"s1", "t"}})
	if a.Epoch() != 2 || b.Epoch() != 1 || other.Epoch() != 1 {
		t.Fatalf("invalidate s1.t: a epoch %d, b epoch %d, other epoch %d", a.Epoch(), b.Epoch(), other.Epoch())
	}
	if g := a.Wrote([]byte("k")); g != a.Gen([]byte("k")) || g != 1 || a.Epoch() != 2 {
		t.Fatal("Wrote bumps the key's generation only")
	}
	// A write of one key leaves most other keys' generations alone: their fills are not discarded.
	moved := 0
	for i := range 100 {
		if a.Gen([]byte{'x', byte(i)}) != 0 {
			moved++
		}
	}
	if moved > 2 {
		t.Fatalf("a write of k moved the generation of %d of 100 other keys", moved)
	}
}

func TestSettle(t *testing.T) {
	r := NewRegistry()
	calls := 0
	boom := errors.New("table down")
	if err := r.Settle([]TableID{{"s", "t"}}); err != nil {
		t.Fatal(err)
	}
	r.OnSettle(TableID{"s", "t"}, func() error { calls++; return nil })
	r.OnSettle(TableID{"s", "u"}, func() error { return boom })
	if err := r.Settle([]TableID{{"s", "t"}}); err != nil || calls != 1 {
		t.Fatalf("settle s.t: %v, calls %d", err, calls)
	}
	if err := r.Settle([]TableID{{"", "u"}, {"s", "t"}}); !errors.Is(err, boom) || calls != 2 {
		t.Fatalf("settle u and t: %v, calls %d", err, calls)
	}
}
