package store

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// valueOf is the value the arena tests store under key: its bytes say which key and version they belong to, so a
// value read back (or held while the ring moves on) can be checked.
func valueOf(key string, version, size int) []byte {
	head := fmt.Sprintf("%s/%d/", key, version)
	v := make([]byte, size)
	for i := range v {
		v[i] = head[i%len(head)]
	}
	return v
}

func setBytes(t testing.TB, s *Store, key string, value []byte) {
	t.Helper()
	if _, err := s.Update([]byte(key), func(*Item) (Action, Item) {
		return Replace, Item{Value: value}
	}); err != nil {
		t.Fatalf("set %s: %v", key, err)
	}
}

// checkArenas checks every shard's ring against its index and counts: each live record is indexed at its offset
// and found by its key, the index holds nothing else, and the shard's item count, bytes and class counts are the
// live records'.
func checkArenas(t *testing.T, s *Store) {
	t.Helper()
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		a := &sh.mu.a
		var items, used, records int64
		var classes [NumClasses]int64
		for off := a.first(); off >= 0; off = a.next(off) {
			if a.logical(off) != a.tailLog+records {
				t.Errorf("shard %d: record at %d has logical position %d, want %d", i, off, a.logical(off), a.tailLog+records)
			}
			records += a.size(off)
			if !a.live(off) {
				continue
			}
			items++
			used += a.charge(off)
			classes[a.cls(off)]++
			key := a.key(off)
			if got, _ := a.find(key, a.hashOf(key)); got != off {
				t.Errorf("shard %d: %q at %d found at %d", i, key, off, got)
			}
		}
		if a.headLog-a.tailLog != records {
			t.Errorf("shard %d: the head wrote %d bytes more than the tail passed, the ring holds %d", i, a.headLog-a.tailLog, records)
		}
		entries := 0
		for _, e := range a.table {
			if e != 0 {
				entries++
				if off := int64(e&offMask) - 1; !a.live(off) {
					t.Errorf("shard %d: index points at a dead record (%d)", i, off)
				}
			}
		}
		if int64(entries) != items || int64(a.count) != items || sh.mu.items != items || sh.mu.used != used {
			t.Errorf("shard %d: %d live records (%d bytes), index %d entries (count %d), shard counts %d items, %d bytes",
				i, items, used, entries, a.count, sh.mu.items, sh.mu.used)
		}
		for c := range classes {
			if sh.mu.classes[c].Items != classes[c] {
				t.Errorf("shard %d: class %d counts %d items, holds %d", i, c+1, sh.mu.classes[c].Items, classes[c])
			}
		}
		if a.memory() > a.limit+int64(len(a.tableMem))/2+pageSize {
			t.Errorf("shard %d: arena holds %d bytes, limit %d", i, a.memory(), a.limit)
		}
		sh.mu.Unlock()
	}
}

// TestArenaWrapsAround fills a small store many times over: the rings wrap again and again, every item still held
// reads back as it was stored, and memory stays within the limit.
func TestArenaWrapsAround(t *testing.T) {
	const limit = 1 << 20
	s, err := Open(Options{MemoryLimit: limit})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const n = 40000 // about 6 MiB of records into 1 MiB
	for i := range n {
		k := fmt.Sprintf("k%d", i)
		setBytes(t, s, k, valueOf(k, 0, 100+i%50))
		if i%5000 == 0 {
			checkArenas(t, s)
		}
	}
	checkArenas(t, s)
	st := s.Stats()
	if st.Evictions == 0 || st.Bytes > limit || st.Arena > limit+limit/8 {
		t.Fatalf("stats after %d sets into %d bytes: %+v", n, limit, st)
	}
	held := 0
	for i := range n {
		k := fmt.Sprintf("k%d", i)
		if it, ok := s.Get([]byte(k)); ok {
			held++
			if !bytes.Equal(it.Value, valueOf(k, 0, 100+i%50)) {
				t.Fatalf("%s reads %q", k, it.Value)
			}
		}
	}
	if int64(held) != st.CurrItems || held < 4000 {
		t.Fatalf("%d items read back, store counts %d", held, st.CurrItems)
	}
}

