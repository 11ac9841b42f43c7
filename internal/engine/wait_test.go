package engine

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/keywaydb/keyway/internal/container"
	"github.com/keywaydb/keyway/internal/store"
	"github.com/keywaydb/keyway/internal/validity"
	"github.com/keywaydb/keyway/internal/writebehind"
)

// TestMayWait: a command may wait (for the table) unless the local store answers it: keys of no container, a read
// of a row whose valid copy is held, a plain set on a write = "async" container (queued); a read without a copy, a
// set that writes the table, and any other command on a table may.
func TestMayWait(t *testing.T) {
	r := newWriteThroughRig(t, map[string]string{"v": "VARCHAR(20)"})
	async := r.asyncContainer(t, r.e)
	r.e.SetContainers([]*Table{r.t["v"], async}, "")

	check := func(key string, a Access, want bool) {
		t.Helper()
		if got := r.e.MayWait([]byte(key), a); got != want {
			t.Errorf("MayWait(%q, %d) = %v, want %v", key, a, got, want)
		}
	}
	for _, a := range []Access{AccessRead, AccessSet, AccessOther} {
		check("plain", a, false)
		check("@@missing.k", a, false) // answered at once: no such container
		check("@@v.k", a, true)        // no copy held; a set or delete writes the table
	}
	check("@@async.k", AccessSet, false)
	check("@@async.k", AccessOther, true)

	if st, _, err := r.e.StoreValue([]byte("@@v.k"), []byte("x"), StoreRequest{Mode: Set}); err != nil || st != Stored {
		t.Fatalf("set: %v %v", st, err)
	}
	check("@@v.k", AccessRead, false) // the set wrote its copy through
	check("@@v.K", AccessRead, false) // the same row, as the key column compares keys
	check("@@v.k", AccessSet, true)
	r.e.DroppedWrite(r.t["v"], []byte("k")) // drops the copy, as a refused write does
	check("@@v.k", AccessRead, true)
}

// asyncContainer opens "async", a write = "async" container (default write-behind options) on the rig's table
// with value column v, in e; closed when the test ends.
func (r *writeThroughRig) asyncContainer(tb testing.TB, e *Engine) *Table {
	tb.Helper()
	c, err := container.Open(context.Background(), r.db, container.Def{Name: "async", Schema: "test", Table: "engine_wt",
		KeyColumn: "k", ValueColumns: []string{"v"}, FlagsColumn: "fl", CASColumn: "cas", ExpiryColumn: "exp"}, container.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() })
	async := e.NewContainer(ContainerOptions{Container: c, WriteBehind: &writebehind.Options{},
		Policies: container.Policies{Get: container.Caching, Set: container.Caching, Delete: container.Caching, Flush: container.CacheOnly}})
	tb.Cleanup(func() { async.Behind.Close() })
	return async
}

