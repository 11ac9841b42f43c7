package store

// The arena: one shard's items as records in a ring of bytes, and an index
// from a key's hash to a record's offset. Neither holds a Go pointer, and on
// Linux both are mapped outside Go's heap (mmap.go), so the garbage collector
// never walks the items and what they take is exactly what the process holds
// for them.
//
// A record is a 28-byte header, the tag when the item has one, the key and the value, contiguous:
//
//	0 value length (u32)   4 key length (u16)   6 bits (live, visited, ...)   7 slab class - 1
//	8 flags (u32)          12 last access (u32, Unix seconds)                16 exptime (u32, Unix seconds)
//	20 CAS (u64)           28 tag (u64, only with bTagged), then key, then value
//
// Times are kept in 32 bits, as memcached keeps them: an exptime past 2106 is kept as the last second of 2106,
// and one before 1970 as 1970's first (long expired). Most items have no tag (the engine stamps rows cached from
// a table with one), so it costs only those that do; an item's tag is written with it and never changed in place.
//
// Records are written at the head; the tail is the oldest record. A removed
// item's record stays, dead, until the tail reaches it. The ring wraps at
// wrapAt (where the head was when it did): while wrapped, the records are
// [tail, wrapAt) then [0, head), and the head may not pass the tail; while
// not, they are [tail, head) and the head may not pass end, the shard's limit
// less the index's size. The store's eviction (evictForLocked in store.go)
// makes room by moving the tail.
//
// The index is open addressing with linear probing over uint64 entries: the
// record's offset + 1 in the low 40 bits, 24 bits of the key's hash above
// (which also give the entry's home slot while the table has at most 2^24
// slots); a lookup compares the stored key, so two keys with one hash are two
// entries. Removal shifts the probe run back, so there are no tombstones. The
// table grows when it is three quarters full, by half or by a third in turn
// (64, 96, 128, 192 ... slots), so it is half to three quarters full, not
// three eighths to three quarters as it would be if it doubled: a slot's home
// is the hash scaled to the table's size (a multiply and a shift), not masked.

import (
	"bytes"
	"encoding/binary"
	"math/bits"
	"unsafe"

	"github.com/cespare/xxhash/v2"
)

const (
	hdrLen = 28
	tagLen = 8 // after the header, when bTagged

	hVlen   = 0
	hKlen   = 4
	hBits   = 6
	hCls    = 7
	hFlags  = 8
	hAccess = 12
	hExp    = 16
	hCAS    = 20

	// MaxKeyLen is the longest key the store holds (its header has 16 bits for it).
	MaxKeyLen = 1<<16 - 1

	offBits  = 40
	offMask  = 1<<offBits - 1
	tagBits  = 24
	tagMask  = 1<<tagBits - 1
	minTable = 64
	pageSize = 4096
)

// Record bits.
const (
	bLive uint8 = 1 << iota
	bVisited
	bFetched
	bStale
	bWinSent
	bEphemeral
	bTagged // a tag follows the header
)

type arena struct {
	buf     []byte // the ring's mapping; its length is the shard's limit when it was made
	limit   int64  // the shard's share of the memory limit
	end     int64  // limit less the index: where the head wraps
	head    int64
	tail    int64
	wrapAt  int64
	wrapped bool
	touched int64 // buf[:touched] may be resident; above it, never written or given back
	// headLog and tailLog count the record bytes the head has written and the tail has passed since the arena
	// was made (logical positions, which do not wrap): a record's logical position tells whether it was written
	// before a moment the head's count was read at (see logical; Walk).
	headLog, tailLog int64

	table    []uint64
	tableMem []byte
	slots    uint64 // len(table)
	count    int    // live records (entries in table)

	hashMask uint64 // see Store.hashMask
}

func newArena(limit int64, hashMask uint64, tableSize int) arena {
	a := arena{limit: limit, hashMask: hashMask}
	a.buf = mapBytes(int(max(pageSize, (limit+pageSize-1)/pageSize*pageSize)))
	size := minTable
	for size*3/4 < tableSize {
		size = nextTableSize(size)
	}
	a.setTable(size)
	return a
}

// closedArena is an empty arena of one page on Go's heap, what a closed store's shards keep (Store.freeArenas).
func closedArena(hashMask uint64) arena {
	a := arena{limit: pageSize, hashMask: hashMask, buf: make([]byte, pageSize)}
	a.table = make([]uint64, minTable)
	a.slots = minTable
	a.end = pageSize
	return a
}