// TestArenaMixedSizes churns items of sizes from a few bytes to a sixth of a shard, replacing and deleting some:
// eviction makes room for large items among small ones, hot items survive, and the counts stay exact.
func TestArenaMixedSizes(t *testing.T) {
	const limit = 2 << 20
	s, err := Open(Options{MemoryLimit: limit})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	rng := rand.New(rand.NewPCG(1, 2))
	sizes := map[string]int{}
	version := map[string]int{}
	hot := []string{"hot-a", "hot-b", "hot-c"}
	for _, k := range hot {
		setBytes(t, s, k, valueOf(k, 0, 500))
	}
	for i := range 30000 {
		k := fmt.Sprintf("k%d", rng.IntN(5000))
		switch r := rng.IntN(100); {
		case r < 5:
			s.Update([]byte(k), func(*Item) (Action, Item) { return Remove, Item{} })
			delete(sizes, k)
		default:
			size := rng.IntN(200)
			if r < 15 {
				size = 1000 + rng.IntN(20000)
			}
			version[k]++
			setBytes(t, s, k, valueOf(k, version[k], size))
			sizes[k] = size
		}
		if i%50 == 0 {
			for _, k := range hot {
				if it, ok := s.Get([]byte(k)); !ok || !bytes.Equal(it.Value, valueOf(k, 0, 500)) {
					t.Fatalf("hot key %s lost after %d changes", k, i)
				}
			}
		}
		if i%3000 == 0 {
			checkArenas(t, s)
		}
	}
	checkArenas(t, s)
	seen := 0
	s.Walk(func(key string, it Item) bool {
		seen++
		if key[0] == 'h' {
			return true
		}
		size, ok := sizes[key]
		if !ok {
			t.Errorf("%s held after its delete", key)
		} else if !bytes.Equal(it.Value, valueOf(key, version[key], size)) {
			t.Errorf("%s holds %d bytes, not its version %d of %d", key, len(it.Value), version[key], size)
		}
		return true
	})
	st := s.Stats()
	if int64(seen) != st.CurrItems || st.Evictions == 0 || st.Bytes > limit {
		t.Fatalf("walk saw %d items; stats %+v", seen, st)
	}
}

// TestValueHeldWhileEvicted: values read out of the store stay as they were while the ring that held them is
// overwritten (their items evicted and others written over their bytes), readers and writers running at once.
func TestValueHeldWhileEvicted(t *testing.T) {
	s, err := Open(Options{MemoryLimit: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const keys = 2000
	for i := range keys {
		k := fmt.Sprintf("k%d", i)
		setBytes(t, s, k, valueOf(k, 0, 300))
	}
	held, _ := s.Get([]byte("k1999"))
	heldCopy := bytes.Clone(held.Value)
	var stop atomic.Bool
	var wg sync.WaitGroup
	var reads atomic.Int64
	for r := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var buf []byte
			var keep, copies [][]byte // values held across later reads and writes, and what they were
			for i := 0; !stop.Load(); i++ {
				k := fmt.Sprintf("k%d", (i*7+r)%(keys/2)) // not k1999, which must go
				var it Item
				var ok bool
				it, buf, ok = s.GetAppend([]byte(k), buf[:0])
				if ok && !bytes.HasPrefix(it.Value, []byte(k+"/0/")) {
					t.Errorf("%s reads %.20q", k, it.Value)
					return
				}
				if it, ok := s.Get([]byte(k)); ok && len(keep) < 100 {
					keep, copies = append(keep, it.Value), append(copies, bytes.Clone(it.Value))
				}
				reads.Add(1)
			}
			for i := range keep {
				if !bytes.Equal(keep[i], copies[i]) {
					t.Errorf("a held value changed: %.40q, was %.40q", keep[i], copies[i])
				}
			}
		}()
	}
	for i := range 40000 {
		k := fmt.Sprintf("w%d", i)
		setBytes(t, s, k, valueOf(k, 0, 300))
	}
	stop.Store(true)
	wg.Wait()
	if !bytes.Equal(held.Value, heldCopy) {
		t.Fatal("a value read before its item was evicted changed")
	}
	if _, ok := s.Get([]byte("k1999")); ok || s.Stats().Evictions == 0 || reads.Load() == 0 {
		t.Fatalf("k1999 still held, or no evictions (%+v)", s.Stats())
	}
	checkArenas(t, s)
}

