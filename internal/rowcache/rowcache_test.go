package rowcache

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/keywaydb/keyway/internal/container"
	"github.com/keywaydb/keyway/internal/store"
	"github.com/keywaydb/keyway/internal/testenv"
	"github.com/keywaydb/keyway/internal/validity"
)

func TestMain(m *testing.M) { os.Exit(testenv.RunWithSharedMariaDB(m)) }

// newTestCache is a caching cache of the rows of test.rowcache_rows (k, v), in a store of its own, behind gate
// (nil: none). The table is created empty.
func newTestCache(t testing.TB, gate *validity.Gate) (*Cache, *store.Store) {
	t.Helper()
	db := testenv.SharedDB(t)
	for _, q := range []string{"DROP TABLE IF EXISTS test.rowcache_rows",
		"CREATE TABLE test.rowcache_rows (k VARCHAR(32) CHARACTER SET utf8mb4 PRIMARY KEY, v VARCHAR(64))"} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	ct, err := container.Open(context.Background(), db, container.Def{Name: "rows", Schema: "test", Table: "rowcache_rows",
		KeyColumn: "k", ValueColumns: []string{"v"}}, container.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ct.Close() })
	st, err := store.Open(store.Options{MemoryLimit: 16 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	reg := validity.NewRegistry()
	c := New(Options{Container: ct, Store: st, Prefix: "@@rows.", Validity: reg.Table(validity.TableID{Schema: "test", Name: "rowcache_rows"}),
		Gate: gate, Caching: true})
	return c, st
}

// TestHeld: Held serves a copy a fill stored while its stamp is valid, under the row as the key column compares
// keys; a write of the row makes it a miss; a closed gate is a bypass whatever is held.
func TestHeld(t *testing.T) {
	gate := validity.NewRegistry().Gate("g")
	gate.SetMode(validity.TTLBounded, "test")
	c, _ := newTestCache(t, gate)
	if _, err := testenv.SharedDB(t).Exec("INSERT INTO test.rowcache_rows VALUES ('k', 'row')"); err != nil {
		t.Fatal(err)
	}
	if _, look := c.Held([]byte("k"), Serve); look != Miss {
		t.Fatalf("before a fill: %v, want Miss", look)
	}
	if it, ok, err := c.Fill([]byte("k")); !ok || err != nil || string(it.Value) != "row" {
		t.Fatalf("fill: %q %v %v", it.Value, ok, err)
	}
	for _, use := range []Use{Serve, Vouched} {
		if it, look := c.Held([]byte("K"), use); look != Hit || string(it.Value) != "row" {
			t.Errorf("after a fill, use %d: %q %v, want the row, Hit", use, it.Value, look)
		}
	}
	c.Drop([]byte("k"))
	if _, look := c.Held([]byte("k"), Serve); look != Miss {
		t.Errorf("after a write: %v, want Miss", look)
	}
	if _, _, err := c.Fill([]byte("k")); err != nil {
		t.Fatal(err)
	}
	gate.SetMode(validity.Unfollowed, "test")
	if _, look := c.Held([]byte("k"), Serve); look != Bypass {
		t.Errorf("gate closed: %v, want Bypass", look)
	}
	if _, look := c.Held([]byte("k"), Vouched); look != Hit {
		t.Errorf("gate closed, asked as a batch that found it open: %v, want Hit", look)
	}
}

// TestSlotsGrowWithCopies: as a container stores copies of more rows, its table keeps more per-key slots (writes of
// other keys of a copy's slot drop it), four per item the store holds, within an eighth of the store's memory
// limit; and a copy that was invalid stays invalid when they grow.
func TestSlotsGrowWithCopies(t *testing.T) {
	for _, c := range []struct {
		items, limit int64
		want         int
	}{
		{10000, 64 << 20, 1 << 16},
		{40000, 64 << 20, 1 << 18},
		{1 << 20, 64 << 20, 1 << 19}, // capped: 8 MiB of slots for 64 MiB of items
		{40000, 1 << 20, 1 << 13},
	} {
		if got := slotsFor(c.items, c.limit); got != c.want {
			t.Errorf("slotsFor(%d items, %d bytes) = %d, want %d", c.items, c.limit, got, c.want)
		}
	}

	c, st := newTestCache(t, nil)
	if c.v.Slots() != validity.WideSlots {
		t.Fatalf("a container's table starts with %d slots, want %d", c.v.Slots(), validity.WideSlots)
	}
	stale := c.Key([]byte("stale"))
	stamp := c.v.Stamp()
	c.v.Wrote(c.validityKey(stale)) // a write after the stamp: a copy stamped before it is invalid
	for i := range 40000 {
		sk := c.Key(fmt.Appendf(nil, "k%d", i))
		if !c.storeCopy(sk, store.Item{Value: []byte("x")}, c.v.Stamp()) {
			t.Fatalf("copy %d not stored", i)
		}
	}
	// Last checked at 36,864 copies: 4 × 36,864 slots, rounded up to a power of two, within the store's limit.
	if got, want := c.v.Slots(), slotsFor(36864, st.Stats().Limit); got != want || got <= validity.WideSlots {
		t.Errorf("after 40,000 copies the table keeps %d slots, want %d (more than %d)", got, want, validity.WideSlots)
	}
	if c.v.KeyValid(c.validityKey(stale), stamp) {
		t.Error("a copy stamped before a write of its key is valid again once the slots grew")
	}
}

// TestHeldGateOf: with a gate per row (a sharded table's), each row's copy is served by its own group's gate, even
// in a batch that found another row's gate open; a batch read keeps copies only of the rows whose gate serves; and
// no copy is served or kept of a row GateOf refuses (a key with no shard), by a read or a write.
func TestHeldGateOf(t *testing.T) {
	reg := validity.NewRegistry()
	open, shut := reg.Gate("open"), reg.Gate("shut")
	open.SetMode(validity.TTLBounded, "test")
	c, st := newTestCache(t, nil)
	c.gateOf = func(row []byte) (*validity.Gate, bool) {
		switch string(row) {
		case "a":
			return open, true
		case "b":
			return shut, true
		}
		return nil, false
	}
	if _, err := testenv.SharedDB(t).Exec("INSERT INTO test.rowcache_rows VALUES ('a', 'ra'), ('b', 'rb'), ('x', 'rx')"); err != nil {
		t.Fatal(err)
	}
	rows := [][]byte{[]byte("a"), []byte("b"), []byte("x")}
	items, found := make([]store.Item, 3), make([]bool, 3)
	if err := c.ReadMany([]int{0, 1, 2}, rows, items, found, true); err != nil || !found[0] || !found[1] || !found[2] {
		t.Fatalf("read many: %v %v", found, err)
	}
	if it, look := c.Held([]byte("a"), Serve); look != Hit || string(it.Value) != "ra" {
		t.Errorf("row a, its gate open: %q %v, want Hit", it.Value, look)
	}
	for _, use := range []Use{Serve, Vouched} {
		for _, row := range []string{"b", "x"} {
			if _, look := c.Held([]byte(row), use); look != Bypass {
				t.Errorf("row %s, use %d: %v, want Bypass", row, use, look)
			}
		}
	}
	shut.SetMode(validity.TTLBounded, "test")
	if _, look := c.Held([]byte("b"), Serve); look != Miss {
		t.Errorf("row b, its gate now open: %v, want Miss (the batch read kept no copy while it was shut)", look)
	}
	c.WroteThrough([]byte("x"), c.Stamp(), store.Item{Value: []byte("written")})
	if _, ok := st.Get(c.Key([]byte("x"))); ok {
		t.Error("a write of a row GateOf refuses kept a copy")
	}
}