// TestTryGetMulti: a get that must not wait is answered from what keyway holds (local keys, rows whose valid copy is
// held) and counted once; when any key's answer needs the table it is ErrWouldWait, with nothing counted, and
// GetMulti then answers it.
func TestTryGetMulti(t *testing.T) {
	r := newWriteThroughRig(t, map[string]string{"v": "VARCHAR(20)"})
	if st, _, err := r.e.StoreValue([]byte("plain"), []byte("p"), StoreRequest{Mode: Set}); err != nil || st != Stored {
		t.Fatalf("set plain: %v %v", st, err)
	}
	keys := func(ks ...string) [][]byte {
		out := make([][]byte, len(ks))
		for i, k := range ks {
			out[i] = []byte(k)
		}
		return out
	}
	answered := func(want []string, ks ...string) {
		t.Helper()
		gets := r.e.counters.CmdGet.Load()
		items, found, err := r.e.TryGetMulti(nil, keys(ks...))
		if err != nil {
			t.Fatalf("TryGetMulti(%q): %v", ks, err)
		}
		for i, w := range want {
			if got := string(items[i].Value); found[i] != (w != "") || got != w {
				t.Fatalf("TryGetMulti(%q)[%d] = %q %v, want %q", ks, i, got, found[i], w)
			}
		}
		if n := r.e.counters.CmdGet.Load() - gets; n != int64(len(ks)) {
			t.Fatalf("TryGetMulti(%q) counted %d gets, want %d", ks, n, len(ks))
		}
		if len(ks) == 1 { // the one-key form answers the same, counted the same
			gets := r.e.counters.CmdGet.Load()
			it, ok, err := r.e.TryGetTallied(nil, []byte(ks[0]))
			if err != nil || ok != (want[0] != "") || string(it.Value) != want[0] {
				t.Fatalf("TryGetTallied(%q) = %q %v %v, want %q", ks[0], it.Value, ok, err, want[0])
			}
			if n := r.e.counters.CmdGet.Load() - gets; n != 1 {
				t.Fatalf("TryGetTallied(%q) counted %d gets, want 1", ks[0], n)
			}
		}
	}
	wouldWait := func(ks ...string) {
		t.Helper()
		gets := r.e.counters.CmdGet.Load()
		if _, _, err := r.e.TryGetMulti(nil, keys(ks...)); !errors.Is(err, ErrWouldWait) {
			t.Fatalf("TryGetMulti(%q): %v, want ErrWouldWait", ks, err)
		}
		if n := r.e.counters.CmdGet.Load() - gets; n != 0 {
			t.Fatalf("TryGetMulti(%q) counted %d gets, want none", ks, n)
		}
		if len(ks) == 1 {
			if _, _, err := r.e.TryGetTallied(nil, []byte(ks[0])); !errors.Is(err, ErrWouldWait) {
				t.Fatalf("TryGetTallied(%q): %v, want ErrWouldWait", ks[0], err)
			}
			if n := r.e.counters.CmdGet.Load() - gets; n != 0 {
				t.Fatalf("TryGetTallied(%q) counted %d gets, want none", ks[0], n)
			}
		}
	}
	answered([]string{"p", ""}, "plain", "nothing")
	answered([]string{"p"}, "plain")
	answered([]string{""}, "nothing")
	wouldWait("@@v.k")          // no copy held
	wouldWait("plain", "@@v.k") // one key that needs the table is enough
	if st, _, err := r.e.StoreValue([]byte("@@v.k"), []byte("x"), StoreRequest{Mode: Set}); err != nil || st != Stored {
		t.Fatalf("set: %v %v", st, err)
	}
	answered([]string{"x", "p"}, "@@v.k", "plain") // the set wrote its copy through
	r.e.DroppedWrite(r.t["v"], []byte("k"))        // drops the copy, as a refused write does
	wouldWait("@@v.k")
	items, found, err := r.e.GetMulti(keys("@@v.k"))
	if err != nil || !found[0] || string(items[0].Value) != "x" {
		t.Fatalf("GetMulti after ErrWouldWait: %q %v %v", items[0].Value, found[0], err)
	}
	answered([]string{"x"}, "@@v.k") // GetMulti filled the copy

	// With a tally, the gets are counted there, and in the engine's counters once published.
	var tally Tally
	gets := r.e.counters.CmdGet.Load()
	if _, found, err := r.e.TryGetMulti(&tally, keys("@@v.k", "nothing")); err != nil || !found[0] || found[1] {
		t.Fatalf("TryGetMulti with a tally: %v %v", found, err)
	}
	if tally != (Tally{CmdGet: 2, GetHits: 1, GetMisses: 1}) || r.e.counters.CmdGet.Load() != gets {
		t.Fatalf("tally %+v, engine's gets +%d; want 2 gets, 1 hit, 1 miss in the tally only", tally, r.e.counters.CmdGet.Load()-gets)
	}
	r.e.Publish(&tally)
	if n := r.e.counters.CmdGet.Load() - gets; n != 2 {
		t.Fatalf("published %d gets, want 2", n)
	}
}

