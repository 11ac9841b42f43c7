package store

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// TestClassSizesAreMemcached checks the class geometry against memcached
// 1.6's default `stats slabs` chunk sizes, and Class on the boundaries of
// the first classes and past the largest.
func TestClassSizesAreMemcached(t *testing.T) {
	want := []int64{96, 120, 152, 192, 240, 304, 384, 480, 600, 752, 944, 1184, 1480, 1856, 2320, 2904, 3632,
		4544, 5680, 7104, 8880, 11104, 13880, 17352, 21696, 27120, 33904, 42384, 52984, 66232, 82792, 103496,
		129376, 161720, 202152, 252696, 315872, 394840, 524288}
	var got []int64
	for c := 1; c <= NumClasses; c++ {
		got = append(got, ClassChunkSize(c))
	}
	if !slices.Equal(got, want) {
		t.Fatalf("chunk sizes %v\nmemcached's %v", got, want)
	}
	// An item takes 59 bytes and its key and value, 4 more with flags.
	for _, c := range []struct {
		key, value int
		flags      uint32
		class      int
	}{{1, 36, 0, 1}, {1, 37, 0, 2}, {1, 32, 1, 1}, {1, 33, 1, 2}, {250, 394840 - 309, 0, 38},
		{250, 394840 - 309, 1, 39}, {0, 2 << 20, 0, 39}} {
		if got := Class(c.key, c.value, c.flags); got != c.class {
			t.Errorf("Class(%d, %d, %d) = %d, want %d", c.key, c.value, c.flags, got, c.class)
		}
	}
	// Every total lands in the smallest class that holds it.
	for total := int64(59); total <= 600000; total += 7 {
		c := Class(0, int(total-59), 0)
		if (total <= 524288 && ClassChunkSize(c) < total) || (c > 1 && ClassChunkSize(c-1) >= total) {
			t.Fatalf("an item of %d bytes is in class %d (chunk %d)", total, c, ClassChunkSize(c))
		}
	}
}

// TestClassStatsCount checks items are counted in their class as they are
// stored, replaced by another size, deleted, evicted, expired and flushed.
func TestClassStatsCount(t *testing.T) {
	now := int64(1000)
	s, err := Open(Options{MemoryLimit: 16 * 64 << 10, Now: func() int64 { return now }})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	del := func(key string) {
		if _, err := s.Update([]byte(key), func(*Item) (Action, Item) { return Remove, Item{} }); err != nil {
			t.Fatal(err)
		}
	}
	set(t, s, "small", "x", 0) // flags 3: class 1
	set(t, s, "mid", strings.Repeat("x", 2000), 0)
	set(t, s, "gone", "y", 5)
	cs := s.ClassStats()
	if cs[0].Items != 2 || cs[0].Bytes != Size(5, 1)+Size(4, 1) || cs[14].Items != 1 || cs[14].Bytes != Size(3, 2000) {
		t.Fatalf("after three sets: class 1 %+v, class 15 %+v", cs[0], cs[14])
	}
	set(t, s, "mid", "x", 0) // replaced by an item of class 1
	del("small")
	now += 10 // "gone" expires unfetched
	if _, ok := s.Get([]byte("gone")); ok {
		t.Fatal("gone is live past its expiry")
	}
	cs = s.ClassStats()
	if cs[0].Items != 1 || cs[0].Bytes != Size(3, 1) || cs[14].Items != 0 || cs[14].Bytes != 0 || cs[0].ExpiredUnfetched != 1 {
		t.Fatalf("after replace, delete and expiry: class 1 %+v, class 15 %+v", cs[0], cs[14])
	}
	// Fill past the limit with class-15 items, some with an expiry.
	for i := range 2000 {
		set(t, s, fmt.Sprintf("fill-%d", i), strings.Repeat("z", 2000), int64(i%2)*100000)
	}
	cs = s.ClassStats()
	var evicted int64
	for _, c := range cs {
		evicted += c.Evicted
	}
	if st := s.Stats(); cs[14].Evicted == 0 || evicted != st.Evictions || cs[14].EvictedNonzero == 0 ||
		cs[14].EvictedNonzero >= cs[14].Evicted || cs[14].EvictedUnfetched == 0 {
		t.Fatalf("after filling: class 15 %+v, store evictions %d", cs[14], st.Evictions)
	}
	var items, bytes int64
	for _, c := range cs {
		items += c.Items
		bytes += c.Bytes
	}
	if st := s.Stats(); items != st.CurrItems || bytes != st.Bytes {
		t.Fatalf("classes hold %d items, %d bytes; the store %d, %d", items, bytes, st.CurrItems, st.Bytes)
	}
	if err := s.FlushAll(); err != nil {
		t.Fatal(err)
	}
	cs = s.ClassStats()
	if cs[14].Items != 0 || cs[14].Bytes != 0 || cs[14].Evicted == 0 {
		t.Fatalf("after flush_all: class 15 %+v (counts gone, evictions kept)", cs[14])
	}
}

// TestMallocedIsHighWaterMark checks Stats.Malloced: it follows the bytes
// in use up, stays when they go down (deletes, smaller items, flush_all),
// and SetLimit lowers it to a lower limit.
func TestMallocedIsHighWaterMark(t *testing.T) {
	s, err := Open(Options{MemoryLimit: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i := range 1000 {
		set(t, s, fmt.Sprintf("k%d", i), strings.Repeat("v", 1000), 0)
	}
	st := s.Stats()
	if st.Malloced != st.Bytes {
		t.Fatalf("Malloced %d, Bytes %d: want them equal while only growing", st.Malloced, st.Bytes)
	}
	peak := st.Malloced
	for i := range 1000 {
		set(t, s, fmt.Sprintf("k%d", i), "short", 0)
	}
	if st := s.Stats(); st.Malloced != peak || st.Bytes >= peak {
		t.Fatalf("after smaller items: Malloced %d, Bytes %d, peak %d", st.Malloced, st.Bytes, peak)
	}
	if err := s.FlushAll(); err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); st.Malloced != peak || st.Bytes != 0 {
		t.Fatalf("after flush_all: Malloced %d, Bytes %d, peak %d", st.Malloced, st.Bytes, peak)
	}
	if err := s.SetLimit(16 * 16 << 10); err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); st.Malloced > st.Limit {
		t.Fatalf("after lowering the limit: Malloced %d over the limit %d", st.Malloced, st.Limit)
	}
}
