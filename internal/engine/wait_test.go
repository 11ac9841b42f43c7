package engine

import (
	"context"
	"fmt"
	"testing"

	"github.com/keywaydb/keyway/internal/container"
	"github.com/keywaydb/keyway/internal/store"
	"github.com/keywaydb/keyway/internal/validity"
	"github.com/keywaydb/keyway/internal/writebehind"
)

// TestMayWait: a command may wait (for the table) unless the local store answers it: keys of no container, a read
// of a row whose valid copy is held (its Waiter is not told), a plain set on a write = "async" container (queued); a
// read without a copy, a set that writes the table, and any other command on a table may.
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
	read := func(key string, wait bool) {
		t.Helper()
		if told := r.toldOnGet(t, key); told != wait {
			t.Errorf("get %q told its Waiter: %v, want %v", key, told, wait)
		}
	}
	for _, a := range []Access{AccessSet, AccessOther} {
		check("plain", a, false)
		check("@@missing.k", a, false) // answered at once: no such container
		check("@@v.k", a, true)        // a set or delete writes the table
	}
	read("plain", false)
	read("@@missing.k", false)
	read("@@v.k", true) // no copy held (and no row: none filled)
	check("@@async.k", AccessSet, false)
	check("@@async.k", AccessOther, true)

	if st, _, err := r.e.StoreValue([]byte("@@v.k"), []byte("x"), StoreRequest{Mode: Set}); err != nil || st != Stored {
		t.Fatalf("set: %v %v", st, err)
	}
	read("@@v.k", false) // the set wrote its copy through
	read("@@v.K", false) // the same row, as the key column compares keys
	check("@@v.k", AccessSet, true)
	r.e.DroppedWrite(r.t["v"], []byte("k")) // drops the copy, as a refused write does
	read("@@v.k", true)
}

