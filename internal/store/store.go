// Package store is keyway's local tier: items in memory under a byte limit,
// evicted by a clock, expired lazily and by a background crawler, each given a
// unique CAS id, and optionally persisted to Pebble so a restart comes back warm.
// The same Pebble keeps two kinds of records for other packages beside the
// items: the write-behind queue's journal (journal.go) and named aside blobs
// such as the warm-restart snapshot (aside.go).
//
// Items live in arenas (arena.go): each shard keeps its items as records in a
// ring of bytes, indexed by a table of offsets, with no Go pointer in either,
// so a million items are a few large blocks to the garbage collector, not a
// million objects, and an item costs its key, its value and 36 bytes.
//
// Invariants:
//   - Keys are split over a fixed number of shards by hash; every read and
//     change of a key happens under its shard's mutex, so each Update is atomic.
//   - An arena's bytes never leave its shard's lock: Get, Peek, Walk and
//     Update's result hand out copies (to a slice of their own, or to memory
//     the caller gives: GetInto, UpdateInto), so a caller may keep and write
//     out the Value it was given after the lock is released, and the store
//     never modifies it. (Update's callback sees cur.Value in the arena
//     itself: it may read it, and must copy it to keep it.) So a record's
//     bytes may be overwritten as soon as its item is evicted or replaced,
//     and an arena may be unmapped, with no reader to wait for. A Value
//     handed to Update for Replace is copied into the arena (and, with
//     persistence, for the disk): the caller may reuse it once Update returns.
//   - A shard's memory is its ring and its index: the ring wraps at the
//     shard's share of the limit less the index's size, so live records, the
//     dead ones the tail has not reached and the index never take more than
//     the share after an Update returns — except that when the index doubles,
//     the ring's pages above its new end are given back only once the tail
//     has passed them (one lap of the ring).
//   - Eviction is a clock over the ring (SIEVE's visited bit, FIFO order):
//     making room at the head frees the record at the tail; a dead one goes,
//     an expired one is removed as expired, a visited one has its bit cleared
//     and moves to the head, the first unvisited live one is evicted.
//   - With persistence on, every change of memory (set, delete, eviction, expiry,
//     flush) is appended to the shard's pending log under the same lock that
//     made it, so the disk sees each key's changes in the order memory did.
//     Ephemeral items are the exception: they never reach the disk.
//   - With sync durability, readers see a change only once it is durable, and a
//     disk failure is sticky; persist.go says how.
//   - A delayed flush_all is memcached's oldest_live, not a timer: one deadline
//     (flushAt). Once the clock reaches it, every item whose LastAccess (its last
//     store or fetch, memcached's it->time) is before it is dead, exactly as an
//     expired one is; a later flush replaces the deadline. The crawler, and Close,
//     then remove those items for real, so the disk forgets them too.
package store

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/cockroachdb/pebble/vfs"
)

// numShards is fixed because the on-disk layout prefixes every key with its
// shard number (see persist.go); changing it needs a format migration.
const numShards = 16

// ItemOverhead is the bytes charged per item on top of its key and value:
// its record's header in the ring (hdrLen) and its entry in the index. An
// item with a Tag is charged the tag's 8 bytes more (see arena.go).
const ItemOverhead = hdrLen + 8

var (
	// ErrNoMemory means the item cannot fit in its shard even after evicting everything.
	ErrNoMemory = errors.New("out of memory storing object")
	// ErrPersist means the change is in memory but could not be made durable.
	ErrPersist = errors.New("could not persist the change")
	// ErrClosed means the store has been closed.
	ErrClosed = errors.New("store is closed")
)

// Item is one stored value and its metadata, as the store hands it out and takes it in; in memory it is a record
// in its shard's arena (arena.go).
type Item struct {
	Value   []byte // the caller's own: a copy out of the arena, or what it gives Update
	Exptime int64  // absolute Unix seconds; 0 means never (kept in 32 bits: see arena.go)
	CAS     uint64 // unique id of this version; 0 in a new item means "assign one"

	// Volatile state for the meta protocol; not persisted.
	// LastAccess also decides a delayed flush_all (see Store.FlushAt), as
	// memcached's it->time does; an item loaded from disk counts as stored then.
	LastAccess int64  // Unix seconds of the last fetch or store (kept in 32 bits: until 2106)
	Tag        uint64 // opaque to the store: the engine marks rows cached from a table with its epoch; set by Replace only (a change of cur.Tag in Update's callback is not kept)
	Flags      uint32 // client flags, opaque to keyway
	Fetched    bool   // fetched at least once since stored
	Stale      bool   // marked stale by an invalidation (meta I flag)
	WinSent    bool   // a recache token (W) has been handed out for this version

	// Ephemeral items live in memory only: never written to disk, and
	// replacing a persisted version with one removes that version from disk.
	// For copies whose truth lives elsewhere (rows cached from a table), so
	// caching them costs no disk write and no wait.
	Ephemeral bool
}

// Expired reports whether the item is past its expiry at now (Unix seconds).
func (it *Item) Expired(now int64) bool {
	return it.Exptime != 0 && it.Exptime <= now
}

// dead reports whether it is gone at now: expired, or invalidated by a delayed
// flush_all whose deadline has come.
func (s *Store) dead(it *Item, now int64) bool {
	return it.Expired(now) || flushedBy(it, s.flushAt.Load(), now)
}

