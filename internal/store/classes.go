package store

import "math/bits"

// The store counts its items by memcached's slab classes, so the memcache
// door can report `stats items` and `stats slabs` per class as memcached 1.6
// does: an item is counted in the class memcached (default settings:
// growth factor 1.25, 48-byte minimum chunk, 1 MiB pages, 512 KiB largest
// chunk) would store an item of its key, value and flags in. The store's
// memory is not divided into classes; this is accounting only, kept under
// each shard's lock as items are linked and unlinked (a class lookup and a
// few adds per stored item, nothing per read).

// NumClasses is how many slab classes memcached 1.6 has with its default
// settings (-f 1.25 -n 48, slab_chunk_max 512 KiB); class ids run from 1.
const NumClasses = 39

// SlabPageSize is memcached's slab page: each class takes memory a page
// at a time and cuts it into chunks of its size.
const SlabPageSize = 1 << 20

// memcached's item header on a 64-bit build (sizeof(item)), and the CAS
// id it adds to every item while CAS is on.
const (
	mcItemHeader = 48
	mcCASBytes   = 8
)

// classSizes[i] is class i+1's chunk size; classByLen[b] is the first
// class (0-based) whose chunk size has bit length b or more, where a
// lookup starts.
var classSizes, classByLen = slabClasses()

// slabClasses computes memcached's slabs_init with its default settings:
// from 96 bytes each class is 1.25 times the last, rounded up to 8 bytes,
// until the next would pass slab_chunk_max/1.25; the last class is
// slab_chunk_max (see `stats slabs` of a memcached).
func slabClasses() (sizes [NumClasses]int64, byLen [64]uint8) {
	const chunkMax = SlabPageSize / 2
	size := float64(mcItemHeader + 48)
	i := 0
	for ; i < NumClasses-1 && size < chunkMax/1.25; i++ {
		n := int64(size)
		if n%8 != 0 {
			n += 8 - n%8
		}
		sizes[i] = n
		size = float64(n) * 1.25
	}
	if i != NumClasses-1 {
		panic("store: memcached's slab classes do not number NumClasses")
	}
	sizes[i] = chunkMax
	for b := range byLen {
		c := 0
		for c < NumClasses-1 && bits.Len64(uint64(sizes[c])) < b {
			c++
		}
		byLen[b] = uint8(c)
	}
	return sizes, byLen
}

// Class is the slab class (1 to NumClasses) memcached puts an item with
// this key, value and flags in: its header, key and NUL, flags when not 0,
// value and "\r\n", and CAS id, in the smallest chunk that holds them; an
// item larger than the largest chunk is in the largest class, which
// memcached chains its chunks from.
func Class(keyLen, valueLen int, flags uint32) int {
	total := int64(mcItemHeader + keyLen + 1 + valueLen + 2 + mcCASBytes)
	if flags != 0 {
		total += 4
	}
	c := int(classByLen[bits.Len64(uint64(total))])
	for c < NumClasses-1 && classSizes[c] < total {
		c++
	}
	return c + 1
}

// ClassChunkSize is the chunk size of class (1 to NumClasses).
func ClassChunkSize(class int) int64 { return classSizes[class-1] }

// ClassStats counts one slab class's items (see Class).
type ClassStats struct {
	Items int64 // items now in the class
	Bytes int64 // what they are charged (Size)
	// Evicted counts the class's items evicted to make room; of them,
	// EvictedNonzero had an expiry time and EvictedUnfetched were never
	// fetched. EvictedTime is the seconds between the last access of the
	// latest one and its eviction (memcached's evicted_time).
	Evicted, EvictedNonzero, EvictedUnfetched, EvictedTime int64
	// ExpiredUnfetched counts the class's items removed as expired that
	// were never fetched.
	ExpiredUnfetched int64

	evictedAt int64 // when the latest eviction was (store clock), to pick it among the shards
}

// classCountLocked counts an item of size (Size) in class cls (0-based), just
// stored (d = 1) or removed (d = -1). A record keeps the class it was counted
// in, so an item's fields changed in place cannot move it.
func (sh *shard) classCountLocked(cls uint8, size, d int64) {
	c := &sh.mu.classes[cls]
	c.Items += d
	c.Bytes += d * size
}

// ClassStats returns the counts of every class, index 0 being class 1.
func (s *Store) ClassStats() [NumClasses]ClassStats {
	var out [NumClasses]ClassStats
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for c := range out {
			o, v := &out[c], &sh.mu.classes[c]
			o.Items += v.Items
			o.Bytes += v.Bytes
			o.Evicted += v.Evicted
			o.EvictedNonzero += v.EvictedNonzero
			o.EvictedUnfetched += v.EvictedUnfetched
			o.ExpiredUnfetched += v.ExpiredUnfetched
			if v.Evicted > 0 && v.evictedAt >= o.evictedAt {
				o.EvictedTime, o.evictedAt = v.EvictedTime, v.evictedAt
			}
		}
		sh.mu.Unlock()
	}
	return out
}