// TestIndexCollisions makes every key's index hash one of a few values (the shard is still the key's own): keys
// that share a hash are told apart by the stored key through sets, replaces, deletes, eviction, the index's growth
// and a lower limit.
func TestIndexCollisions(t *testing.T) {
	for _, mask := range []uint64{0, 0x30} {
		t.Run(fmt.Sprintf("mask %#x", mask), func(t *testing.T) {
			s, err := open(Options{MemoryLimit: 4 << 20}, mask)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			const n = 3000
			for i := range n {
				k := fmt.Sprintf("c%d", i)
				setBytes(t, s, k, valueOf(k, 0, 20))
			}
			checkArenas(t, s)
			for i := 0; i < n; i += 2 {
				s.Update(fmt.Appendf(nil, "c%d", i), func(*Item) (Action, Item) { return Remove, Item{} })
			}
			for i := 1; i < n; i += 4 {
				k := fmt.Sprintf("c%d", i)
				setBytes(t, s, k, valueOf(k, 1, 30))
			}
			checkArenas(t, s)
			for i := range n {
				k := fmt.Sprintf("c%d", i)
				it, ok := s.Get([]byte(k))
				switch {
				case i%2 == 0 && ok:
					t.Fatalf("%s held after its delete", k)
				case i%2 == 1 && !ok:
					t.Fatalf("%s lost", k)
				case i%4 == 1 && !bytes.Equal(it.Value, valueOf(k, 1, 30)), i%4 == 3 && !bytes.Equal(it.Value, valueOf(k, 0, 20)):
					t.Fatalf("%s reads %q", k, it.Value)
				}
			}
			if err := s.SetLimit(256 << 10); err != nil {
				t.Fatal(err)
			}
			checkArenas(t, s)
			for i := range 5000 {
				k := fmt.Sprintf("e%d", i)
				setBytes(t, s, k, valueOf(k, 0, 40))
			}
			checkArenas(t, s)
			if st := s.Stats(); st.Evictions == 0 {
				t.Fatalf("no evictions: %+v", st)
			}
		})
	}
}