// flushedBy reports whether a flush_all deadline at (0 = none) has invalidated
// it at now: memcached's rule, an item last stored or fetched before the
// deadline is gone once the deadline has come.
func flushedBy(it *Item, at, now int64) bool {
	return at != 0 && at <= now && it.LastAccess < at
}

// Size is what an item with this key and value is charged against the limit.
func Size(keyLen, valueLen int) int64 {
	return int64(keyLen) + int64(valueLen) + ItemOverhead
}

// Action tells Update what to do after its callback has looked at the item.
type Action uint8

const (
	Keep    Action = iota // nothing that must be persisted changed
	Save                  // the live item was changed in place (Exptime, Flags, CAS, Stale); persist it
	Replace               // store the returned item under the key
	Remove                // delete the key
)

// Durability says when a change is acknowledged relative to the disk.
type Durability uint8

const (
	DurabilityNone  Durability = iota // memory only
	DurabilityAsync                   // persisted within FlushInterval
	DurabilitySync                    // persisted before Update returns
)

// DefaultFlushInterval is Options.FlushInterval's default: async durability writes behind within it.
const DefaultFlushInterval = time.Second

// Options configure a Store.
type Options struct {
	MemoryLimit   int64         // bytes; required
	DataDir       string        // Pebble directory; "" means memory only
	Durability    Durability    // ignored without DataDir
	FlushInterval time.Duration // async write-behind bound; default 1s
	Logger        *slog.Logger
	Now           func() int64 // Unix seconds; default time.Now().Unix (tests override)

	// FS is Pebble's filesystem; nil is the OS's. Tests inject faults through it
	// (pebble/vfs/errorfs).
	FS vfs.FS
}

// Stats are counters of the store's own events.
type Stats struct {
	CurrItems  int64
	TotalItems int64
	Bytes      int64
	Evictions  int64
	Expired    int64 // items removed because their time passed
	Limit      int64
	// Malloced is what the store's items have taken at most: each shard's
	// high-water mark of bytes in use, summed, lowered to the limit when
	// SetLimit lowers it. It is level while items come and go within
	// memory already used, as memcached's slab pages keep its
	// total_malloced, and never above Limit.
	Malloced int64
	// TailAccess is the oldest LastAccess among the live items at each
	// shard's ring tail, where eviction looks first (0: no items).
	TailAccess int64
	// Arena is the memory the arenas hold now: each ring's pages that may be
	// resident (written and not given back) and each index. Bytes is what
	// the live items take of it; the rest is records of removed items the
	// rings' tails have not reached yet, and the index's free slots.
	Arena int64
	// IndexBytes and IndexSlots are the shards' indexes' size (part of Arena) and slots, summed (memcached's
	// hash_bytes and hash_power_level).
	IndexBytes, IndexSlots int64
}

// Store is the sharded in-memory item table. It is safe for concurrent use.
type Store struct {
	shards  [numShards]shard
	limit   atomic.Int64 // changed only by SetLimit, under every shard's lock
	nextCAS atomic.Uint64
	now     func() int64
	log     *slog.Logger

	// hashMask is ANDed into a key's xxhash for the shards' indexes: all ones, except in tests that make keys
	// collide. The shard of a key is always its xxhash: the disk layout depends on it.
	hashMask uint64

	totalItems atomic.Int64
	evictions  atomic.Int64
	expired    atomic.Int64

	disk *disk // nil when memory only

	// flushAt is the deadline of the latest delayed flush_all (memcached's
	// oldest_live; 0 = none): once now >= flushAt, items with LastAccess <
	// flushAt are dead. swept is the deadline whose dead items have been
	// removed for real. flushMu orders FlushAt, FlushAll and the sweep.
	flushAt atomic.Int64
	swept   atomic.Int64
	flushMu sync.Mutex

	journalMu     sync.Mutex
	loadedJournal map[string][]byte // journal records found on disk at Open, until taken (journal.go)

	stop     chan struct{}
	stopOnce sync.Once
	closed   atomic.Bool // the arenas are given back (Close)
	wg       sync.WaitGroup
}

type shard struct {
	mu struct {
		sync.Mutex
		a     arena
		cur   Item  // Update's callback's item (scratch)
		items int64 // live records
		used  int64 // their Size, summed
		peak  int64 // high-water mark of used (Stats.Malloced)
		// cursors are the positions in the ring of scans that let go of the lock between steps (the expiry
		// crawler's, Walk's): see cursorTail.
		cursors []*int64
		crawl   int64 // the expiry crawler's cursor, one of cursors
		classes [NumClasses]ClassStats
		pending []record // changes not yet handed to the disk
		// chunk is what the pending records' keys and values are carved from now (its free part is
		// chunk[len:cap]), and chunks the ones carved from since the last drain: the committer gives them back
		// to the disk's free list once it has the records (see disk.carveLocked).
		chunk  []byte
		chunks [][]byte
		// journalPending is the index in pending of each journal key's put waiting there (at most one: a later
		// put of the key makes the earlier nothing), and journalOnDisk the journal keys whose last record handed
		// to the disk is a put. With them a removal whose put is still pending cancels it, and is itself left out
		// when the disk holds no record of the key (see journalAppend).
		journalPending map[string]int
		journalOnDisk  map[string]struct{}
		// unsynced holds, with sync durability, what readers see of keys
		// whose latest change is not yet durable (see unsynced).
		unsynced map[string]*unsynced
	}
	limit int64
	index byte // position in Store.shards; the on-disk key prefix
}