// toldOnGet reports whether a get of key told its Waiter that it would wait on MySQL (it fills the row's copy then).
func (r *writeThroughRig) toldOnGet(tb testing.TB, key string) bool {
	tb.Helper()
	var w waitRecorder
	r.e.GetTallied(nil, []byte(key), &w)
	return w.told > 0
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

// waitRecorder counts what the engine tells a Waiter.
type waitRecorder struct{ told int }

func (w *waitRecorder) WillWait() { w.told++ }

// TestWaiterTold: a get is answered from what keyway holds (local keys, rows whose valid copy is held) without
// telling its Waiter; when a key's answer needs the table, the Waiter is told before the table is asked, and the
// get answers from it in the same call, counted once.
func TestWaiterTold(t *testing.T) {
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
	// get asks for ks (the one-key form too when there is one key) and checks the answers, the count and whether
	// the waiter was told.
	get := func(told bool, want []string, ks ...string) {
		t.Helper()
		var w waitRecorder
		gets := r.e.counters.CmdGet.Load()
		items, found, err := r.e.GetMultiTallied(nil, keys(ks...), &w)
		if err != nil {
			t.Fatalf("GetMultiTallied(%q): %v", ks, err)
		}
		for i, want := range want {
			if got := string(items[i].Value); found[i] != (want != "") || got != want {
				t.Fatalf("GetMultiTallied(%q)[%d] = %q %v, want %q", ks, i, got, found[i], want)
			}
		}
		if n := r.e.counters.CmdGet.Load() - gets; n != int64(len(ks)) {
			t.Fatalf("GetMultiTallied(%q) counted %d gets, want %d", ks, n, len(ks))
		}
		if (w.told > 0) != told {
			t.Fatalf("GetMultiTallied(%q) told its waiter %d times, want told: %v", ks, w.told, told)
		}
		if len(ks) == 1 { // the one-key form answers the same, counted the same
			w, gets := waitRecorder{}, r.e.counters.CmdGet.Load()
			it, ok, err := r.e.GetTallied(nil, []byte(ks[0]), &w)
			if err != nil || ok != (want[0] != "") || string(it.Value) != want[0] {
				t.Fatalf("GetTallied(%q) = %q %v %v, want %q", ks[0], it.Value, ok, err, want[0])
			}
			if n := r.e.counters.CmdGet.Load() - gets; n != 1 {
				t.Fatalf("GetTallied(%q) counted %d gets, want 1", ks[0], n)
			}
			if (w.told > 0) != told {
				t.Fatalf("GetTallied(%q) told its waiter %d times, want told: %v", ks[0], w.told, told)
			}
		}
	}
	get(false, []string{"p", ""}, "plain", "nothing")
	get(false, []string{"p"}, "plain")
	get(false, []string{""}, "nothing")
	get(true, []string{""}, "@@v.k")               // no copy held (and no row: none filled)
	get(true, []string{"p", ""}, "plain", "@@v.k") // one key that needs the table is enough
	if st, _, err := r.e.StoreValue([]byte("@@v.k"), []byte("x"), StoreRequest{Mode: Set}); err != nil || st != Stored {
		t.Fatalf("set: %v %v", st, err)
	}
	get(false, []string{"x", "p"}, "@@v.k", "plain") // the set wrote its copy through
	r.e.DroppedWrite(r.t["v"], []byte("k"))          // drops the copy, as a refused write does
	get(true, []string{"x", "p"}, "@@v.k", "plain")
	get(false, []string{"x"}, "@@v.k") // the multi-get filled the copy
	r.e.DroppedWrite(r.t["v"], []byte("k"))
	var w waitRecorder
	if it, ok, err := r.e.GetTallied(nil, []byte("@@v.k"), &w); err != nil || !ok || string(it.Value) != "x" || w.told != 1 {
		t.Fatalf("GetTallied without a copy: %q %v %v, told %d times; want the row, told once", it.Value, ok, err, w.told)
	}
	get(false, []string{"x"}, "@@v.k") // the get filled the copy

	// With a tally, the gets are counted there, and in the engine's counters once published.
	var tally Tally
	gets := r.e.counters.CmdGet.Load()
	if _, found, err := r.e.GetMultiTallied(&tally, keys("@@v.k", "nothing"), nil); err != nil || !found[0] || found[1] {
		t.Fatalf("GetMultiTallied with a tally: %v %v", found, err)
	}
	if tally != (Tally{CmdGet: 2, GetHits: 1, GetMisses: 1}) || r.e.counters.CmdGet.Load() != gets {
		t.Fatalf("tally %+v, engine's gets +%d; want 2 gets, 1 hit, 1 miss in the tally only", tally, r.e.counters.CmdGet.Load()-gets)
	}
	r.e.Publish(&tally)
	if n := r.e.counters.CmdGet.Load() - gets; n != 2 {
		t.Fatalf("published %d gets, want 2", n)
	}
}

// BenchmarkCachedGet is a memcache get of a row whose valid copy is held, as an event loop answers it: a multi-get's
// one pass with a Waiter (GetMultiTallied), and a get of one key (GetTallied with a Waiter: no slices, no
// allocation).
func BenchmarkCachedGet(b *testing.B) {
	r := newWriteThroughRig(b, map[string]string{"v": "VARCHAR(64)"})
	key := []byte("@@v.bench-key")
	if st, _, err := r.e.StoreValue(key, []byte("forty bytes of value, give or take a few"), StoreRequest{Mode: Set}); err != nil || st != Stored {
		b.Fatalf("set: %v %v", st, err)
	}
	keys := [][]byte{key}
	var w waitRecorder
	b.Run("try", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, found, err := r.e.GetMultiTallied(nil, keys, &w); err != nil || !found[0] {
				b.Fatal(found, err)
			}
		}
	})
	b.Run("try-one", func(b *testing.B) { // a get of one key, as the memcache door asks it
		b.ReportAllocs()
		for b.Loop() {
			if _, found, err := r.e.GetTallied(nil, key, &w); err != nil || !found {
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

// BenchmarkEcho is what the binlog follower costs keyway per row of its own write-behind statements: HoldsRow on the
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
