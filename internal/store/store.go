// Package store is keyway's local tier: items in memory under a byte limit,
// evicted with SIEVE, expired lazily and by a background crawler, each given a
// unique CAS id, and optionally persisted to Pebble so a restart comes back warm.
// The same Pebble keeps two kinds of records for other packages beside the
// items: the write-behind queue's journal (journal.go) and named aside blobs
// such as the warm-restart snapshot (aside.go).
//
// Invariants:
//   - Keys are split over a fixed number of shards by hash; every read and
//     change of a key happens under its shard's mutex, so each Update is atomic.
//   - An Item's Value is never modified after it is stored: a change stores a
//     new slice. Callers may therefore keep and write out a Value after the lock
//     is released.
//   - A shard's memory use (keys, values and a fixed per-item overhead) never
//     exceeds its share of the limit after an Update returns.
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
// the node, its map entry and allocator rounding, measured roughly.
const ItemOverhead = 160

var (
	// ErrNoMemory means the item cannot fit in its shard even after evicting everything.
	ErrNoMemory = errors.New("out of memory storing object")
	// ErrPersist means the change is in memory but could not be made durable.
	ErrPersist = errors.New("could not persist the change")
	// ErrClosed means the store has been closed.
	ErrClosed = errors.New("store is closed")
)

// Item is one stored value and its metadata.
//
// Its fields are ordered widest first, so the struct has no padding: 64 bytes, and a node (below) 104, which the
// allocator rounds to its 112-byte class. With the bytes fields first and in declaration order the node took 128
// bytes, a seventh more, and every item pays it (see TestNodeSizeClass).
type Item struct {
	Value   []byte // immutable once stored
	Exptime int64  // absolute Unix seconds; 0 means never
	CAS     uint64 // unique id of this version; 0 in a new item means "assign one"

	// Volatile state for the meta protocol; not persisted.
	// LastAccess also decides a delayed flush_all (see Store.FlushAt), as
	// memcached's it->time does; an item loaded from disk counts as stored then.
	LastAccess int64  // Unix seconds of the last fetch or store
	Tag        uint64 // opaque to the store: the engine marks rows cached from a table with its epoch
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
	// TailAccess is the oldest LastAccess among the items at the end of
	// each shard's SIEVE queue, where eviction looks first (0: no items).
	TailAccess int64
}

// Store is the sharded in-memory item table. It is safe for concurrent use.
type Store struct {
	shards  [numShards]shard
	limit   atomic.Int64 // changed only by SetLimit, under every shard's lock
	nextCAS atomic.Uint64
	now     func() int64
	log     *slog.Logger

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
	wg       sync.WaitGroup
}

type shard struct {
	mu struct {
		sync.Mutex
		items map[string]*node
		// SIEVE list: head is the newest item; the hand walks from tail to head.
		head, tail, hand *node
		crawl            *node // expiry crawler cursor
		used             int64
		peak             int64 // high-water mark of used (Stats.Malloced)
		classes          [NumClasses]ClassStats
		pending          []record // changes not yet handed to the disk
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
// visible is stale and is dropped by whoever meets it.
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

type node struct {
	key        string
	item       Item
	prev, next *node // prev is towards the head (newer)
	visited    bool
	cls        uint8 // slab class - 1 the node is counted in (classCountLocked)
}

// Open creates a store and, with a DataDir, loads what the disk holds before returning.
func Open(o Options) (*Store, error) {
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
		now:  o.Now,
		log:  o.Logger,
		stop: make(chan struct{}),
	}
	s.limit.Store(o.MemoryLimit)
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.items = make(map[string]*node)
		sh.mu.journalPending, sh.mu.journalOnDisk = map[string]int{}, map[string]struct{}{}
		sh.limit = o.MemoryLimit / numShards
		sh.index = byte(i)
	}
	if o.DataDir != "" && o.Durability != DurabilityNone {
		d, err := openDisk(s, o)
		if err != nil {
			return nil, err
		}
		s.disk = d
		if err := d.load(); err != nil {
			d.db.Close()
			return nil, err
		}
		d.start()
	}
	s.wg.Add(1)
	go s.crawlLoop()
	return s, nil
}

