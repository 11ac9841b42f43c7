package qcache

import (
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keywaydb/keyway/internal/validity"
)

func newCache(limit int64) (*Cache, *validity.Registry) {
	reg := validity.NewRegistry()
	return New(Options{MemoryLimit: limit, Registry: reg}), reg
}

// clockedCache is a 1 MiB cache whose clock reads start plus the nanoseconds the test stores in clock.
func clockedCache(start time.Time) (c *Cache, clock *atomic.Int64) {
	clock = new(atomic.Int64)
	c = New(Options{MemoryLimit: 1 << 20, Registry: validity.NewRegistry(), Now: func() time.Time { return start.Add(time.Duration(clock.Load())) }})
	return c, clock
}

var tbl = []validity.TableID{{Schema: "s", Name: "t"}}

func TestFillRacingAWriteIsDropped(t *testing.T) {
	c, reg := newCache(1 << 20)
	deps := c.Begin(tbl)
	reg.Table(tbl[0]).Wrote([]byte("any row")) // a write lands while the statement runs
	c.Put("k", []byte("reply"), 1, deps, 0)
	if _, _, ok := c.Get(nil, []byte("k"), nil); ok {
		t.Fatal("a fill that raced a write was stored")
	}
	deps = c.Begin(tbl)
	c.Put("k", []byte("reply"), 1, deps, 0)
	if r, rows, ok := c.Get(nil, []byte("k"), nil); !ok || string(r) != "reply" || rows != 1 {
		t.Fatalf("get = %q %d %v", r, rows, ok)
	}
	reg.Invalidate(tbl)
	if _, _, ok := c.Get(nil, []byte("k"), nil); ok {
		t.Fatal("an entry outlived its table's invalidation")
	}
}