func (a *arena) setTable(size int) {
	mem := mapBytes(size * 8)
	a.tableMem = mem
	a.table = unsafe.Slice((*uint64)(unsafe.Pointer(unsafe.SliceData(mem))), size)
	a.slots = uint64(size)
	a.end = a.limit - int64(len(a.tableMem))
}

func (a *arena) free() {
	unmapBytes(a.buf)
	unmapBytes(a.tableMem)
	*a = arena{}
}

// memory is what the arena holds: the ring's pages that may be resident and the index.
func (a *arena) memory() int64 { return a.touched + int64(len(a.tableMem)) }

// recLen is the ring bytes of a record of this key, value and tag (0: none).
func recLen(keyLen, valueLen int, tag uint64) int64 {
	n := hdrLen + int64(keyLen) + int64(valueLen)
	if tag != 0 {
		n += tagLen
	}
	return n
}

func (a *arena) klen(off int64) int { return int(binary.LittleEndian.Uint16(a.buf[off+hKlen:])) }
func (a *arena) vlen(off int64) int { return int(binary.LittleEndian.Uint32(a.buf[off+hVlen:])) }
func (a *arena) size(off int64) int64 {
	return a.keyAt(off) - off + int64(a.klen(off)) + int64(a.vlen(off))
}

// keyAt is where the key of the record at off starts: after the header and its tag, if it has one.
func (a *arena) keyAt(off int64) int64 {
	if a.buf[off+hBits]&bTagged != 0 {
		return off + hdrLen + tagLen
	}
	return off + hdrLen
}

// charge is what the record at off is charged against the limit: its bytes and its index entry (Size, and the
// tag's bytes when it has one).
func (a *arena) charge(off int64) int64 { return a.size(off) + ItemOverhead - hdrLen }

func (a *arena) tag(off int64) uint64 {
	if a.buf[off+hBits]&bTagged == 0 {
		return 0
	}
	return binary.LittleEndian.Uint64(a.buf[off+hdrLen:])
}

func (a *arena) bits(off int64) uint8           { return a.buf[off+hBits] }
func (a *arena) cls(off int64) uint8            { return a.buf[off+hCls] }
func (a *arena) live(off int64) bool            { return a.buf[off+hBits]&bLive != 0 }
func (a *arena) setBits(off int64, set uint8)   { a.buf[off+hBits] |= set }
func (a *arena) clearBits(off int64, clr uint8) { a.buf[off+hBits] &^= clr }

func (a *arena) key(off int64) []byte {
	k := a.keyAt(off)
	return a.buf[k : k+int64(a.klen(off)) : k+int64(a.klen(off))]
}

func (a *arena) value(off int64) []byte {
	v := a.keyAt(off) + int64(a.klen(off))
	n := int64(a.vlen(off))
	return a.buf[v : v+n : v+n]
}

func (a *arena) exptime(off int64) int64 { return int64(binary.LittleEndian.Uint32(a.buf[off+hExp:])) }

// time32 is a Unix time as a record keeps it (see the record's layout): 0 stays 0.
func time32(t int64) uint32 {
	switch {
	case t < 0:
		return 1
	case t > 1<<32-1:
		return 1<<32 - 1
	}
	return uint32(t)
}
func (a *arena) cas(off int64) uint64 { return binary.LittleEndian.Uint64(a.buf[off+hCAS:]) }
func (a *arena) access(off int64) int64 {
	return int64(binary.LittleEndian.Uint32(a.buf[off+hAccess:]))
}
func (a *arena) setAccess(off, now int64) {
	binary.LittleEndian.PutUint32(a.buf[off+hAccess:], uint32(now))
}

// item decodes the record at off. Its Value is the arena's own bytes, valid only under the shard's lock, unless
// copyValue.
func (a *arena) item(off int64, copyValue bool) Item {
	b := a.buf[off:]
	bits := b[hBits]
	it := Item{
		Exptime:    int64(binary.LittleEndian.Uint32(b[hExp:])),
		CAS:        binary.LittleEndian.Uint64(b[hCAS:]),
		LastAccess: int64(binary.LittleEndian.Uint32(b[hAccess:])),
		Tag:        a.tag(off),
		Flags:      binary.LittleEndian.Uint32(b[hFlags:]),
		Fetched:    bits&bFetched != 0,
		Stale:      bits&bStale != 0,
		WinSent:    bits&bWinSent != 0,
		Ephemeral:  bits&bEphemeral != 0,
	}
	it.Value = a.value(off)
	if copyValue {
		it.Value = append(make([]byte, 0, len(it.Value)), it.Value...)
	}
	return it
}

