package validity

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
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

// A table's Index finds it again (TableAt), from any goroutine, while other tables are created.
func TestTableAt(t *testing.T) {
	r := NewRegistry()
	if r.TableAt(0) != nil {
		t.Fatal("an empty registry has a table 0")
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 200 {
			r.Table(TableID{"other", strconv.Itoa(i)})
		}
	}()
	var mine []*Table
	for i := range 200 {
		tb := r.Table(TableID{"s", strconv.Itoa(i)})
		mine = append(mine, tb)
		if r.TableAt(tb.Index()) != tb {
			t.Fatalf("TableAt(%d) is not %v", tb.Index(), tb.ID())
		}
	}
	<-done
	for _, tb := range mine {
		if r.TableAt(tb.Index()) != tb || r.Table(tb.ID()).Index() != tb.Index() {
			t.Fatalf("%v moved", tb.ID())
		}
	}
	if r.TableAt(400) != nil {
		t.Fatal("TableAt past the last table is not nil")
	}
}

func TestLookupAndInvalidate(t *testing.T) {
	r := NewRegistry()
	a, b := r.Table(TableID{"s1", "t"}), r.Table(TableID{"s2", "t"})
	other := r.Table(TableID{"s1", "u"})
	if a.KeyValid([]byte("k"), 0) || !a.KeyValid([]byte("k"), a.Stamp()) {
		t.Fatal("a new table: copies of an earlier run (stamp 0) are invalid, copies stamped now valid")
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
	sa, sb, so := a.Stamp(), b.Stamp(), other.Stamp()
	r.Invalidate([]TableID{{"s1", "t"}})
	if a.KeyValid([]byte("k"), sa) || a.TableValid(sa) || !b.KeyValid([]byte("k"), sb) || !other.TableValid(so) {
		t.Fatal("invalidating s1.t must drop its copies only")
	}
	sa = a.Stamp()
	tick := a.Wrote([]byte("k"))
	if a.KeyValid([]byte("k"), sa) || !a.KeyValid([]byte("k"), tick) || a.TableValid(sa) {
		t.Fatal("Wrote invalidates the key's older copies and the table-wide ones, and its own tick is valid")
	}
	// A write of one key leaves most other keys' copies alone.
	moved := 0
	for i := range 100 {
		if !a.KeyValid([]byte{'x', byte(i)}, sa) {
			moved++
		}
	}
	if moved > 2 {
		t.Fatalf("a write of k invalidated %d of 100 other keys", moved)
	}
	r.InvalidateAll()
	if b.KeyValid([]byte("k"), b.Stamp()-1) || other.TableValid(other.Stamp()-1) {
		t.Fatal("InvalidateAll drops every table's copies")
	}
}

// TestRaiseKeepsLaterTick: two writers that tick in one order and record in the other
// leave the later tick, so a copy stamped between them is not valid.
func TestRaiseKeepsLaterTick(t *testing.T) {
	var m atomic.Uint64
	raise(&m, 5)
	raise(&m, 3)
	if m.Load() != 5 {
		t.Fatalf("mark %d, want 5", m.Load())
	}
}

func TestVouch(t *testing.T) {
	r := NewRegistry()
	if !r.Vouched() {
		t.Fatal("with no gate, copies are served")
	}
	a, b := r.RequireVouch("a"), r.RequireVouch("b")
	if r.Vouched() || r.Gate("a").Serves() {
		t.Fatal("a required follower that has not vouched yet must close its gate")
	}
	a.Vouch(time.Now().Add(time.Hour))
	if r.Vouched() {
		t.Fatal("every group's voucher must vouch for the registry")
	}
	if !r.Gate("a").Serves() || r.Gate("b").Serves() {
		t.Fatal("a group's gate follows its own voucher only")
	}
	b.Vouch(time.Now().Add(time.Hour))
	b.Vouch(time.Now().Add(-time.Hour)) // an older instant never shortens it
	if !r.Vouched() {
		t.Fatal("vouched for the next hour by both")
	}
	c := r.RequireVouch("c")
	c.Vouch(time.Now().Add(-time.Millisecond))
	if r.Vouched() || r.Gate("c").Serves() || !r.Gate("a").Serves() {
		t.Fatal("a vouch that ran out must close its group's gate, and only its")
	}
}

func TestGateModes(t *testing.T) {
	r := NewRegistry()
	g := r.Gate("main")
	if g.Serves() || g.Restorable() || g.Status().Fresh || g.Status().Mode != "off" {
		t.Fatalf("a new gate serves nothing until its mode is set: %+v", g.Status())
	}
	g.SetMode(Unfollowed, "log_bin is OFF")
	if st := g.Status(); st.Serving || st.Reason != "log_bin is OFF" {
		t.Fatalf("unfollowed: %+v", st)
	}
	g.SetMode(TTLBounded, "ttl 30s")
	if st := g.Status(); !st.Serving || st.Fresh || !g.Restorable() || st.Mode != "ttl" {
		t.Fatalf("ttl: served, restorable, never fresh: %+v", st)
	}
	g.SetMode(OwnWritesOnly, "none chosen")
	if st := g.Status(); !st.Serving || st.Fresh || g.Restorable() || st.Reason != "none chosen" {
		t.Fatalf("none: served, not fresh, not restored: %+v", st)
	}
	v := r.RequireVouch("main")
	if st := g.Status(); st.Serving || st.Fresh || st.Reason == "" {
		t.Fatalf("followed before the first vouch: %+v", st)
	}
	v.Vouch(time.Now().Add(time.Hour))
	if st := g.Status(); !st.Serving || !st.Fresh || st.Reason != "" || !g.Restorable() {
		t.Fatalf("followed and vouched: %+v", st)
	}
	if r.Gate("main") != g || len(r.Gates()) != 1 {
		t.Fatal("one gate per group")
	}
	var none *Gate
	if !none.Serves() || !none.Restorable() {
		t.Fatal("a nil gate (no group) serves valid copies")
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

// TestWroteThroughSeesInvalidationsSinceItsStamp: a writer may keep its own value only when nothing else invalidated
// the key (or the table) between its stamp and its write's record.
func TestWroteThroughSeesInvalidationsSinceItsStamp(t *testing.T) {
	tbl := NewRegistry().Table(TableID{Schema: "s", Name: "t"})
	key := []byte("k")
	since := tbl.Stamp()
	tick, unchanged := tbl.WroteThrough(key, since)
	if !unchanged || !tbl.KeyValid(key, tick) {
		t.Fatalf("a lone write: unchanged %v, its own copy valid %v", unchanged, tbl.KeyValid(key, tick))
	}
	since = tbl.Stamp()
	tbl.Wrote(key) // another writer, after the stamp
	if _, unchanged := tbl.WroteThrough(key, since); unchanged {
		t.Error("a write of the key after the stamp went unseen")
	}
	since = tbl.Stamp()
	tbl.Invalidate() // a write of unknown rows
	if _, unchanged := tbl.WroteThrough(key, since); unchanged {
		t.Error("an invalidation of the table after the stamp went unseen")
	}
	since = tbl.Stamp()
	tbl.Wrote([]byte("another key")) // a different row (unless it shares the slot, which only costs a copy)
	if _, unchanged := tbl.WroteThrough(key, since); !unchanged && tbl.slot([]byte("another key")) != tbl.slot(key) {
		// (one write of another key never drops a copy: only one of the same slot and fingerprint can)
		t.Error("a write of another row counted against this one")
	}
}

// A column-keyed entry survives changes of other keys, and drops on a change of its key, on a write known by one
// key only (a container's), and on a whole-table invalidation.
func TestRowKeyValid(t *testing.T) {
	tb := NewRegistry().Table(TableID{"s", "t"})
	key := func(v any) []byte {
		k, ok := ColumnKey(nil, "ID", v)
		if !ok {
			t.Fatalf("ColumnKey(%v) refused", v)
		}
		return k
	}
	k1 := key(int32(1))
	stamp := tb.Stamp()
	tb.Changed(key(int64(2)))
	if !tb.RowKeyValid(k1, stamp) {
		t.Fatal("a change of row 2 dropped the entry of row 1")
	}
	if tb.TableValid(stamp) {
		t.Fatal("a table-wide entry survived a row change")
	}
	tb.Changed(key(uint64(1)))
	if tb.RowKeyValid(k1, stamp) {
		t.Fatal("a change of row 1 left its entry")
	}
	stamp = tb.Stamp()
	tb.Wrote([]byte("container key"))
	if tb.RowKeyValid(k1, stamp) {
		t.Fatal("a write known by a container key only left a column-keyed entry")
	}
	stamp = tb.Stamp()
	tb.Invalidate()
	if tb.RowKeyValid(k1, stamp) {
		t.Fatal("an invalidation of the table left a column-keyed entry")
	}
}

// ColumnKey renders equal values alike and refuses what it cannot vouch for.
func TestColumnKey(t *testing.T) {
	for _, v := range []any{int8(7), int16(7), int32(7), int64(7), uint8(7), uint32(7), uint64(7), float64(7), "7", []byte("7")} {
		if k, ok := ColumnKey(nil, "Id", v); !ok || string(k) != "id\x007" {
			t.Errorf("ColumnKey(%T %v) = %q %v, want id\\x007", v, v, k, ok)
		}
	}
	for _, v := range []any{int32(-1), int64(-7), 7.5, float64(1 << 53), float32(7), "07", " 7", "7 ", "7.0", "", "abc", 2024 /* go-mysql's YEAR */, nil, "123456789012345678901"} {
		if k, ok := ColumnKey(nil, "id", v); ok {
			t.Errorf("ColumnKey(%T %v) = %q, want refused", v, v, k)
		}
	}
}

// A numeric watch is registered once per column, however many fills ask.
func TestNumericWatchOnce(t *testing.T) {
	tb := NewRegistry().Table(TableID{"s", "t"})
	for range 3 {
		tb.WatchKey(KeyWatch{Column: "id", Numeric: true})
		tb.WatchKey(KeyWatch{Column: "ID", Numeric: true})
	}
	if n := len(tb.Watches()); n != 1 {
		t.Fatalf("%d watches, want 1", n)
	}
}

// Trusted asks the lookup once per table, again after ForgetKind (DDL) or an error, and trusts every table when
// no lookup is installed.
func TestTrusted(t *testing.T) {
	r := NewRegistry()
	base, view := r.Table(TableID{"s", "base"}), r.Table(TableID{"s", "view"})
	if !view.Trusted() {
		t.Fatal("without a lookup every table is trusted")
	}
	var asked atomic.Int32
	fail := atomic.Bool{}
	r.SetKindLookup(func(id TableID) (bool, error) {
		asked.Add(1)
		if fail.Load() {
			return false, errors.New("unreachable")
		}
		return id.Name == "base", nil
	})
	view.ForgetKind()
	for range 3 {
		if !base.Trusted() || view.Trusted() {
			t.Fatal("base must be trusted, view not")
		}
	}
	if n := asked.Load(); n != 2 {
		t.Fatalf("%d lookups, want one per table", n)
	}
	fail.Store(true)
	base.ForgetKind()
	if base.Trusted() {
		t.Fatal("a failed lookup trusted the table")
	}
	fail.Store(false)
	if !base.Trusted() || asked.Load() != 4 {
		t.Fatalf("after a failed lookup the next call asks again: %d lookups", asked.Load())
	}
}

// SlotBytes counts every table's slots, and OnSlotsGrown hears of each widening with the new total (the server
// raises Go's heap limit by it): once per growth, never for a widening that adds nothing.
func TestSlotBytes(t *testing.T) {
	reg := NewRegistry()
	var heard []int64
	reg.OnSlotsGrown(func(total int64) { heard = append(heard, total) })
	a := reg.Table(TableID{Schema: "s", Name: "a"})
	reg.Table(TableID{Schema: "s", Name: "b"})
	reg.Table(TableID{Schema: "s", Name: "a"}) // the same table: nothing new
	start := int64(2 * keySlots * 16)
	if got := reg.SlotBytes(); got != start {
		t.Fatalf("two new tables: SlotBytes %d, want %d (16 bytes a slot)", got, start)
	}
	a.WidenSlots(keySlots * 8)
	a.WidenSlots(keySlots * 4) // narrower than it is: no change
	a.WidenSlots(keySlots * 8) // as wide as it is: no change
	want := start + 7*keySlots*16
	if got := reg.SlotBytes(); got != want {
		t.Errorf("after widening a to %d slots: SlotBytes %d, want %d", keySlots*8, got, want)
	}
	if len(heard) != 1 || heard[0] != want {
		t.Errorf("OnSlotsGrown heard %v, want [%d]", heard, want)
	}
}

// WidenSlots keeps every mark: a copy invalid before is invalid after, a valid one stays valid, and a write after it
// is seen; with more slots, writes of other keys drop fewer copies.
func TestWidenSlots(t *testing.T) {
	reg := NewRegistry()
	tbl := reg.Table(TableID{Schema: "s", Name: "t"})
	stamp := tbl.Stamp()
	tbl.Wrote([]byte("written"))
	tbl.WidenSlots(WideSlots)
	if tbl.KeyValid([]byte("written"), stamp) {
		t.Error("a copy invalidated before the slots widened is valid after")
	}
	after := tbl.Stamp()
	if !tbl.KeyValid([]byte("written"), after) {
		t.Error("a copy stamped after the write is invalid after widening")
	}
	tbl.Wrote([]byte("written"))
	if tbl.KeyValid([]byte("written"), after) {
		t.Error("a write after widening went unseen")
	}
	// 2,000 copies, then 2,000 writes of other keys: most copies survive.
	copyStamp := tbl.Stamp()
	for i := range 2000 {
		tbl.Wrote(fmt.Appendf(nil, "other%d", i))
	}
	kept := 0
	for i := range 2000 {
		if tbl.KeyValid(fmt.Appendf(nil, "copy%d", i), copyStamp) {
			kept++
		}
	}
	if kept < 1800 {
		t.Errorf("%d of 2000 copies survive 2000 writes of other keys with %d slots", kept, WideSlots)
	}
}

// TestSlotSharing: keys that share a slot. A copy survives one write of another key of its slot (and any number of
// writes of that one key), and is dropped by a write of a second other key, by a write of its own key, and by a
// write of a key with its fingerprint; widening keeps what each slot knew; a tick too large to pack drops the slot.
func TestSlotSharing(t *testing.T) {
	tb := NewRegistry().Table(TableID{"s", "t"})
	a := []byte("a")
	var others [][]byte // keys of a's slot, each with another fingerprint
	for i := 0; len(others) < 1; i++ {
		k := []byte("k" + strconv.Itoa(i))
		if r := tb.slot(k); r.s == tb.slot(a).s && r.fp != tb.slot(a).fp {
			others = append(others, k)
		}
	}
	b := others[0]

	stamp := tb.Stamp()
	tb.Wrote(b)
	tb.Wrote(b)
	if !tb.KeyValid(a, stamp) {
		t.Fatal("writes of one other key of the slot dropped the copy")
	}
	if tb.KeyValid(b, stamp) {
		t.Fatal("a write of b did not drop b's copy")
	}
	tb.WidenSlots(keySlots * 4)
	if !tb.KeyValid(a, stamp) || tb.KeyValid(b, stamp) {
		t.Fatal("widening changed what the slot knew")
	}
	// After widening a and c may no longer share a slot; find a key that does, with another fingerprint.
	var c []byte
	for i := 0; c == nil; i++ {
		k := []byte("w" + strconv.Itoa(i))
		if r := tb.slot(k); r.s == tb.slot(a).s && r.fp != tb.slot(a).fp && r.fp != tb.slot(b).fp {
			c = k
		}
	}
	tb.Wrote(c) // the second other key of a's slot since the stamp (b's write came with the slot it widened from)
	if tb.KeyValid(a, stamp) {
		t.Fatal("a second other key's write left the copy valid")
	}

	stamp = tb.Stamp()
	tb.Wrote(a)
	if tb.KeyValid(a, stamp) {
		t.Fatal("a write of the key left its copy valid")
	}

	// A fingerprint shared by two keys counts them as one: the other's write drops the copy.
	var s keySlot
	mine, same := slotRef{&s, 7}, slotRef{&s, 7}
	same.raise(10)
	if mine.valid(9) {
		t.Error("a write under the copy's fingerprint left it valid")
	}
	other := slotRef{&s, 8}
	if !other.valid(9) {
		t.Error("one write of another fingerprint dropped the copy")
	}
	// A tick too large to pack goes to before: every copy of the slot drops.
	other.raise(maxPackedTick + 1)
	if mine.valid(maxPackedTick) || other.valid(maxPackedTick) || !other.valid(maxPackedTick+1) {
		t.Error("an unpackable tick did not drop every copy stamped before it")
	}
}
