package qcache

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/keywaydb/keyway/internal/validity"
)

func newCache(limit int64) (*Cache, *validity.Registry) {
	reg := validity.NewRegistry()
	return New(Options{MemoryLimit: limit, Registry: reg}), reg
}

var tbl = []validity.TableID{{Schema: "s", Name: "t"}}

func TestFillRacingAWriteIsDropped(t *testing.T) {
	c, reg := newCache(1 << 20)
	deps := c.Begin(tbl)
	reg.Table(tbl[0]).Wrote([]byte("any row")) // a write lands while the statement runs
	c.Put("k", []byte("reply"), 1, deps, 0)
	if _, _, ok := c.Get(nil, []byte("k")); ok {
		t.Fatal("a fill that raced a write was stored")
	}
	deps = c.Begin(tbl)
	c.Put("k", []byte("reply"), 1, deps, 0)
	if r, rows, ok := c.Get(nil, []byte("k")); !ok || string(r) != "reply" || rows != 1 {
		t.Fatalf("get = %q %d %v", r, rows, ok)
	}
	reg.Invalidate(tbl)
	if _, _, ok := c.Get(nil, []byte("k")); ok {
		t.Fatal("an entry outlived its table's invalidation")
	}
}

func TestServedOnlyWhileVouched(t *testing.T) {
	c, reg := newCache(1 << 20)
	main, other := reg.Gate("main"), reg.Gate("other")
	v := reg.RequireVouch("main")
	v.Vouch(time.Now().Add(time.Hour))
	c.Put("k", []byte("reply"), 1, c.Begin(tbl), 0)
	if _, _, ok := c.Get(main, []byte("k")); !ok || !c.Usable(main) {
		t.Fatal("miss while vouched")
	}
	reg.RequireVouch("other") // another group's follower that has not caught up
	if _, _, ok := c.Get(main, []byte("k")); !ok {
		t.Fatal("another group's follower closed this group's cache")
	}
	if _, _, ok := c.Get(other, []byte("k")); ok || c.Usable(other) {
		t.Fatal("served to a group whose follower does not vouch")
	}
	other.SetMode(validity.OwnWritesOnly, "none")
	if c.Usable(other) {
		t.Fatal(`served replies of an invalidate = "none" group`)
	}
	other.SetMode(validity.TTLBounded, "ttl")
	if !c.Usable(other) {
		t.Fatal("a ttl group's replies are served")
	}
}

func TestMemoryBound(t *testing.T) {
	c, _ := newCache(shards * 4096)
	for i := range 1000 {
		c.Put(string(rune('a'+i%26))+string(rune(i)), make([]byte, 500), 1, c.Begin(tbl), 0)
	}
	st := c.Stats()
	if st.Bytes > shards*4096 || st.Evictions == 0 {
		t.Fatalf("stats %+v: want at most %d bytes, with evictions", st, shards*4096)
	}
}

func TestTTL(t *testing.T) {
	c, _ := newCache(1 << 20)
	c.Put("k", []byte("reply"), 1, c.Begin(tbl), time.Millisecond)
	time.Sleep(5 * time.Millisecond)
	if _, _, ok := c.Get(nil, []byte("k")); ok {
		t.Fatal("an entry outlived its ttl")
	}
}

// Save lists only valid, unexpired entries, naming their tables; Restore stores an entry under stamps taken
// before, so one whose table was written in between is dropped, and an expired one is not stored.
func TestSaveAndRestore(t *testing.T) {
	c, reg := newCache(1 << 20)
	other := []validity.TableID{{Schema: "s", Name: "u"}}
	c.Put("kept", []byte("r1"), 1, c.Begin(tbl), 0)
	c.Put("ttl", []byte("r2"), 2, c.Begin(other), time.Hour)
	c.Put("stale", []byte("r3"), 1, c.Begin(other), 0)
	c.Put("gone", []byte("r4"), 1, c.Begin(tbl), time.Nanosecond)
	time.Sleep(time.Millisecond)
	reg.Table(other[0]).Wrote([]byte("x")) // "ttl" and "stale" are invalid from here
	c.Put("ttl", []byte("r2"), 2, c.Begin(other), time.Hour)
	saved := map[string]Saved{}
	c.Save(func(s Saved) { saved[s.Key] = s })
	if len(saved) != 2 || saved["kept"].Tables[0] != tbl[0] || saved["ttl"].Expires == 0 {
		t.Fatalf("saved %+v: want kept and ttl only, with their tables and the ttl's expiry", saved)
	}

	c2, reg2 := newCache(1 << 20)
	deps := map[string][]Dep{}
	for k, s := range saved {
		deps[k] = c2.Begin(s.Tables) // before anything replays
	}
	reg2.Table(other[0]).Wrote([]byte("y")) // a replayed commit touches "ttl"'s table
	for k, s := range saved {
		stored := c2.Restore(s, deps[k])
		if stored != (k == "kept") {
			t.Fatalf("restore %s stored=%v", k, stored)
		}
	}
	if r, rows, ok := c2.Get(nil, []byte("kept")); !ok || string(r) != "r1" || rows != 1 {
		t.Fatalf("restored entry = %q %d %v", r, rows, ok)
	}
	expired := Saved{Key: "old", Reply: []byte("r"), Expires: time.Now().Add(-time.Second).UnixNano(), Tables: tbl}
	if c2.Restore(expired, c2.Begin(tbl)) {
		t.Fatal("an expired entry was restored")
	}
}

// In the last fifth of a ttl the first Get misses (that caller refreshes), the others are still served the old
// reply until it expires or the refresh stores a new one.
func TestSoftRefresh(t *testing.T) {
	var clock atomic.Int64
	start := time.Unix(1_700_000_000, 0)
	reg := validity.NewRegistry()
	c := New(Options{MemoryLimit: 1 << 20, Registry: reg, Now: func() time.Time { return start.Add(time.Duration(clock.Load())) }})
	c.Put("k", []byte("old"), 1, c.Begin(tbl), 10*time.Second)
	clock.Store(int64(7 * time.Second)) // before the window
	for range 3 {
		if r, _, ok := c.Get(nil, []byte("k")); !ok || string(r) != "old" {
			t.Fatalf("before the refresh window: %q %v", r, ok)
		}
	}
	clock.Store(int64(8*time.Second + 1)) // in the last 2 s
	if _, _, ok := c.Get(nil, []byte("k")); ok {
		t.Fatal("the first Get in the refresh window was a hit: nobody refreshes the entry")
	}
	for range 3 {
		if r, _, ok := c.Get(nil, []byte("k")); !ok || string(r) != "old" {
			t.Fatalf("while the refresh runs, others get %q %v; want the old reply", r, ok)
		}
	}
	c.Put("k", []byte("new"), 1, c.Begin(tbl), 10*time.Second)
	if r, _, ok := c.Get(nil, []byte("k")); !ok || string(r) != "new" {
		t.Fatalf("after the refresh: %q %v", r, ok)
	}
	if st := c.Stats(); st.Refreshes != 1 {
		t.Fatalf("refreshes = %d, want 1", st.Refreshes)
	}
	clock.Store(int64(19 * time.Second))                // the new entry's window, nobody refreshes
	c.Get(nil, []byte("k"))                             // told to refresh; the caller's fill fails
	clock.Store(int64(18*time.Second + 10*time.Second)) // past its expiry
	if _, _, ok := c.Get(nil, []byte("k")); ok {
		t.Fatal("an entry was served past its ttl")
	}
}