// BenchmarkCachedGet is a memcache get of a row whose valid copy is held, as an event loop answers it: with the
// check first (MayWait, then GetMulti, as the loop did), in one pass (TryGetMulti), and as a get of one key is
// answered (TryGetTallied: no slices, no allocation).
func BenchmarkCachedGet(b *testing.B) {
	r := newWriteThroughRig(b, map[string]string{"v": "VARCHAR(64)"})
	key := []byte("@@v.bench-key")
	if st, _, err := r.e.StoreValue(key, []byte("forty bytes of value, give or take a few"), StoreRequest{Mode: Set}); err != nil || st != Stored {
		b.Fatalf("set: %v %v", st, err)
	}
	keys := [][]byte{key}
	b.Run("check-then-get", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if r.e.MayWait(key, AccessRead) {
				b.Fatal("no copy held")
			}
			if _, found, err := r.e.GetMulti(keys); err != nil || !found[0] {
				b.Fatal(found, err)
			}
		}
	})
	b.Run("try", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, found, err := r.e.TryGetMulti(nil, keys); err != nil || !found[0] {
				b.Fatal(found, err)
			}
		}
	})
	b.Run("try-one", func(b *testing.B) { // a get of one key, as the memcache door asks it
		b.ReportAllocs()
		for b.Loop() {
			if _, found, err := r.e.TryGetTallied(nil, key); err != nil || !found {
				b.Fatal(found, err)
			}
		}
	})
}

// BenchmarkAsyncSet is a memcache set on a write = "async" container with a persistent store, as an event loop
// answers it: checked, journaled, queued and its copy kept, over 10,000 keys; the queue's rounds to the table run
// meanwhile, and their allocations count too.
func BenchmarkAsyncSet(b *testing.B) {
	r := newWriteThroughRig(b, map[string]string{"v": "VARCHAR(64)"})
	st, err := store.Open(store.Options{MemoryLimit: 64 << 20, DataDir: b.TempDir(), Durability: store.DurabilityAsync})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	e := New(st, Options{})
	e.SetContainers([]*Table{r.asyncContainer(b, e)}, "")
	keys := make([][]byte, 10000)
	for i := range keys {
		keys[i] = fmt.Appendf(nil, "@@async.k%08d", i)
	}
	value := []byte("forty bytes of value, give or take a few")
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if status, _, err := e.StoreValue(keys[i%len(keys)], value, StoreRequest{Mode: Set}); err != nil || status != Stored {
			b.Fatalf("set: %v %v", status, err)
		}
		i++
	}
}

// BenchmarkEcho is what the binlog follower costs keyway per row of its own write-behind statements: holdsRow on the
// echo of a row an async set cached, among 100,000 such copies (a store as large as 8 clients' load makes it, whose
// lookups miss the CPU's caches as the follower's do). Each answer must be "holds": the echo keeps the copy.
func BenchmarkEcho(b *testing.B) {
	r := newWriteThroughRig(b, map[string]string{"v": "VARCHAR(64)"})
	st, err := store.Open(store.Options{MemoryLimit: 256 << 20})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	e := New(st, Options{})
	async := r.asyncContainer(b, e)
	e.SetContainers([]*Table{async}, "")
	const rows = 100000
	value := "forty bytes of value, give or take a few"
	type echo struct {
		vk  []byte
		img validity.RowImage
	}
	columns := map[string]int{"k": 0, "fl": 1, "cas": 2, "exp": 3, "v": 4}
	echoes := make([]echo, rows)
	for i := range echoes {
		row := fmt.Sprintf("k%08d", i)
		status, stored, err := e.StoreValue([]byte("@@async."+row), []byte(value), StoreRequest{Mode: Set})
		if err != nil || status != Stored {
			b.Fatalf("set: %v %v", status, err)
		}
		echoes[i] = echo{vk: async.C.AppendNormKey(nil, []byte(row)),
			img: validity.RowImage{Columns: columns, Values: []any{row, int32(0), int64(stored.CAS), int32(0), value}}}
	}
	if err := async.Behind.Drain(); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		ec := &echoes[i%rows]
		if holds, _ := async.rows.HoldsRow(ec.vk, ec.img, true); !holds {
			b.Fatalf("the echo of row %d does not hold its copy", i%rows)
		}
		i++
	}
}