// setMeta writes it's metadata (not its value, nor its tag: see the record's layout) into the record at off; the
// live, visited and tagged bits stay.
func (a *arena) setMeta(off int64, it *Item) {
	b := a.buf[off:]
	binary.LittleEndian.PutUint32(b[hFlags:], it.Flags)
	binary.LittleEndian.PutUint32(b[hAccess:], uint32(it.LastAccess))
	binary.LittleEndian.PutUint32(b[hExp:], time32(it.Exptime))
	binary.LittleEndian.PutUint64(b[hCAS:], it.CAS)
	bits := b[hBits] & (bLive | bVisited | bTagged)
	if it.Fetched {
		bits |= bFetched
	}
	if it.Stale {
		bits |= bStale
	}
	if it.WinSent {
		bits |= bWinSent
	}
	if it.Ephemeral {
		bits |= bEphemeral
	}
	b[hBits] = bits
}

// write puts a live record of key and it at off (which has room) and counts the bytes as touched.
func (a *arena) write(off int64, key []byte, it *Item, cls uint8) {
	n := recLen(len(key), len(it.Value), it.Tag)
	b := a.buf[off : off+n]
	binary.LittleEndian.PutUint32(b[hVlen:], uint32(len(it.Value)))
	binary.LittleEndian.PutUint16(b[hKlen:], uint16(len(key)))
	b[hBits] = bLive
	b[hCls] = cls
	k := hdrLen
	if it.Tag != 0 {
		b[hBits] |= bTagged
		binary.LittleEndian.PutUint64(b[hdrLen:], it.Tag)
		k += tagLen
	}
	a.setMeta(off, it)
	copy(b[k:], key)
	copy(b[k+len(key):], it.Value)
	a.touched = max(a.touched, off+n)
}

// owns reports whether b lies in the ring (so it must be copied before the ring changes).
func (a *arena) owns(b []byte) bool {
	if len(b) == 0 || len(a.buf) == 0 {
		return false
	}
	p, lo := uintptr(unsafe.Pointer(unsafe.SliceData(b))), uintptr(unsafe.Pointer(unsafe.SliceData(a.buf)))
	return p >= lo && p < lo+uintptr(len(a.buf))
}

// --- the ring ---

// fits reports whether n bytes are free at the head; it wraps the head when the ring is not wrapped and the
// record would pass end (or resets an empty ring), so that the caller's next step is to fit or to free the tail.
func (a *arena) fits(n int64) bool {
	if a.wrapped {
		return a.head+n <= a.tail
	}
	if a.head == a.tail {
		a.head, a.tail = 0, 0
	}
	if a.head+n <= a.end {
		return true
	}
	if a.head == 0 {
		return false // n > end: the caller checked, or the index just grew; the tail has nothing to give
	}
	a.wrapAt, a.head, a.wrapped = a.head, 0, true
	return a.head+n <= a.tail
}

// alloc takes n bytes at the head, which fits said are free.
func (a *arena) alloc(n int64) int64 {
	off := a.head
	a.head += n
	a.headLog += n
	return off
}

// logical is the logical position (see headLog) of the record at off.
func (a *arena) logical(off int64) int64 {
	if a.wrapped && off < a.tail {
		return a.tailLog + a.wrapAt - a.tail + off
	}
	return a.tailLog + off - a.tail
}

// tailWrap moves the tail to the ring's start when it has reached wrapAt, and gives back to the system the
// pages above the records and above end (memory that an index growth or a lower limit took from the ring).
// It reports whether it moved.
func (a *arena) tailWrap() bool {
	if !a.wrapped || a.tail != a.wrapAt {
		return false
	}
	a.tail, a.wrapped = 0, false
	a.release(max(a.head, a.end))
	return true
}

// release gives back the ring's pages from `from` (rounded up to a page) to what was touched.
func (a *arena) release(from int64) {
	from = (from + pageSize - 1) / pageSize * pageSize
	if from < a.touched {
		releaseBytes(a.buf[from:a.touched])
		a.touched = from
	}
}

// empty reports whether the ring holds no record, live or dead.
func (a *arena) empty() bool { return !a.wrapped && a.head == a.tail }

// first is the oldest record's offset, -1 when there is none.
func (a *arena) first() int64 {
	if a.wrapped && a.tail == a.wrapAt {
		if a.head == 0 {
			return -1
		}
		return 0
	}
	if a.empty() {
		return -1
	}
	return a.tail
}

// next is the offset of the record after the one at off, -1 after the newest.
func (a *arena) next(off int64) int64 {
	inFirst := a.wrapped && off >= a.tail
	off += a.size(off)
	if inFirst {
		if off < a.wrapAt {
			return off
		}
		off = 0
	}
	if off >= a.head {
		return -1
	}
	return off
}