// unsynced is what readers see of a key while a sync-durability change of it
// is not yet durable: the version that was visible before the first such
// change (prior, or none when !priorOK). Later changes of the key before that
// one is visible only raise seq, so readers go from prior straight to the
// newest durable version, never back. An entry whose seq the disk has made
// visible is stale and is dropped by whoever meets it. prior's Value is a
// copy of its own.
type unsynced struct {
	seq     uint64 // the key's latest change not yet known durable
	prior   Item
	priorOK bool
}

// pruneUnsyncedLocked drops the entries that visible has overtaken.
func (sh *shard) pruneUnsyncedLocked(visible uint64) {
	for k, u := range sh.mu.unsynced {
		if u.seq <= visible {
			delete(sh.mu.unsynced, k)
		}
	}
}

// Open creates a store and, with a DataDir, loads what the disk holds before returning.
func Open(o Options) (*Store, error) {
	return open(o, ^uint64(0))
}

// open is Open with the indexes' hash mask (see Store.hashMask), which tests narrow to make keys collide.
func open(o Options, hashMask uint64) (*Store, error) {
	if o.MemoryLimit <= 0 {
		return nil, errors.New("store: MemoryLimit must be positive")
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Now == nil {
		o.Now = func() int64 { return time.Now().Unix() }
	}
	if o.FlushInterval <= 0 {
		o.FlushInterval = DefaultFlushInterval
	}
	s := &Store{
		now:      o.Now,
		log:      o.Logger,
		hashMask: hashMask,
		stop:     make(chan struct{}),
	}
	s.limit.Store(o.MemoryLimit)
	for i := range s.shards {
		sh := &s.shards[i]
		sh.limit = o.MemoryLimit / numShards
		sh.mu.a = newArena(sh.limit, hashMask, 0)
		sh.mu.crawl = cursorTail
		sh.mu.cursors = []*int64{&sh.mu.crawl}
		sh.mu.journalPending, sh.mu.journalOnDisk = map[string]int{}, map[string]struct{}{}
		sh.index = byte(i)
	}
	if o.DataDir != "" && o.Durability != DurabilityNone {
		d, err := openDisk(s, o)
		if err != nil {
			s.freeArenas()
			return nil, err
		}
		s.disk = d
		if err := d.load(); err != nil {
			d.db.Close()
			s.freeArenas()
			return nil, err
		}
		d.start()
	}
	s.wg.Add(1)
	go s.crawlLoop()
	return s, nil
}

// freeArenas gives the arenas' memory back. Each shard is left an empty arena on Go's heap (closedArena), so a
// caller still running after Close finds nothing, and stores almost nothing, instead of touching unmapped memory.
func (s *Store) freeArenas() {
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		sh.mu.a.free()
		sh.mu.a = closedArena(s.hashMask)
		sh.mu.items, sh.mu.used = 0, 0
		clear(sh.mu.classes[:])
		s.resetCursorsLocked(sh)
		sh.mu.Unlock()
	}
}

// Close stops background work and, with persistence, writes every pending
// change and closes the disk. The arenas' memory is given back: a store used
// after Close holds nothing.
func (s *Store) Close() error {
	var err error
	s.stopOnce.Do(func() {
		close(s.stop)
		s.wg.Wait()
		// A delayed flush whose deadline has come reaches the disk before it closes.
		err = s.sweepFlushed()
		if s.disk != nil {
			err = errors.Join(err, s.disk.close())
		}
		s.closed.Store(true)
		s.freeArenas()
	})
	return err
}

// Persistent reports whether changes reach a disk.
func (s *Store) Persistent() bool { return s.disk != nil }

// WaitsForDisk reports whether a write waits for the disk before it returns (sync durability).
func (s *Store) WaitsForDisk() bool { return s.disk != nil && s.disk.durability == DurabilitySync }

// Now is the store's clock in Unix seconds.
func (s *Store) Now() int64 { return s.now() }

func (s *Store) shardFor(key []byte) (int, *shard) {
	i := int(xxhash.Sum64(key) % numShards)
	return i, &s.shards[i]
}

// locate is key's shard, its index there and its hash in the shard's index.
func (s *Store) locate(key []byte) (int, *shard, uint64) {
	h := xxhash.Sum64(key)
	return int(h % numShards), &s.shards[int(h%numShards)], h & s.hashMask
}

// deadLocked reports whether the record at off is gone at now: expired, or
// invalidated by a delayed flush_all whose deadline has come.
func (s *Store) deadLocked(a *arena, off, now int64) bool {
	if e := a.exptime(off); e != 0 && e <= now {
		return true
	}
	at := s.flushAt.Load()
	return at != 0 && at <= now && a.access(off) < at
}

// Get returns a copy of the live item as it was before this access, and marks
// it fetched and recently used.
func (s *Store) Get(key []byte) (Item, bool) {
	return s.get(key, nil, nil)
}

// ValueBuf gives a reader of the store the memory a value is copied to
// (GetInto): Take returns a slice of n bytes that is the reader's to keep. It
// runs under the shard's lock: it must not block or call the store.
type ValueBuf interface {
	Take(n int) []byte
}

// GetInto is Get with the item's value copied to memory dst gives (nil dst:
// a slice of its own): a reader that writes values out and then reuses that
// memory saves each copy's allocation.
func (s *Store) GetInto(key []byte, dst ValueBuf) (Item, bool) {
	return s.get(key, dst, nil)
}