// Close stops background work and, with persistence, writes every pending
// change and closes the disk.
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

// Get returns a copy of the live item as it was before this access, and marks
// it fetched and recently used.
func (s *Store) Get(key []byte) (Item, bool) {
	now := s.now()
	_, sh := s.shardFor(key)
	sh.mu.Lock()
	if u := s.unsyncedLocked(sh, key); u != nil {
		sh.mu.Unlock()
		return s.visible(u, now)
	}
	n := sh.mu.items[string(key)]
	if n == nil {
		sh.mu.Unlock()
		return Item{}, false
	}
	if s.dead(&n.item, now) {
		s.unlinkDeadLocked(sh, n, now)
		sh.mu.Unlock()
		return Item{}, false
	}
	it := n.item
	n.visited = true
	n.item.Fetched = true
	n.item.LastAccess = now
	sh.mu.Unlock()
	return it, true
}

// Peek returns a copy of the live item without marking it used.
func (s *Store) Peek(key []byte) (Item, bool) {
	now := s.now()
	_, sh := s.shardFor(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if u := s.unsyncedLocked(sh, key); u != nil {
		return s.visible(u, now)
	}
	n := sh.mu.items[string(key)]
	if n == nil || s.dead(&n.item, now) {
		return Item{}, false
	}
	return n.item, true
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

// unlinkDeadLocked removes n, which dead has found gone at now, and counts an expiry.
func (s *Store) unlinkDeadLocked(sh *shard, n *node, now int64) {
	s.unlinkLocked(sh, n, true)
	if n.item.Expired(now) {
		s.expired.Add(1)
		if !n.item.Fetched {
			sh.mu.classes[n.cls].ExpiredUnfetched++
		}
	}
}

// Update runs fn under the key's shard lock with the live item (nil when the key
// is absent or expired). fn may change fields of cur in place and return Save,
// or return Replace with a new item, Remove, or Keep. It returns the item now
// stored (zero when none) and, for a change that could not be stored or made
// durable, an error. fn must not block and must not call the store.
func (s *Store) Update(key []byte, fn func(cur *Item) (Action, Item)) (Item, error) {
	now := s.now()
	idx, sh := s.shardFor(key)
	sh.mu.Lock()
	n := sh.mu.items[string(key)]
	if n != nil && s.dead(&n.item, now) {
		s.unlinkDeadLocked(sh, n, now)
		n = nil
	}
	var cur *Item
	if n != nil {
		cur = &n.item
	}
	// With sync durability, readers must not see a change before it is
	// durable: remember what they see now (the key's pending entry, or the
	// live item) before fn may change the item in place.
	var pending *unsynced
	var prior Item
	hidesChanges := s.disk != nil && s.disk.durability == DurabilitySync
	if hidesChanges {
		pending = s.unsyncedLocked(sh, key)
		if pending == nil && n != nil {
			prior = n.item
		}
	}
	action, next := fn(cur)
	if s.disk != nil && touchesDisk(action, n, &next) {
		if err := s.disk.failure(); err != nil {
			// The change cannot be made durable: refuse it rather than let
			// memory and disk part ways.
			sh.mu.Unlock()
			return Item{}, err
		}
	}
	if n != nil && (action == Keep || action == Save) {
		n.visited = true // a command that found the item counts as a use for SIEVE
	}
	var result Item
	var seq uint64
	switch action {
	case Keep:
		if n != nil {
			result = n.item
		}
	case Save:
		if n == nil {
			sh.mu.Unlock()
			return Item{}, nil
		}
		if n.item.CAS == 0 {
			n.item.CAS = s.nextCAS.Add(1)
		}
		result = n.item
		if !n.item.Ephemeral {
			seq = s.logLocked(sh, idx, opPut, n.key, &n.item)
		}
	case Remove:
		if n == nil {
			sh.mu.Unlock()
			return Item{}, nil
		}
		s.unlinkLocked(sh, n, true)
		if !n.item.Ephemeral {
			seq = s.lastSeqLocked(sh)
		}
	case Replace:
		size := Size(len(key), len(next.Value))
		if size > sh.limit {
			sh.mu.Unlock()
			return Item{}, ErrNoMemory
		}
		var k string
		if n != nil {
			k = n.key
			// A persisted version replaced by an ephemeral one leaves the disk.
			s.unlinkLocked(sh, n, next.Ephemeral)
		} else {
			k = string(key)
		}
		for sh.mu.used+size > sh.limit && sh.mu.tail != nil {
			s.evictLocked(sh)
		}
		if next.CAS == 0 {
			next.CAS = s.nextCAS.Add(1)
		}
		next.LastAccess = now
		nn := &node{key: k, item: next}
		s.linkLocked(sh, nn)
		s.totalItems.Add(1)
		result = nn.item
		if !next.Ephemeral {
			seq = s.logLocked(sh, idx, opPut, nn.key, &nn.item)
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
			sh.mu.unsynced[string(key)] = &unsynced{seq: seq, prior: prior, priorOK: n != nil}
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
	sh.mu.Unlock()
	if err := s.waitDurable(seq); err != nil {
		s.forget(sh, key, result.CAS)
		return Item{}, err
	}
	return result, nil
}

// touchesDisk reports whether action on the live node n (nil when none),
// storing next for Replace, writes to the disk. Changes that only involve
// ephemeral items do not, so they go on when the disk has failed: dropping or
// replacing a cached copy must never be refused.
func touchesDisk(action Action, n *node, next *Item) bool {
	persisted := n != nil && !n.item.Ephemeral
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
	sh.mu.Lock()
	defer sh.mu.Unlock()
	n := sh.mu.items[string(key)]
	if u := s.unsyncedLocked(sh, key); u != nil {
		if n != nil {
			s.unlinkLocked(sh, n, false)
		}
		delete(sh.mu.unsynced, string(key))
		if u.priorOK && Size(len(key), len(u.prior.Value)) <= sh.limit {
			size := Size(len(key), len(u.prior.Value))
			for sh.mu.used+size > sh.limit && sh.mu.tail != nil {
				s.evictLocked(sh)
			}
			s.linkLocked(sh, &node{key: string(key), item: u.prior})
		}
		return
	}
	if n != nil && n.item.CAS == cas {
		s.unlinkLocked(sh, n, false)
	}
}

// Touch is a convenience for changing an item's expiry; it reports whether the key was live.
func (s *Store) Touch(key []byte, exptime int64) (Item, bool, error) {
	found := false
	it, err := s.Update(key, func(cur *Item) (Action, Item) {
		if cur == nil {
			return Keep, Item{}
		}
		found = true
		cur.Exptime = exptime
		return Save, Item{}
	})
	return it, found, err
}

// FlushAll removes every item and cancels a pending delayed flush (memcached:
// a flush_all replaces oldest_live). On a failed disk it is refused and
// changes nothing, as a set or delete is: emptying memory alone would let the
// items come back at the next start.
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
		sh.mu.items = make(map[string]*node)
		sh.mu.head, sh.mu.tail, sh.mu.hand, sh.mu.crawl = nil, nil, nil, nil
		sh.mu.used = 0
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
		for n := sh.mu.tail; n != nil; {
			prev := n.prev
			if flushedBy(&n.item, at, now) {
				s.unlinkLocked(sh, n, true)
			}
			n = prev
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
		st.CurrItems += int64(len(sh.mu.items))
		st.Bytes += sh.mu.used
		st.Malloced += sh.mu.peak
		if t := sh.mu.tail; t != nil && (st.TailAccess == 0 || t.item.LastAccess < st.TailAccess) {
			st.TailAccess = t.item.LastAccess
		}
		sh.mu.Unlock()
	}
	return st
}

// SetLimit changes the memory limit (memcached's cache_memlimit). A lower
// limit evicts at once, shard by shard, what no longer fits.
func (s *Store) SetLimit(limit int64) error {
	if limit <= 0 {
		return errors.New("store: MemoryLimit must be positive")
	}
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		sh.limit = limit / numShards
		for sh.mu.used > sh.limit && sh.mu.tail != nil {
			s.evictLocked(sh)
		}
		sh.mu.peak = max(min(sh.mu.peak, sh.limit), sh.mu.used)
		sh.mu.Unlock()
	}
	s.limit.Store(limit)
	return nil
}

// Walk calls fn with each live item (memcached's lru_crawler metadump), one
// shard at a time: a shard's items are copied under its lock and fn runs
// without it, so fn may block. It stops when fn returns false. Items
// changed during the walk may be seen in either version, or not at all;
// with sync durability, a change may be seen before it is durable.
func (s *Store) Walk(fn func(key string, it Item) bool) {
	type entry struct {
		key string
		it  Item
	}
	var batch []entry
	for i := range s.shards {
		sh := &s.shards[i]
		now := s.now()
		batch = batch[:0]
		sh.mu.Lock()
		for n := sh.mu.tail; n != nil; n = n.prev {
			if !s.dead(&n.item, now) {
				batch = append(batch, entry{n.key, n.item})
			}
		}
		sh.mu.Unlock()
		for j := range batch {
			if !fn(batch[j].key, batch[j].it) {
				return
			}
		}
		clear(batch)
	}
}

// linkLocked puts n at the head of the SIEVE list.
func (s *Store) linkLocked(sh *shard, n *node) {
	sh.mu.items[n.key] = n
	n.next = sh.mu.head
	n.prev = nil
	if sh.mu.head != nil {
		sh.mu.head.prev = n
	}
	sh.mu.head = n
	if sh.mu.tail == nil {
		sh.mu.tail = n
	}
	sh.mu.used += Size(len(n.key), len(n.item.Value))
	sh.mu.peak = max(sh.mu.peak, sh.mu.used)
	sh.classCountLocked(n, 1)
}

// unlinkLocked removes n from the shard; log says whether the removal is a
// change the disk must see (false when n is about to be replaced).
func (s *Store) unlinkLocked(sh *shard, n *node, log bool) {
	if sh.mu.hand == n {
		sh.mu.hand = n.prev
	}
	if sh.mu.crawl == n {
		sh.mu.crawl = n.prev
	}
	if n.prev != nil {
		n.prev.next = n.next
	} else {
		sh.mu.head = n.next
	}
	if n.next != nil {
		n.next.prev = n.prev
	} else {
		sh.mu.tail = n.prev
	}
	n.prev, n.next = nil, nil
	delete(sh.mu.items, n.key)
	sh.mu.used -= Size(len(n.key), len(n.item.Value))
	sh.classCountLocked(n, -1)
	if log && s.disk != nil && !n.item.Ephemeral {
		s.disk.appendLocked(sh, record{op: opDelete, shard: sh.index, key: n.key})
	}
}

// evictLocked removes one item chosen by SIEVE: the hand skips (and clears)
// visited items from the tail towards the head and evicts the first unvisited one.
func (s *Store) evictLocked(sh *shard) {
	h := sh.mu.hand
	if h == nil {
		h = sh.mu.tail
	}
	for h.visited {
		h.visited = false
		h = h.prev
		if h == nil {
			h = sh.mu.tail
		}
	}
	sh.mu.hand = h.prev
	s.unlinkLocked(sh, h, true)
	s.evictions.Add(1)
	c := &sh.mu.classes[h.cls]
	c.Evicted++
	if h.item.Exptime != 0 {
		c.EvictedNonzero++
	}
	if !h.item.Fetched {
		c.EvictedUnfetched++
	}
	c.evictedAt = s.now()
	c.EvictedTime = max(0, c.evictedAt-h.item.LastAccess)
}

func (s *Store) logLocked(sh *shard, idx int, op recordOp, key string, it *Item) uint64 {
	if s.disk == nil {
		return 0
	}
	return s.disk.appendLocked(sh, record{op: op, shard: byte(idx), key: key, value: it.Value, flags: it.Flags, exptime: it.Exptime, cas: it.CAS})
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
	n := sh.mu.crawl
	if n == nil {
		n = sh.mu.tail
	}
	for ; n != nil && budget > 0; budget-- {
		prev := n.prev
		if s.dead(&n.item, now) {
			s.unlinkDeadLocked(sh, n, now)
		}
		n = prev
	}
	sh.mu.crawl = n
}
