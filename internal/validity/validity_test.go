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
	if a.Epoch() != 1 || a.Gen() != 0 {
		t.Fatalf("a new table starts at epoch 1, gen 0: %d %d", a.Epoch(), a.Gen())
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
	gen := a.Gen()
	r.Invalidate([]TableID{{"s1", "t"}})
	if a.Gen() == gen || a.Epoch() != 2 || b.Epoch() != 1 || other.Epoch() != 1 {
		t.Fatalf("invalidate s1.t: a gen %d epoch %d, b epoch %d, other epoch %d", a.Gen(), a.Epoch(), b.Epoch(), other.Epoch())
	}
	if g := a.Wrote(); g != a.Gen() || a.Epoch() != 2 {
		t.Fatal("Wrote bumps the generation only")
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