// GetAppend is Get with the item's value appended to buf (which may be nil),
// which it returns extended; the item's Value is the appended bytes.
func (s *Store) GetAppend(key, buf []byte) (Item, []byte, bool) {
	it, ok := s.get(key, nil, &buf)
	return it, buf, ok
}

// get is Get, GetInto (dst) and GetAppend (buf).
func (s *Store) get(key []byte, dst ValueBuf, buf *[]byte) (Item, bool) {
	now := s.now()
	_, sh, h := s.locate(key)
	sh.mu.Lock()
	if u := s.unsyncedLocked(sh, key); u != nil {
		sh.mu.Unlock()
		it, ok := s.visible(u, now)
		if ok {
			it.Value = copyOut(it.Value, dst, buf)
		}
		return it, ok
	}
	a := &sh.mu.a
	off, slot := a.find(key, h)
	if off < 0 {
		sh.mu.Unlock()
		return Item{}, false
	}
	if s.deadLocked(a, off, now) {
		s.removeDeadLocked(sh, off, slot, now)
		sh.mu.Unlock()
		return Item{}, false
	}
	it := a.item(off, false)
	it.Value = copyOut(it.Value, dst, buf)
	a.setBits(off, bVisited|bFetched)
	a.setAccess(off, now)
	sh.mu.Unlock()
	return it, true
}

// copyOut copies v to memory of the reader's: dst's, the end of *buf, or a slice of its own.
func copyOut(v []byte, dst ValueBuf, buf *[]byte) []byte {
	switch {
	case dst != nil:
		b := dst.Take(len(v))
		copy(b, v)
		return b
	case buf != nil:
		*buf = append(*buf, v...)
		return (*buf)[len(*buf)-len(v):]
	}
	return append([]byte(nil), v...)
}