// TestRestartLoadsIntoArenas: a restart reads the disk back into the arenas, at the same limit (everything) and at
// a smaller one (what fits, the rest dropped from the disk too).
func TestRestartLoadsIntoArenas(t *testing.T) {
	dir := t.TempDir()
	o := Options{MemoryLimit: 8 << 20, DataDir: dir, Durability: DurabilityAsync}
	s, err := Open(o)
	if err != nil {
		t.Fatal(err)
	}
	const n = 20000
	for i := range n {
		k := fmt.Sprintf("r%d", i)
		setBytes(t, s, k, valueOf(k, 0, 100+i%100))
	}
	s.Update([]byte("r7"), func(cur *Item) (Action, Item) { cur.Flags = 77; cur.Exptime = 0; return Save, Item{} })
	before := s.Stats()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if s, err = Open(o); err != nil {
		t.Fatal(err)
	}
	checkArenas(t, s)
	if st := s.Stats(); st.CurrItems != n || st.Bytes != before.Bytes {
		t.Fatalf("after restart: %+v, before %+v", st, before)
	}
	for i := range n {
		k := fmt.Sprintf("r%d", i)
		it, ok := s.Get([]byte(k))
		if !ok || !bytes.Equal(it.Value, valueOf(k, 0, 100+i%100)) || (i == 7) != (it.Flags == 77) {
			t.Fatalf("%s after restart: %v %q flags %d", k, ok, it.Value, it.Flags)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	o.MemoryLimit = 1 << 20
	if s, err = Open(o); err != nil {
		t.Fatal(err)
	}
	checkArenas(t, s)
	small := s.Stats()
	if small.CurrItems == 0 || small.CurrItems >= n || small.Evictions != 0 || small.Bytes > o.MemoryLimit {
		t.Fatalf("after a restart with a smaller limit: %+v", small)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	o.MemoryLimit = 8 << 20
	if s, err = Open(o); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if st := s.Stats(); st.CurrItems != small.CurrItems {
		t.Fatalf("the items a smaller limit dropped came back: %d, want %d", st.CurrItems, small.CurrItems)
	}
}

// TestSetLimitRemakesArenas: a lower limit keeps the newest items that fit and gives memory back; a higher one
// keeps every item and lets more in.
func TestSetLimitRemakesArenas(t *testing.T) {
	s, err := Open(Options{MemoryLimit: 4 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i := range 20000 {
		k := fmt.Sprintf("s%d", i)
		setBytes(t, s, k, valueOf(k, 0, 150))
	}
	full := s.Stats()
	if err := s.SetLimit(1 << 20); err != nil {
		t.Fatal(err)
	}
	checkArenas(t, s)
	low := s.Stats()
	if low.Arena > 1<<20 || low.CurrItems >= full.CurrItems || low.Evictions <= full.Evictions {
		t.Fatalf("lowered: %+v (full %+v)", low, full)
	}
	if _, ok := s.Get([]byte("s19999")); !ok {
		t.Fatal("the newest item went with the lower limit")
	}
	if err := s.SetLimit(8 << 20); err != nil {
		t.Fatal(err)
	}
	checkArenas(t, s)
	if st := s.Stats(); st.CurrItems != low.CurrItems {
		t.Fatalf("raised: %d items, want %d", st.CurrItems, low.CurrItems)
	}
	for i := range 30000 {
		k := fmt.Sprintf("t%d", i)
		setBytes(t, s, k, valueOf(k, 0, 150))
	}
	checkArenas(t, s)
	if st := s.Stats(); st.CurrItems <= full.CurrItems {
		t.Fatalf("raised limit holds %d items, the first %d", st.CurrItems, full.CurrItems)
	}
}

// TestWalkWhileRingMoves walks in small batches while fn stores enough to evict what the walk has not reached:
// the tail passes the walk's cursor, which goes on from the tail, and every item the walk sees is one the store
// held, whole.
func TestWalkWhileRingMoves(t *testing.T) {
	defer func(b int) { walkBatch = b }(walkBatch)
	walkBatch = 2 << 10
	s, err := Open(Options{MemoryLimit: 2 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i := range 10000 {
		k := fmt.Sprintf("a%d", i)
		setBytes(t, s, k, valueOf(k, 0, 150))
	}
	seen, w := 0, 0
	s.Walk(func(key string, it Item) bool {
		seen++
		if !bytes.Equal(it.Value, valueOf(key, 0, 150)) {
			t.Fatalf("walk saw %s holding %.30q", key, it.Value)
		}
		if seen%10 == 0 {
			for range 1000 {
				k := fmt.Sprintf("b%d", w)
				w++
				setBytes(t, s, k, valueOf(k, 0, 150))
			}
		}
		return seen < 100000
	})
	if seen == 0 || seen >= 100000 || s.Stats().Evictions == 0 {
		t.Fatalf("walk saw %d items (stopped at 100000), %d evictions", seen, s.Stats().Evictions)
	}
	checkArenas(t, s)
}

// TestReplaceCopiesTheValue: the caller may reuse the value it handed to Update once Update returns; memory and
// disk keep what it held then.
func TestReplaceCopiesTheValue(t *testing.T) {
	for _, d := range []Durability{DurabilityNone, DurabilityAsync, DurabilitySync} {
		o := Options{MemoryLimit: 1 << 20, DataDir: t.TempDir(), Durability: d}
		s, err := Open(o)
		if err != nil {
			t.Fatal(err)
		}
		buf := []byte("first value")
		setBytes(t, s, "k", buf)
		copy(buf, "XXXXXXXXXXX")
		if it, ok := s.Get([]byte("k")); !ok || string(it.Value) != "first value" {
			t.Fatalf("durability %d: k reads %q after the caller reused its value", d, it.Value)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if d == DurabilityNone {
			continue
		}
		if s, err = Open(o); err != nil {
			t.Fatal(err)
		}
		if it, ok := s.Get([]byte("k")); !ok || string(it.Value) != "first value" {
			t.Fatalf("durability %d: k reads %q after a restart", d, it.Value)
		}
		s.Close()
	}
}

// TestUseAfterClose: a caller still running when the store closes (a connection the door's shutdown gave up on)
// finds an empty store, not unmapped memory.
func TestUseAfterClose(t *testing.T) {
	s, err := Open(Options{MemoryLimit: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 1000 {
		k := fmt.Sprintf("k%d", i)
		setBytes(t, s, k, valueOf(k, 0, 100))
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, ok := s.Get([]byte("k1")); ok {
		t.Fatal("a closed store still holds k1")
	}
	for i := range 100 {
		k := fmt.Sprintf("n%d", i)
		s.Update([]byte(k), func(*Item) (Action, Item) { return Replace, Item{Value: valueOf(k, 0, 100)} })
		s.Get([]byte(k))
	}
	s.Walk(func(string, Item) bool { return true })
	s.FlushAll()
	if err := s.SetLimit(2 << 20); err != ErrClosed {
		t.Fatalf("SetLimit after Close: %v", err)
	}
	checkArenas(t, s)
	if st := s.Stats(); st.CurrItems > 100 {
		t.Fatalf("after close: %+v", st)
	}
}

// TestSetLimitRacesClose: SetLimit running while Close gives the arenas back leaves no shard with a mapped arena
// (each one is the closed store's empty arena on Go's heap) and fails with ErrClosed or succeeds.
func TestSetLimitRacesClose(t *testing.T) {
	for round := range 20 {
		s, err := Open(Options{MemoryLimit: 4 << 20})
		if err != nil {
			t.Fatal(err)
		}
		for i := range 200 {
			k := fmt.Sprintf("k%d", i)
			setBytes(t, s, k, valueOf(k, 0, 100))
		}
		var wg sync.WaitGroup
		errs := make(chan error, 8)
		for g := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for j := range 50 {
					if err := s.SetLimit(int64(2+(g+j)%6) << 20); err != nil {
						if err != ErrClosed {
							errs <- err
						}
						return
					}
				}
			}()
		}
		if round%2 == 1 {
			runtime.Gosched()
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("SetLimit beside Close: %v", err)
		}
		for i := range s.shards {
			sh := &s.shards[i]
			sh.mu.Lock()
			mapped := sh.mu.a.tableMem != nil || len(sh.mu.a.buf) != pageSize
			sh.mu.Unlock()
			if mapped {
				t.Fatalf("round %d: shard %d keeps a mapped arena (%d bytes) after Close", round, i, len(sh.mu.a.buf))
			}
		}
	}
}

// TestPendingChunksReused: with async durability the pending records' keys and values are carved from chunks the
// committer gives back and the shards reuse; what reaches the disk is each change as it was made, although the
// callers reuse their value buffers and chunks are reused round after round, and a Save's answer is the caller's
// own copy.
func TestPendingChunksReused(t *testing.T) {
	dir := t.TempDir()
	o := Options{MemoryLimit: 64 << 20, DataDir: dir, Durability: DurabilityAsync, FlushInterval: 5 * time.Millisecond}
	s, err := Open(o)
	if err != nil {
		t.Fatal(err)
	}
	const n = 20000
	size := func(i int) int {
		if i%97 == 0 {
			return 20 << 10 // past a quarter chunk: an allocation of its own
		}
		return 1 + i%700
	}
	buf := make([]byte, 20<<10)
	for round := range 2 {
		for i := range n {
			k := fmt.Sprintf("k%d", i)
			v := buf[:size(i)]
			copy(v, valueOf(k, round, len(v)))
			setBytes(t, s, k, v)
			clear(v) // the caller reuses its buffer at once
			if i%3 == 0 {
				// A Save (new flags, same value) that asks for the value back.
				got, err := s.UpdateInto([]byte(k), func(cur *Item) (Action, Item) {
					cur.Flags = uint32(round + 1)
					return Save, *cur
				}, nil)
				if err != nil || !bytes.Equal(got.Value, valueOf(k, round, size(i))) {
					t.Fatalf("%s: Save answered %v %.20q", k, err, got.Value)
				}
				got.Value[0] ^= 0xff // the answer is the caller's to change
			}
			if i%1000 == 0 {
				time.Sleep(6 * time.Millisecond) // let commit rounds give chunks back between the changes
			}
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if s, err = Open(o); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i := range n {
		k := fmt.Sprintf("k%d", i)
		it, ok := s.Get([]byte(k))
		if !ok || !bytes.Equal(it.Value, valueOf(k, 1, size(i))) {
			t.Fatalf("%s after a restart: %v %.20q", k, ok, it.Value)
		}
		if want := uint32(0); i%3 == 0 && it.Flags != 2 || i%3 != 0 && it.Flags != want {
			t.Fatalf("%s after a restart: flags %d", k, it.Flags)
		}
	}
}

// TestTaggedRecords checks the header's optional tag and 32-bit times: a tagged item keeps its tag and is charged
// its 8 bytes, an untagged one is charged Size; a change in place keeps the tag; an exptime outside 32 bits is
// kept as the nearest second that fits (before 1970: long expired).
func TestTaggedRecords(t *testing.T) {
	s, err := Open(Options{MemoryLimit: 1 << 20, Now: func() int64 { return 1000 }})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	put := func(key string, it Item) {
		t.Helper()
		if _, err := s.Update([]byte(key), func(*Item) (Action, Item) { return Replace, it }); err != nil {
			t.Fatalf("set %s: %v", key, err)
		}
	}
	put("tagged", Item{Value: []byte("abc"), Tag: 1 << 40, Flags: 5})
	put("plain", Item{Value: []byte("abc"), Flags: 5})
	if got, want := s.Stats().Bytes, Size(6, 3)+tagLen+Size(5, 3); got != want {
		t.Errorf("bytes %d, want %d (two items, one with a tag)", got, want)
	}
	if it, ok := s.Get([]byte("tagged")); !ok || it.Tag != 1<<40 || string(it.Value) != "abc" || it.Flags != 5 {
		t.Errorf("tagged: %+v %v", it, ok)
	}
	if it, ok := s.Get([]byte("plain")); !ok || it.Tag != 0 || string(it.Value) != "abc" {
		t.Errorf("plain: %+v %v", it, ok)
	}
	for _, k := range []string{"tagged", "plain"} {
		s.Update([]byte(k), func(cur *Item) (Action, Item) { cur.Flags, cur.Tag = 9, 7; return Save, Item{} })
	}
	if it, _ := s.Get([]byte("tagged")); it.Tag != 1<<40 || it.Flags != 9 || string(it.Value) != "abc" {
		t.Errorf("tagged after a change in place: %+v", it)
	}
	if it, _ := s.Get([]byte("plain")); it.Tag != 0 || it.Flags != 9 || string(it.Value) != "abc" {
		t.Errorf("plain after a change in place: %+v", it)
	}
	put("far", Item{Value: []byte("x"), Exptime: 1 << 40})
	if it, ok := s.Get([]byte("far")); !ok || it.Exptime != 1<<32-1 {
		t.Errorf("far future: %+v %v, want exptime %d", it, ok, int64(1<<32-1))
	}
	put("past", Item{Value: []byte("x"), Exptime: -5})
	if _, ok := s.Get([]byte("past")); ok {
		t.Error("an exptime before 1970 is live")
	}
	checkArenas(t, s)
}

// TestIndexSizes grows one arena's index through sizes that are not powers of two, with keys added and removed at
// random (and hashes narrowed, so probe runs are long and cross the table's end): every live key is found at its
// record, no removed one is, and the table is at most three quarters full, and at least half just after it grew.
func TestIndexSizes(t *testing.T) {
	for _, mask := range []uint64{^uint64(0), 0xff0} {
		a := newArena(4<<20, mask, 0)
		live := map[string]int64{}
		rng := rand.New(rand.NewPCG(1, 2))
		sizes := map[int]bool{}
		var removed []string
		for i := range 20000 {
			if len(live) > 0 && rng.IntN(3) == 0 {
				for k, off := range live {
					slot := a.slotOf(off)
					a.clearBits(off, bLive)
					a.unindex(slot)
					delete(live, k)
					removed = append(removed, k)
					break
				}
				continue
			}
			key := fmt.Appendf(nil, "k%d", i)
			it := Item{Value: []byte("v")}
			n := recLen(len(key), 1, 0)
			if !a.fits(n) {
				break
			}
			off := a.alloc(n)
			a.write(off, key, &it, 0)
			a.index(a.hashOf(key), off)
			live[string(key)] = off
			if !sizes[len(a.table)] && len(a.table) > minTable && a.count*2 < len(a.table) {
				t.Fatalf("mask %#x: grown to %d slots for %d entries", mask, len(a.table), a.count)
			}
			sizes[len(a.table)] = true
			if a.count*4 > len(a.table)*3 {
				t.Fatalf("mask %#x: %d entries in %d slots", mask, a.count, len(a.table))
			}
		}
		for k, off := range live {
			if got, _ := a.find([]byte(k), a.hashOf([]byte(k))); got != off {
				t.Fatalf("mask %#x: %s at %d found at %d", mask, k, off, got)
			}
		}
		for _, k := range removed {
			if got, _ := a.find([]byte(k), a.hashOf([]byte(k))); got >= 0 {
				t.Fatalf("mask %#x: removed %s found at %d", mask, k, got)
			}
		}
		if a.count != len(live) {
			t.Fatalf("mask %#x: %d entries, %d live", mask, a.count, len(live))
		}
		for _, want := range []int{64, 96, 128, 192, 256, 384, 512, 768, 1024} {
			if !sizes[want] {
				t.Errorf("mask %#x: the index never had %d slots (had %v)", mask, want, sizes)
			}
		}
		a.free()
	}
}