// reset empties the ring and the index, and gives their memory back.
func (a *arena) reset() {
	a.head, a.tail, a.wrapAt, a.wrapped = 0, 0, 0, false
	a.tailLog = a.headLog
	a.release(0)
	if len(a.table) > minTable {
		unmapBytes(a.tableMem)
		a.setTable(minTable)
	} else {
		clear(a.table)
	}
	a.count = 0
}

// --- the index ---

// nextTableSize is the index's size after n slots: 1.5 n from a power of two, then the next power of two.
func nextTableSize(n int) int {
	if n&(n-1) == 0 {
		return n + n/2
	}
	return n + n/3
}

// homeOf is the slot where the probe run of a key with hash h starts: 24 bits of the hash scaled to the table,
// or (past 2^24 slots) all of them.
func (a *arena) homeOf(h uint64) uint64 {
	if a.slots <= 1<<tagBits {
		return (h >> 4 & tagMask) * a.slots >> tagBits
	}
	hi, _ := bits.Mul64(h, a.slots)
	return hi
}

// step is the slot after i, the table's first after its last.
func (a *arena) step(i uint64) uint64 {
	if i++; i == a.slots {
		return 0
	}
	return i
}

// hashOf is key's hash in the index (the store's locate computes the same).
func (a *arena) hashOf(key []byte) uint64 { return xxhash.Sum64(key) & a.hashMask }

func (a *arena) entry(h uint64, off int64) uint64 {
	return (h>>4&tagMask)<<offBits | uint64(off+1)
}

// home is the slot an entry's probe run starts from (homeOf its key's hash, from the entry's bits where they
// suffice).
func (a *arena) home(e uint64) uint64 {
	if a.slots <= 1<<tagBits {
		return (e >> offBits) * a.slots >> tagBits
	}
	return a.homeOf(a.hashOf(a.key(int64(e&offMask) - 1)))
}

// find returns the offset of key's live record and its slot in the index, or -1, -1. h is a.hashOf(key).
func (a *arena) find(key []byte, h uint64) (off int64, slot int) {
	tag := h >> 4 & tagMask
	for i := a.homeOf(h); ; i = a.step(i) {
		e := a.table[i]
		if e == 0 {
			return -1, -1
		}
		if e>>offBits == tag {
			off := int64(e&offMask) - 1
			if bytes.Equal(a.key(off), key) {
				return off, int(i)
			}
		}
	}
}

// slotOf returns the index slot that points at the live record at off.
func (a *arena) slotOf(off int64) int {
	h := a.hashOf(a.key(off))
	want := uint64(off + 1)
	for i := a.homeOf(h); ; i = a.step(i) {
		e := a.table[i]
		if e == 0 {
			panic("store: a live record is not in its shard's index")
		}
		if e&offMask == want {
			return int(i)
		}
	}
}

// index adds an entry for the record of hash h at off; the table grows first when it is three quarters full.
func (a *arena) index(h uint64, off int64) {
	if (a.count+1)*4 > len(a.table)*3 {
		a.grow()
	}
	a.put(a.entry(h, off), a.homeOf(h))
	a.count++
}

func (a *arena) put(e, i uint64) {
	for a.table[i] != 0 {
		i = a.step(i)
	}
	a.table[i] = e
}

// grow makes the index larger (nextTableSize). The ring's end moves down by the table's growth: records above it
// stay until the tail reaches them, and their pages are given back then (tailWrap).
func (a *arena) grow() {
	old, oldMem := a.table, a.tableMem
	a.setTable(nextTableSize(len(old)))
	for _, e := range old {
		if e != 0 {
			a.put(e, a.home(e))
		}
	}
	unmapBytes(oldMem)
}

// repoint makes the entry in slot point at off (its record moved).
func (a *arena) repoint(slot int, off int64) {
	e := a.table[slot]
	a.table[slot] = e&^offMask | uint64(off+1)
}

// unindex removes the entry in slot, shifting later entries of the probe run back so lookups need no tombstones.
func (a *arena) unindex(slot int) {
	i := uint64(slot)
	j := i
	for {
		j = a.step(j)
		e := a.table[j]
		if e == 0 {
			break
		}
		k := a.home(e)
		// The entry at j may move to i unless its home lies cyclically in (i, j].
		if i <= j {
			if i < k && k <= j {
				continue
			}
		} else if i < k || k <= j {
			continue
		}
		a.table[i] = e
		i = j
	}
	a.table[i] = 0
	a.count--
}