// Peek returns a copy of the live item without marking it used.
func (s *Store) Peek(key []byte) (Item, bool) {
	now := s.now()
	_, sh, h := s.locate(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if u := s.unsyncedLocked(sh, key); u != nil {
		return s.visible(u, now)
	}
	a := &sh.mu.a
	off, _ := a.find(key, h)
	if off < 0 || s.deadLocked(a, off, now) {
		return Item{}, false
	}
	return a.item(off, true), true
}

// unsyncedLocked returns key's entry while a change of it is not yet durable
// (nil otherwise, dropping a stale entry).
func (s *Store) unsyncedLocked(sh *shard, key []byte) *unsynced {
	u := sh.mu.unsynced[string(key)]
	if u == nil {
		return nil
	}
	if u.seq <= s.disk.visible.Load() {
		delete(sh.mu.unsynced, string(key))
		return nil
	}
	return u
}

// visible is what a reader gets of the key: the version before its unsynced changes.
func (s *Store) visible(u *unsynced, now int64) (Item, bool) {
	if !u.priorOK || s.dead(&u.prior, now) {
		return Item{}, false
	}
	return u.prior, true
}

// removeDeadLocked removes the record at off (index slot slot), which deadLocked has found gone at now, and
// counts an expiry.
func (s *Store) removeDeadLocked(sh *shard, off int64, slot int, now int64) {
	a := &sh.mu.a
	if e := a.exptime(off); e != 0 && e <= now {
		s.expired.Add(1)
		if a.bits(off)&bFetched == 0 {
			sh.mu.classes[a.cls(off)].ExpiredUnfetched++
		}
	}
	s.removeLocked(sh, off, slot, true)
}

// Update runs fn under the key's shard lock with the live item (nil when the key
// is absent or expired). fn may change fields of cur in place and return Save,
// or return Replace with a new item, Remove, or Keep (changes of cur's
// volatile fields stay in memory with Keep too). cur.Value is the arena's own
// memory: fn may read it but must copy it to keep it, and must not change it
// (to store another value, return Replace). It returns the item now
// stored (zero when none), its Value the caller's own, and, for a change that could not be stored or made
// durable, an error. fn must not block and must not call the store.
func (s *Store) Update(key []byte, fn func(cur *Item) (Action, Item)) (Item, error) {
	return s.update(key, fn, true, nil)
}

// UpdateInto is Update with the value of a result that fn kept (Keep, Save) copied to memory dst gives (see
// GetInto) instead of a slice of its own.
func (s *Store) UpdateInto(key []byte, fn func(cur *Item) (Action, Item), dst ValueBuf) (Item, error) {
	return s.update(key, fn, true, dst)
}

// update is Update; without withValue, the result of Keep and Save has no Value (nothing to copy); with dst, it
// is copied there.
func (s *Store) update(key []byte, fn func(cur *Item) (Action, Item), withValue bool, dst ValueBuf) (Item, error) {
	now := s.now()
	idx, sh, h := s.locate(key)
	sh.mu.Lock()
	a := &sh.mu.a
	off, slot := a.find(key, h)
	if off >= 0 && s.deadLocked(a, off, now) {
		s.removeDeadLocked(sh, off, slot, now)
		off, slot = -1, -1
	}
	var cur *Item
	wasEphemeral := false
	if off >= 0 {
		// The shard's own scratch Item: a local one would escape to the heap through fn on every call.
		cur = &sh.mu.cur
		*cur = a.item(off, false)
		wasEphemeral = cur.Ephemeral
	}
	// With sync durability, readers must not see a change before it is
	// durable: remember what they see now (the key's pending entry, or the
	// live item) before fn may change the item in place.
	var pending *unsynced
	var prior Item
	hidesChanges := s.disk != nil && s.disk.durability == DurabilitySync
	if hidesChanges {
		pending = s.unsyncedLocked(sh, key)
		if pending == nil && off >= 0 {
			prior = *cur
			prior.Value = append([]byte(nil), cur.Value...)
		}
	}
	var value []byte // the live value, for a change that keeps it
	if off >= 0 {
		value = a.value(off)
	}
	action, next := fn(cur)
	if off >= 0 && action == Save && !sameBytes(cur.Value, value) {
		// fn gave the item another value: that is a new version, stored as one.
		action, next = Replace, *cur
	}
	if s.disk != nil && touchesDisk(action, off >= 0 && !wasEphemeral, &next) {
		if err := s.disk.failure(); err != nil {
			// The change cannot be made durable: refuse it rather than let
			// memory and disk part ways.
			sh.mu.Unlock()
			return Item{}, err
		}
	}
	if off >= 0 && (action == Keep || action == Save) {
		a.setBits(off, bVisited) // a command that found the item counts as a use for the clock
	}
	var result Item
	var seq uint64
	switch action {
	case Keep:
		if off >= 0 {
			a.setMeta(off, cur)
			result = *cur
			result.Value = nil
			if withValue {
				result.Value = copyOut(value, dst, nil)
			}
		}
	case Save:
		if off < 0 {
			sh.mu.Unlock()
			return Item{}, nil
		}
		if cur.CAS == 0 {
			cur.CAS = s.nextCAS.Add(1)
		}
		a.setMeta(off, cur)
		result = *cur
		result.Value = nil
		if !cur.Ephemeral && s.disk != nil {
			// What the disk gets must stay as it is until it has it: logLocked copies it (the ring may move).
			result.Value = value
			seq = s.logLocked(sh, idx, opPut, key, &result)
			result.Value = nil
		}
		if withValue {
			result.Value = copyOut(value, dst, nil)
		}
	case Remove:
		if off < 0 {
			sh.mu.Unlock()
			return Item{}, nil
		}
		s.removeLocked(sh, off, slot, true)
		if !wasEphemeral {
			seq = s.lastSeqLocked(sh)
		}
	case Replace:
		if len(key) > MaxKeyLen || recLen(len(key), len(next.Value), next.Tag) > a.end {
			sh.mu.Unlock()
			return Item{}, ErrNoMemory
		}
		if a.owns(next.Value) {
			next.Value = append([]byte(nil), next.Value...) // cur's value, which making room may move
		}
		if off >= 0 {
			// A persisted version replaced by an ephemeral one leaves the disk.
			s.removeLocked(sh, off, slot, next.Ephemeral)
		}
		if next.CAS == 0 {
			next.CAS = s.nextCAS.Add(1)
		}
		next.LastAccess = now
		if !s.insertLocked(sh, key, h, &next, now) {
			// Only an index that grew past what the shard has left can refuse it.
			seq = s.lastSeqLocked(sh)
			*cur = Item{}
			sh.mu.Unlock()
			s.waitDurable(seq)
			return Item{}, ErrNoMemory
		}
		s.totalItems.Add(1)
		result = next
		if !next.Ephemeral && s.disk != nil {
			// What the disk gets must stay as it is until it has it; the caller may reuse its value, so logLocked
			// copies it.
			seq = s.logLocked(sh, idx, opPut, key, &next)
		}
	}
	if hidesChanges {
		switch {
		case seq != 0 && pending != nil:
			pending.seq = seq
		case seq != 0:
			if sh.mu.unsynced == nil {
				sh.mu.unsynced = make(map[string]*unsynced)
			}
			sh.mu.unsynced[string(key)] = &unsynced{seq: seq, prior: prior, priorOK: off >= 0}
		case pending != nil && action == Replace && next.Ephemeral:
			// An ephemeral copy is shown at once, as always; it still answers
			// only once the change it replaced is durable (below).
			delete(sh.mu.unsynced, string(key))
		}
		if pending != nil {
			// What fn saw, and so what the result depends on, is not yet
			// durable: answer only once it is.
			seq = max(seq, pending.seq)
		}
	}
	if cur != nil {
		*cur = Item{} // no reference to the arena or to fn's values stays behind
	}
	sh.mu.Unlock()
	if err := s.waitDurable(seq); err != nil {
		s.forget(sh, key, result.CAS)
		return Item{}, err
	}
	return result, nil
}

// sameBytes reports whether a and b are the same slice of memory.
func sameBytes(a, b []byte) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}

// touchesDisk reports whether action on a live item (persisted: one that is
// not ephemeral), storing next for Replace, writes to the disk. Changes that only involve
// ephemeral items do not, so they go on when the disk has failed: dropping or
// replacing a cached copy must never be refused.
func touchesDisk(action Action, persisted bool, next *Item) bool {
	switch action {
	case Keep:
		return false
	case Replace:
		return persisted || !next.Ephemeral
	}
	return persisted
}