func TestServedOnlyWhileVouched(t *testing.T) {
	c, reg := newCache(1 << 20)
	main, other := reg.Gate("main"), reg.Gate("other")
	v := reg.RequireVouch("main")
	v.Vouch(time.Now().Add(time.Hour))
	c.Put("k", []byte("reply"), 1, c.Begin(tbl), 0)
	if _, _, ok := c.Get(main, []byte("k"), nil); !ok || !c.Usable(main) {
		t.Fatal("miss while vouched")
	}
	reg.RequireVouch("other") // another group's follower that has not caught up
	if _, _, ok := c.Get(main, []byte("k"), nil); !ok {
		t.Fatal("another group's follower closed this group's cache")
	}
	if _, _, ok := c.Get(other, []byte("k"), nil); ok || c.Usable(other) {
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
	if _, _, ok := c.Get(nil, []byte("k"), nil); ok {
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
	if r, rows, ok := c2.Get(nil, []byte("kept"), nil); !ok || string(r) != "r1" || rows != 1 {
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
	c, clock := clockedCache(time.Unix(1_700_000_000, 0))
	c.Put("k", []byte("old"), 1, c.Begin(tbl), 10*time.Second)
	clock.Store(int64(7 * time.Second)) // before the window
	for range 3 {
		if r, _, ok := c.Get(nil, []byte("k"), nil); !ok || string(r) != "old" {
			t.Fatalf("before the refresh window: %q %v", r, ok)
		}
	}
	clock.Store(int64(8*time.Second + 1)) // in the last 2 s
	if _, _, ok := c.Get(nil, []byte("k"), nil); ok {
		t.Fatal("the first Get in the refresh window was a hit: nobody refreshes the entry")
	}
	for range 3 {
		if r, _, ok := c.Get(nil, []byte("k"), nil); !ok || string(r) != "old" {
			t.Fatalf("while the refresh runs, others get %q %v; want the old reply", r, ok)
		}
	}
	c.Put("k", []byte("new"), 1, c.Begin(tbl), 10*time.Second)
	if r, _, ok := c.Get(nil, []byte("k"), nil); !ok || string(r) != "new" {
		t.Fatalf("after the refresh: %q %v", r, ok)
	}
	if st := c.Stats(); st.Refreshes != 1 {
		t.Fatalf("refreshes = %d, want 1", st.Refreshes)
	}
	clock.Store(int64(19 * time.Second))                // the new entry's window, nobody refreshes
	c.Get(nil, []byte("k"), nil)                        // told to refresh; the caller's fill fails
	clock.Store(int64(18*time.Second + 10*time.Second)) // past its expiry
	if _, _, ok := c.Get(nil, []byte("k"), nil); ok {
		t.Fatal("an entry was served past its ttl")
	}
}

// An entry that depends on a row key (BeginKeys) survives a change of another row of its table, and not a change
// of its own row; an entry on the whole table drops at any row's change. Get deletes what it finds invalid.
func TestRowKeyDependency(t *testing.T) {
	c, reg := newCache(1 << 20)
	deps, ok := c.BeginKeys(tbl[0], "id", []any{int64(5), int64(7)})
	if !ok || len(deps) != 2 {
		t.Fatalf("BeginKeys = %v %v", deps, ok)
	}
	c.Put("row", []byte("five and seven"), 2, deps, 0)
	c.Put("range", []byte("all"), 9, c.Begin(tbl), 0)
	key := func(v int64) []byte { k, _ := validity.ColumnKey(nil, "id", v); return k }
	reg.Table(tbl[0]).Changed(key(6))
	if r, rows, ok := c.Get(nil, []byte("row"), nil); !ok || string(r) != "five and seven" || rows != 2 {
		t.Fatalf("after another row's change: %q %d %v", r, rows, ok)
	}
	if _, _, ok := c.Get(nil, []byte("range"), nil); ok {
		t.Fatal("a whole-table entry outlived a row's change")
	}
	reg.Table(tbl[0]).Changed(key(7))
	if _, _, ok := c.Get(nil, []byte("row"), nil); ok {
		t.Fatal("an entry outlived the change of a row it read")
	}
	if st := c.Stats(); st.Entries != 0 || st.Bytes != 0 || st.Dropped != 2 {
		t.Fatalf("stats %+v: the invalid entries were not deleted", st)
	}
}

// Put refuses dependencies on a table of another registry: their Index would name another table here.
func TestForeignTableNotStored(t *testing.T) {
	c, _ := newCache(1 << 20)
	other := validity.NewRegistry()
	other.Table(validity.TableID{Schema: "s", Name: "first"})
	ot := other.Table(tbl[0])
	if c.Put("k", []byte("r"), 1, []Dep{{Table: ot, Stamp: ot.Stamp()}}, 0) {
		t.Fatal("an entry on another registry's table was stored")
	}
}

// Whatever is put, the entries are charged within the limit and the clock evicts to make room; the newest entry
// is served.
func TestEvictionKeepsTheLimit(t *testing.T) {
	const limit = 1 << 20
	c, _ := newCache(limit)
	reply := make([]byte, 3000)
	for i := range 2000 {
		k := "key " + strconv.Itoa(i)
		reply[0] = byte(i)
		if !c.Put(k, reply[:100+i%2900], 1, c.Begin(tbl), 0) {
			t.Fatalf("put %s failed", k)
		}
		if st := c.Stats(); st.Bytes > limit {
			t.Fatalf("after %d puts: %d bytes charged, limit %d", i+1, st.Bytes, limit)
		}
		if r, _, ok := c.Get(nil, []byte(k), nil); !ok || r[0] != byte(i) || len(r) != 100+i%2900 {
			t.Fatalf("the newest entry %s is not served", k)
		}
	}
	if st := c.Stats(); st.Evictions == 0 || st.Entries == 0 || st.Entries >= 2000 {
		t.Fatalf("stats %+v: want evictions and some entries", st)
	}
	if c.Put("huge", make([]byte, limit/8), 1, c.Begin(tbl), 0) {
		t.Fatal("an entry larger than a store shard was stored")
	}
	if c.Put("too big", make([]byte, MaxReply+1), 1, c.Begin(tbl), 0) {
		t.Fatal("a reply over MaxReply was stored")
	}
}

// A hit appends the reply to the caller's buffer, which it owns: a later Put of the key does not change it, and a
// Get into a buffer large enough allocates nothing.
func TestHitCopiesIntoTheCallersBuffer(t *testing.T) {
	c, _ := newCache(1 << 20)
	key := []byte("SELECT c FROM t WHERE id = 1")
	c.Put(string(key), []byte("the reply"), 1, c.Begin(tbl), 0)
	buf := append(make([]byte, 0, 64), "prefix:"...)
	r, _, ok := c.Get(nil, key, buf)
	if !ok || string(r) != "the reply" || string(buf[:len(buf)+len(r)]) != "prefix:the reply" {
		t.Fatalf("get = %q %v; buffer %q", r, ok, buf[:cap(buf)])
	}
	c.Put(string(key), []byte("THE REPLY"), 1, c.Begin(tbl), 0)
	if string(r) != "the reply" {
		t.Fatalf("a Put changed a reply handed out: %q", r)
	}
	buf = r[:0]
	allocs := testing.AllocsPerRun(100, func() {
		r, _, ok := c.Get(nil, key, buf[:0])
		if !ok || string(r) != "THE REPLY" {
			t.Fatalf("get = %q %v", r, ok)
		}
	})
	if allocs != 0 {
		t.Fatalf("a hit allocated %v times", allocs)
	}
	if r, _, ok := c.Get(nil, key, nil); !ok || string(r) != "THE REPLY" {
		t.Fatalf("get into nil = %q %v", r, ok)
	}
}

// A ttl entry's expiry and refresh hold at nanosecond precision, though the store keeps times in seconds, and the
// entry, once expired, is deleted.
func TestTTLBelowASecond(t *testing.T) {
	c, clock := clockedCache(time.Unix(1_700_000_000, 500_000_000))
	c.Put("k", []byte("r"), 1, c.Begin(tbl), 100*time.Millisecond)
	clock.Store(int64(79 * time.Millisecond))
	if _, _, ok := c.Get(nil, []byte("k"), nil); !ok {
		t.Fatal("miss before the refresh window")
	}
	clock.Store(int64(81 * time.Millisecond))
	if _, _, ok := c.Get(nil, []byte("k"), nil); ok {
		t.Fatal("the first Get in the refresh window was a hit")
	}
	if _, _, ok := c.Get(nil, []byte("k"), nil); !ok {
		t.Fatal("the second Get in the refresh window missed")
	}
	clock.Store(int64(100 * time.Millisecond))
	if _, _, ok := c.Get(nil, []byte("k"), nil); ok {
		t.Fatal("served at its expiry")
	}
	if st := c.Stats(); st.Entries != 0 {
		t.Fatalf("%d entries left after expiry", st.Entries)
	}
}

// Save names the tables of row-key entries too, and skips those a write made invalid.
func TestSaveRowKeyEntries(t *testing.T) {
	c, reg := newCache(1 << 20)
	d5, _ := c.BeginKeys(tbl[0], "id", []any{int64(5)})
	d6, _ := c.BeginKeys(tbl[0], "id", []any{int64(6)})
	c.Put("five", []byte("r5"), 1, d5, 0)
	c.Put("six", []byte("r6"), 1, d6, 0)
	k6, _ := validity.ColumnKey(nil, "id", int64(6))
	reg.Table(tbl[0]).Changed(k6)
	var saved []Saved
	c.Save(func(s Saved) { saved = append(saved, s) })
	if len(saved) != 1 || saved[0].Key != "five" || string(saved[0].Reply) != "r5" || len(saved[0].Tables) != 1 || saved[0].Tables[0] != tbl[0] {
		t.Fatalf("saved %+v", saved)
	}
}

// Gets, puts and writes at once: every hit is a reply that was put under its key (run with -race).
func TestConcurrentUse(t *testing.T) {
	c, reg := newCache(64 << 10)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var buf []byte
			for i := range 3000 {
				k := "k" + strconv.Itoa((i*7+g)%50)
				switch i % 3 {
				case 0:
					c.Put(k, []byte(k+" reply"), 1, c.Begin(tbl), 0)
				case 1:
					if r, _, ok := c.Get(nil, []byte(k), buf[:0]); ok {
						if string(r) != k+" reply" {
							t.Errorf("%s: got %q", k, r)
							return
						}
						buf = r[:0]
					}
				default:
					if i%30 == 2 {
						reg.Table(tbl[0]).Wrote([]byte(k))
					}
				}
			}
		}()
	}
	wg.Wait()
	c.Save(func(Saved) {})
	c.Stats()
}