// forget drops a change that could not be made durable from memory, so memory
// never shows what the client was told failed. With sync durability the key
// goes back to what readers saw before its unsynced changes (none of them can
// become durable any more: a failure is sticky); otherwise the change is
// dropped if it is still the live version.
func (s *Store) forget(sh *shard, key []byte, cas uint64) {
	_, _, h := s.locate(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	a := &sh.mu.a
	off, slot := a.find(key, h)
	if u := s.unsyncedLocked(sh, key); u != nil {
		if off >= 0 {
			s.removeLocked(sh, off, slot, false)
		}
		delete(sh.mu.unsynced, string(key))
		if u.priorOK && recLen(len(key), len(u.prior.Value), u.prior.Tag) <= a.end {
			s.insertLocked(sh, key, h, &u.prior, s.now())
		}
		return
	}
	if off >= 0 && a.cas(off) == cas {
		s.removeLocked(sh, off, slot, false)
	}
}

// Touch is a convenience for changing an item's expiry; it reports whether the key was live. The item it returns
// has no Value.
func (s *Store) Touch(key []byte, exptime int64) (Item, bool, error) {
	found := false
	it, err := s.update(key, func(cur *Item) (Action, Item) {
		if cur == nil {
			return Keep, Item{}
		}
		found = true
		cur.Exptime = exptime
		return Save, Item{}
	}, false, nil)
	return it, found, err
}

// FlushAll removes every item and cancels a pending delayed flush (memcached:
// a flush_all replaces oldest_live). On a failed disk it is refused and
// changes nothing, as a set or delete is: emptying memory alone would let the
// items come back at the next start. The arenas give their memory back.
func (s *Store) FlushAll() error {
	s.flushMu.Lock()
	defer s.flushMu.Unlock()
	if s.disk != nil {
		if err := s.disk.failure(); err != nil {
			return err
		}
	}
	defer s.flushAt.Store(0) // after the shards are empty, so a due deadline holds until then
	var seq uint64
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		sh.mu.unsynced = nil
		sh.mu.a.reset()
		s.resetCursorsLocked(sh)
		sh.mu.items, sh.mu.used = 0, 0
		for c := range sh.mu.classes {
			sh.mu.classes[c].Items, sh.mu.classes[c].Bytes = 0, 0
		}
		if s.disk != nil {
			seq = s.disk.appendLocked(sh, record{op: opFlushShard, shard: byte(i)})
		}
		sh.mu.Unlock()
	}
	return s.waitDurable(seq)
}

// FlushAt is flush_all with a delay: every item last stored or fetched before
// at (Unix seconds) is dead once the clock reaches at, including items stored
// between now and then (memcached's oldest_live). It replaces any pending
// deadline; at <= now flushes now (FlushAll). On a failed disk it is refused
// and changes nothing, as FlushAll is.
//
// The deadline itself lives in memory only: a restart before it comes drops
// the pending flush (the items stay). Once it has come, the crawler (or Close)
// deletes the dead items from the disk as well, so a restart does not bring
// them back; until that sweep is durable a crash may, as with any async write.
func (s *Store) FlushAt(at int64) error {
	if at <= s.now() {
		return s.FlushAll()
	}
	s.flushMu.Lock()
	defer s.flushMu.Unlock()
	if s.disk != nil {
		if err := s.disk.failure(); err != nil {
			return err
		}
	}
	s.flushAt.Store(at)
	return nil
}

// sweepFlushed removes, memory and disk, the items a delayed flush_all whose
// deadline has come invalidated, once per deadline. Until it runs they are
// dead already (see dead); it only frees memory and makes the disk agree.
func (s *Store) sweepFlushed() error {
	now := s.now()
	if at := s.flushAt.Load(); at == 0 || at > now || s.swept.Load() == at {
		return nil
	}
	s.flushMu.Lock()
	defer s.flushMu.Unlock()
	at := s.flushAt.Load()
	if at == 0 || at > now || s.swept.Load() == at {
		return nil
	}
	var seq uint64
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		a := &sh.mu.a
		for off := a.first(); off >= 0; off = a.next(off) {
			if a.live(off) && a.access(off) < at {
				s.removeLocked(sh, off, a.slotOf(off), true)
			}
		}
		for _, u := range sh.mu.unsynced {
			if u.priorOK && flushedBy(&u.prior, at, now) {
				u.priorOK = false // else it would show again if the deadline is replaced
			}
		}
		seq = max(seq, s.lastSeqLocked(sh))
		sh.mu.Unlock()
	}
	s.swept.Store(at)
	if err := s.waitDurable(seq); err != nil {
		return fmt.Errorf("store: removing the items of a delayed flush_all from disk: %w", err)
	}
	return nil
}

// Stats returns the store's counters.
func (s *Store) Stats() Stats {
	st := Stats{
		TotalItems: s.totalItems.Load(),
		Evictions:  s.evictions.Load(),
		Expired:    s.expired.Load(),
		Limit:      s.limit.Load(),
	}
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		a := &sh.mu.a
		st.CurrItems += sh.mu.items
		st.Bytes += sh.mu.used
		st.Malloced += sh.mu.peak
		st.Arena += a.memory()
		st.IndexBytes += int64(len(a.tableMem))
		st.IndexSlots += int64(len(a.table))
		// The first live record from the tail; dead ones before it are few unless most items were just removed.
		for off, n := a.first(), 0; off >= 0 && n < 1000; off, n = a.next(off), n+1 {
			if a.live(off) {
				if t := a.access(off); st.TailAccess == 0 || t < st.TailAccess {
					st.TailAccess = t
				}
				break
			}
		}
		sh.mu.Unlock()
	}
	return st
}

// SetLimit changes the memory limit (memcached's cache_memlimit). Each shard's
// arena is remade at the new size with its newest items that fit, oldest
// first, at once; those that do not are evicted.
func (s *Store) SetLimit(limit int64) error {
	if limit <= 0 {
		return errors.New("store: MemoryLimit must be positive")
	}
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		// Asked under the shard's lock: Close marks the store closed before freeArenas takes each shard's lock,
		// so a shard whose arena Close already gave back is seen closed here, and one it has yet to reach gets
		// the new arena given back too. Checked once before the loop, a Close between the check and a shard's
		// resize left that shard a mapped arena no one would unmap.
		if s.closed.Load() {
			sh.mu.Unlock()
			return ErrClosed // no arena of the new size to make: Close gave them back
		}
		sh.limit = limit / numShards
		s.resizeLocked(sh, sh.limit)
		sh.mu.peak = max(min(sh.mu.peak, sh.limit), sh.mu.used)
		sh.mu.Unlock()
	}
	s.limit.Store(limit)
	return nil
}

// resizeLocked remakes the shard's arena for limit: the live records are
// copied, oldest first, into a new ring after the older ones that would not
// fit are evicted, and the old arena's memory is given back.
func (s *Store) resizeLocked(sh *shard, limit int64) {
	old := &sh.mu.a
	var offs []int64
	for off := old.first(); off >= 0; off = old.next(off) {
		if old.live(off) {
			offs = append(offs, off)
		}
	}
	// The newest records that fit beside an index for them.
	na := newArena(limit, s.hashMask, len(offs))
	keep, total := len(offs), int64(0)
	for keep > 0 {
		n := old.size(offs[keep-1])
		if total+n > na.end {
			break
		}
		total += n
		keep--
	}
	now := s.now()
	for _, off := range offs[:keep] {
		s.evictLocked(sh, off, old.slotOf(off), now)
	}
	// The records keep their logical positions' order, and end where the old head's count was (see Walk).
	na.headLog, na.tailLog = old.headLog-total, old.headLog-total
	for _, off := range offs[keep:] {
		n := old.size(off)
		at := na.alloc(n)
		copy(na.buf[at:at+n], old.buf[off:off+n])
		na.touched = max(na.touched, at+n)
		na.index(old.hashOf(old.key(off)), at)
	}
	old.free()
	sh.mu.a = na
	s.resetCursorsLocked(sh)
}

// Walk calls fn with each live item (memcached's lru_crawler metadump), one
// batch at a time: up to a few MiB of a shard's items are copied under its
// lock and fn runs without it, so fn may block. It stops when fn returns
// false. Items changed during the walk may be seen in either version, or
// not at all, and an item the ring's clock moved meanwhile may be seen twice
// or not at all;
// with sync durability, a change may be seen before it is durable.
func (s *Store) Walk(fn func(key string, it Item) bool) {
	type entry struct {
		key string
		it  Item
	}
	var batch []entry
	for i := range s.shards {
		sh := &s.shards[i]
		cursor := int64(cursorEnd)
		sh.mu.Lock()
		sh.mu.cursors = append(sh.mu.cursors, &cursor)
		a := &sh.mu.a
		// Records written after the walk reached the shard are not its to see: without this bound a walk that
		// the tail keeps passing while clients write would go on as long as they do.
		until := a.headLog
		off := a.first()
		for off >= 0 {
			now := s.now()
			batch = batch[:0]
			size := 0
			for ; off >= 0 && size < walkBatch; off = a.next(off) {
				if a.logical(off) >= until {
					off = cursorEnd
					break
				}
				if a.live(off) && !s.deadLocked(a, off, now) {
					batch = append(batch, entry{string(a.key(off)), a.item(off, true)})
					size += int(a.size(off))
				}
			}
			cursor = off
			sh.mu.Unlock()
			for j := range batch {
				if !fn(batch[j].key, batch[j].it) {
					sh.mu.Lock()
					s.dropCursorLocked(sh, &cursor)
					sh.mu.Unlock()
					return
				}
			}
			clear(batch)
			sh.mu.Lock()
			a = &sh.mu.a
			if off = cursor; off == cursorTail {
				off = a.first()
			}
		}
		s.dropCursorLocked(sh, &cursor)
		sh.mu.Unlock()
	}
}

// walkBatch bounds the bytes of items Walk copies under one hold of a shard's lock (a variable for tests).
var walkBatch = 4 << 20

// A scan's cursor (shard.mu.cursors) is a record's offset, cursorEnd when the scan has reached the newest record,
// or cursorTail when the ring's tail passed the record it was at (or the ring was remade): the scan goes on from
// the tail then.
const (
	cursorEnd  = -1
	cursorTail = -2
)

// passCursorsLocked notes that the tail is about to pass the record at off.
func (sh *shard) passCursorsLocked(off int64) {
	for _, c := range sh.mu.cursors {
		if *c == off {
			*c = cursorTail
		}
	}
}

// resetCursorsLocked sends every scan back to the tail: the ring was emptied or remade.
func (s *Store) resetCursorsLocked(sh *shard) {
	for _, c := range sh.mu.cursors {
		*c = cursorTail
	}
}

func (s *Store) dropCursorLocked(sh *shard, c *int64) {
	for i, p := range sh.mu.cursors {
		if p == c {
			sh.mu.cursors = append(sh.mu.cursors[:i], sh.mu.cursors[i+1:]...)
			return
		}
	}
}

// insertLocked writes key and it as a new live record at the ring's head,
// making room first (freeTailLocked), and indexes it. It reports false, having
// stored nothing, when the record cannot fit even in an empty ring (the
// caller checked it against end; only the index's growth can move end under it).
func (s *Store) insertLocked(sh *shard, key []byte, h uint64, it *Item, now int64) bool {
	a := &sh.mu.a
	if (a.count+1)*4 > len(a.table)*3 {
		a.grow()
	}
	n := recLen(len(key), len(it.Value), it.Tag)
	for !a.fits(n) {
		if !s.freeTailLocked(sh, now) {
			return false
		}
	}
	off := a.alloc(n)
	cls := uint8(Class(len(key), len(it.Value), it.Flags) - 1)
	a.write(off, key, it, cls)
	a.index(h, off)
	sh.mu.items++
	size := a.charge(off)
	sh.mu.used += size
	sh.mu.peak = max(sh.mu.peak, sh.mu.used)
	sh.classCountLocked(cls, size, 1)
	return true
}

// removeLocked makes the live record at off (index slot slot) dead; log says
// whether the removal is a change the disk must see (false when it is about
// to be replaced). Its bytes stay in the ring until the tail reaches them.
func (s *Store) removeLocked(sh *shard, off int64, slot int, log bool) {
	a := &sh.mu.a
	a.clearBits(off, bLive)
	a.unindex(slot)
	size := a.charge(off)
	sh.mu.items--
	sh.mu.used -= size
	sh.classCountLocked(a.cls(off), size, -1)
	if log && s.disk != nil && a.bits(off)&bEphemeral == 0 {
		k, _ := s.disk.carveLocked(sh, a.key(off), nil)
		s.disk.appendLocked(sh, record{op: opDelete, shard: sh.index, key: k})
	}
}

// freeTailLocked moves the ring's tail past one record, the clock's step:
// a dead record is dropped, an expired one removed as expired, a visited one
// loses its bit and moves to the head, an unvisited live one is evicted. It
// reports false when the ring holds nothing to free. now is the store's clock.
func (s *Store) freeTailLocked(sh *shard, now int64) bool {
	a := &sh.mu.a
	if !a.wrapped {
		return false // fits wraps a ring with records in it; an unwrapped one that does not fit is empty
	}
	if a.tailWrap() {
		return true
	}
	off := a.tail
	n := a.size(off)
	sh.passCursorsLocked(off)
	switch {
	case !a.live(off):
	case s.deadLocked(a, off, now):
		s.removeDeadLocked(sh, off, a.slotOf(off), now)
	case a.bits(off)&bVisited != 0:
		a.clearBits(off, bVisited)
		slot := a.slotOf(off)
		to := a.head
		copy(a.buf[to:to+n], a.buf[off:off+n])
		a.repoint(slot, to)
		a.alloc(n)
	default:
		s.evictLocked(sh, off, a.slotOf(off), now)
	}
	a.tail += n
	a.tailLog += n
	return true
}

// evictLocked removes the live record at off (index slot slot) to make room, and counts an eviction.
func (s *Store) evictLocked(sh *shard, off int64, slot int, now int64) {
	a := &sh.mu.a
	s.evictions.Add(1)
	c := &sh.mu.classes[a.cls(off)]
	c.Evicted++
	if a.exptime(off) != 0 {
		c.EvictedNonzero++
	}
	if a.bits(off)&bFetched == 0 {
		c.EvictedUnfetched++
	}
	c.evictedAt = now
	c.EvictedTime = max(0, c.evictedAt-a.access(off))
	s.removeLocked(sh, off, slot, true)
}

func (s *Store) logLocked(sh *shard, idx int, op recordOp, key []byte, it *Item) uint64 {
	if s.disk == nil {
		return 0
	}
	k, v := s.disk.carveLocked(sh, key, it.Value)
	return s.disk.appendLocked(sh, record{op: op, shard: byte(idx), key: k, value: v, flags: it.Flags, exptime: it.Exptime, cas: it.CAS})
}

func (s *Store) lastSeqLocked(sh *shard) uint64 {
	if s.disk == nil || len(sh.mu.pending) == 0 {
		return 0
	}
	return sh.mu.pending[len(sh.mu.pending)-1].seq
}

func (s *Store) waitDurable(seq uint64) error {
	if seq == 0 || s.disk == nil {
		return nil
	}
	return s.disk.waitDurable(seq)
}

// crawlLoop removes expired items in the background, a bounded number of
// nodes per shard per tick so no lock is held for long.
func (s *Store) crawlLoop() {
	defer s.wg.Done()
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			if err := s.sweepFlushed(); err != nil {
				s.log.Error("store: delayed flush_all", "err", err)
			}
			now := s.now()
			for i := range s.shards {
				s.crawlShard(&s.shards[i], now, 2000)
			}
		}
	}
}

func (s *Store) crawlShard(sh *shard, now int64, budget int) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	a := &sh.mu.a
	off := sh.mu.crawl
	if off < 0 {
		off = a.first()
	}
	for ; off >= 0 && budget > 0; budget-- {
		if a.live(off) && s.deadLocked(a, off, now) {
			s.removeDeadLocked(sh, off, a.slotOf(off), now)
		}
		off = a.next(off)
	}
	sh.mu.crawl = off
}
