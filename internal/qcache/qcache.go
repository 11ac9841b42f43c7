// Package qcache is the SQL door's result cache: the reply packets of a cacheable SELECT, kept under a key that
// says everything the reply depends on, and served again only while package validity says no table it read has
// changed since.
//
// The rules (see package validity for the stamps):
//   - A fill takes each table's Stamp before the statement goes to the backend (Begin); the reply is stored only
//     if no table it read was invalidated meanwhile (Put checks in store.Update's callback, under the store's
//     shard lock that also guards the entry), so a fill that raced a write is dropped.
//   - A stored entry is served only while every table it read is valid at its stamp and the gate of the group
//     the session reads from Vouches (validity.Gate: its binlog follower is within max_staleness, or its copies
//     carry a ttl); one group's lagging follower never closes the cache to another group's sessions. An entry
//     depends on a whole table (TableValid: any row write of it, through either door or in the binlog, drops the
//     entry) or, for a point select on an integer value or an IN list of them (BeginKeys), on those column keys
//     only (RowKeyValid: a change of another row leaves it alone). Get deletes an entry it finds invalid or
//     expired.
//   - Concurrent misses of one key make one backend query (Lead/Done): the others wait for it, bounded, and are
//     answered from what it stored.
//   - An entry with a ttl is refreshed softly: in the last part of its life (refreshWindow) the first Get is told
//     to miss, so that caller runs the statement and stores a new entry, while every other Get is still answered
//     from the old one until it expires. So a popular entry is renewed by one query, with no stampede and no gap.
//     The store item's WinSent bit (memcached's "recache token handed out") marks the entry told, set under the
//     store's lock for the version Get found (its CAS), so one caller is told.
//   - Memory: the entries are items of a store.Store of the cache's own, in memory only, within
//     Options.MemoryLimit: records in its arenas, with no Go pointer, so they are nothing for the garbage collector
//     to scan, and an entry costs its key, its reply, its encoded dependencies (a few bytes each) and the store's
//     overhead (store.ItemOverhead). Eviction is the store's clock (SIEVE), per store shard: a hit marks the entry
//     visited. An entry's value is its reply, then its dependencies, then a trailer (see encode); Get copies it
//     out, under the lock, to memory the caller gives, and Put copies the caller's reply in.
//   - Dependencies name a table by its validity.Table.Index, which the cache's Registry turns back into the table
//     (TableAt): an entry keeps no pointer.
//   - Across a restart (package warm): Save hands out only entries valid at that moment, naming their tables;
//     Restore stores one as Put stores a fill, against stamps taken before the followers replay the binlog.
//
// The key is the caller's: it must hold everything the reply bytes depend on (statement text or prepared
// statement and its parameters, default database, user, character set and protocol capabilities). A key longer
// than store.MaxKeyLen is not cached.
package qcache

import (
	"encoding/binary"
	"hash/maphash"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/keywaydb/keyway/internal/store"
	"github.com/keywaydb/keyway/internal/validity"
)

// DefaultMemoryLimit is Options.MemoryLimit's default.
const DefaultMemoryLimit = 64 << 20

// MaxReply is the largest reply kept: bigger result sets are relayed and not cached.
const MaxReply = 1 << 20

// shards split the single-flight fills (Lead, Done); the entries are split by the store's own.
const shards = 16

// Options configure a Cache.
type Options struct {
	MemoryLimit int64 // bytes, for all entries together
	Registry    *validity.Registry
	Now         func() time.Time // the clock for ttls; nil = time.Now
}

// Cache is the result cache. It is safe for concurrent use.
type Cache struct {
	reg   *validity.Registry
	now   func() time.Time
	st    *store.Store // the entries
	seed  maphash.Seed
	fills [shards]fillShard

	hits, misses, stores, dropped, joined, refreshes atomic.Int64
	bypasses                                         [numBypassReasons]atomic.Int64

	// sec is the store's clock with the default Now: the Unix second, kept by a ticker (tick) until stop closes.
	// Every store call reads its clock, and time.Now costs as much as the rest of a hit (more in a VM); a clock
	// that lags by a fraction of a second only delays the store's reclaiming of an expired entry, since Get
	// checks a ttl itself, exactly.
	sec       atomic.Int64
	stop      chan struct{}
	closeOnce sync.Once
}

// fillShard holds the keys being filled now, each with a channel closed when its fill ends (single-flight).
type fillShard struct {
	mu sync.Mutex
	m  map[string]chan struct{}
}

// Dep is one table a reply read, with the table's stamp before the statement was sent; Key, when set, is the
// column key (validity.ColumnKey) of the one row value the reply depends on.
type Dep struct {
	Table *validity.Table
	Stamp uint64
	Key   []byte
}

// An entry is a store item: its key is the cache's key, its Flags the reply's row count (a reply of at most
// MaxReply bytes has fewer than 2^32 rows), its Exptime, for an entry with a ttl, the second after it expires
// (so the store reclaims it, never before Get would stop serving it), and its value:
//
//	reply | deps | expires, refreshAt (int64 Unix nanos, only with a ttl) | len(deps) (uint32)
//
// where deps are, for each Dep, uvarints of its table's Index, its Stamp and its Key's length, then the Key (a
// whole-table dependency has none: a column key is never empty). The reply comes first so that Get's copy of
// the value is the reply where the caller wants it, followed by a few bytes it ignores.
const (
	trailerLen = 4
	ttlLen     = 16
)

// encode appends an entry's value to dst; ok is false when a dependency's table is not of reg.
func encode(dst []byte, reg *validity.Registry, reply []byte, deps []Dep, expires, refreshAt int64) (_ []byte, ok bool) {
	dst = append(dst, reply...)
	start := len(dst)
	for _, d := range deps {
		i := d.Table.Index()
		if reg.TableAt(i) != d.Table {
			return dst, false
		}
		dst = binary.AppendUvarint(dst, uint64(i))
		dst = binary.AppendUvarint(dst, d.Stamp)
		dst = binary.AppendUvarint(dst, uint64(len(d.Key)))
		dst = append(dst, d.Key...)
	}
	n := len(dst) - start
	if expires != 0 {
		dst = binary.LittleEndian.AppendUint64(dst, uint64(expires))
		dst = binary.LittleEndian.AppendUint64(dst, uint64(refreshAt))
	}
	return binary.LittleEndian.AppendUint32(dst, uint32(n)), true
}

// decoded is an entry's value taken apart (a view of it).
type decoded struct {
	reply, deps        []byte
	expires, refreshAt int64 // 0 without a ttl
}

// decode takes v, the value of an entry with a ttl or not, apart.
func decode(v []byte, ttl bool) decoded {
	end := len(v) - trailerLen
	n := int(binary.LittleEndian.Uint32(v[end:]))
	var d decoded
	if ttl {
		end -= ttlLen
		d.expires = int64(binary.LittleEndian.Uint64(v[end:]))
		d.refreshAt = int64(binary.LittleEndian.Uint64(v[end+8:]))
	}
	d.reply, d.deps = v[:end-n], v[end-n:end]
	return d
}

// eachDep calls fn with each encoded dependency of deps (a view of it for key; nil for a whole table); it stops,
// and returns false, when fn does or deps are malformed.
func eachDep(deps []byte, fn func(table uint32, stamp uint64, key []byte) bool) bool {
	for len(deps) > 0 {
		i, n := binary.Uvarint(deps)
		if n <= 0 || i > math.MaxUint32 {
			return false
		}
		deps = deps[n:]
		stamp, n := binary.Uvarint(deps)
		if n <= 0 {
			return false
		}
		deps = deps[n:]
		kl, n := binary.Uvarint(deps)
		if n <= 0 || kl > uint64(len(deps)-n) {
			return false
		}
		var key []byte
		if kl > 0 {
			key = deps[n : n+int(kl)]
		}
		deps = deps[n+int(kl):]
		if !fn(uint32(i), stamp, key) {
			return false
		}
	}
	return true
}

// validEncoded reports whether every encoded dependency in deps is still valid.
func (c *Cache) validEncoded(deps []byte) bool {
	return eachDep(deps, func(i uint32, stamp uint64, key []byte) bool {
		t := c.reg.TableAt(i)
		return t != nil && (key != nil && t.RowKeyValid(key, stamp) || key == nil && t.TableValid(stamp))
	})
}

// refreshWindow is the last part of a ttl entry's life in which it is refreshed softly: a fifth of its ttl, at
// most 5 s.
func refreshWindow(ttl time.Duration) time.Duration { return min(ttl/5, 5*time.Second) }

// New returns an empty cache. Close gives its memory back.
func New(o Options) *Cache {
	if o.MemoryLimit <= 0 {
		o.MemoryLimit = DefaultMemoryLimit
	}
	c := &Cache{reg: o.Registry, now: o.Now, seed: maphash.MakeSeed(), stop: make(chan struct{})}
	storeNow := func() int64 { return c.now().Unix() }
	if o.Now == nil {
		c.now = time.Now
		c.sec.Store(time.Now().Unix())
		storeNow = c.sec.Load
		go c.tick()
	}
	st, err := store.Open(store.Options{MemoryLimit: o.MemoryLimit, Now: storeNow})
	if err != nil {
		panic("qcache: " + err.Error()) // a memory-only store with a positive limit always opens
	}
	c.st = st
	for i := range c.fills {
		c.fills[i].m = map[string]chan struct{}{}
	}
	return c
}

// Close stops the store's background work and gives its memory back: a cache used after Close holds nothing.
func (c *Cache) Close() error {
	c.closeOnce.Do(func() { close(c.stop) })
	return c.st.Close()
}

// tick keeps sec, the store's clock, at most a tenth of a second behind time.Now (truncated: never ahead).
func (c *Cache) tick() {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-c.stop:
			return
		case now := <-t.C:
			c.sec.Store(now.Unix())
		}
	}
}

func (c *Cache) fillShard(key string) *fillShard {
	return &c.fills[maphash.String(c.seed, key)%shards]
}

// Begin returns the dependencies of a fill of a statement that reads tables: each table's stamp now.
func (c *Cache) Begin(ids []validity.TableID) []Dep {
	deps := make([]Dep, 0, len(ids))
	for _, id := range ids {
		t := c.reg.Table(id) // registered, so the binlog follower invalidates it
		deps = append(deps, Dep{Table: t, Stamp: t.Stamp()})
	}
	return deps
}

// BeginKeys is Begin for a point select of table id on column = value, or column IN (values): the reply depends
// on those column keys only. ok is false when ColumnKey cannot render a value; then use Begin. The table watches
// the column from now on (see validity.KeyWatch.Numeric), so the binlog follower reports its changes by that key.
func (c *Cache) BeginKeys(id validity.TableID, column string, values []any) (deps []Dep, ok bool) {
	keys := make([][]byte, 0, len(values))
	for _, v := range values {
		key, ok := validity.ColumnKey(nil, column, v)
		if !ok {
			return nil, false
		}
		keys = append(keys, key)
	}
	t := c.reg.Table(id)
	t.WatchKey(validity.KeyWatch{Column: column, Numeric: true}) // before the stamp: a change after it is keyed
	stamp := t.Stamp()
	for _, key := range keys {
		deps = append(deps, Dep{Table: t, Stamp: stamp, Key: key})
	}
	return deps, len(deps) > 0
}

// Trusted reports whether replies that read ids may be kept until invalidated: each is a table whose writes the
// binlog names (validity.Table.Trusted; a view is not). A reply with a ttl may be kept without it.
func (c *Cache) Trusted(ids []validity.TableID) bool {
	for _, id := range ids {
		if !c.reg.Table(id).Trusted() {
			return false
		}
	}
	return true
}

// Usable reports whether entries of a session reading from gate's group may be served (and filled) now: the
// group's binlog follower vouches for freshness, or its entries carry a ttl.
func (c *Cache) Usable(gate *validity.Gate) bool { return gate.Vouches() }

func valid(deps []Dep) bool {
	for _, d := range deps {
		if d.Key != nil && !d.Table.RowKeyValid(d.Key, d.Stamp) || d.Key == nil && !d.Table.TableValid(d.Stamp) {
			return false
		}
	}
	return true
}

// Get returns the reply stored under key and its row count, if it is still valid and gate (the session's group)
// Vouches. In a ttl entry's refresh window the first caller gets a miss (it refreshes the entry) and the others the
// old reply. The reply is copied, under the store's lock, to the end of buf (grown when it is short): reply is the
// appended bytes, the caller's own, and reply[:0] is buf's memory to give the next Get. An entry found invalid or
// expired is deleted.
//
// The entry is judged from its copy, after the lock: its dependencies' marks only rise, so one found valid then
// was valid when it was copied, as a reply handed out under the lock is served after it.
func (c *Cache) Get(gate *validity.Gate, key, buf []byte) (reply []byte, rows int64, ok bool) {
	if !gate.Vouches() {
		c.misses.Add(1)
		return nil, 0, false
	}
	it, _, found := c.st.GetAppend(key, buf)
	if !found {
		c.misses.Add(1)
		return nil, 0, false
	}
	e := decode(it.Value, it.Exptime != 0)
	var now int64
	if e.expires != 0 {
		now = c.now().UnixNano()
	}
	if !c.validEncoded(e.deps) || e.expires != 0 && now >= e.expires {
		c.remove(key, it.CAS)
		c.dropped.Add(1)
		c.misses.Add(1)
		return nil, 0, false
	}
	if e.expires != 0 && now >= e.refreshAt && !it.WinSent && c.claimRefresh(key, it.CAS) {
		c.refreshes.Add(1)
		return nil, 0, false
	}
	c.hits.Add(1)
	return e.reply, int64(it.Flags), true
}

// remove deletes key's entry if it is still the version cas (Get found it invalid).
func (c *Cache) remove(key []byte, cas uint64) {
	c.st.Update(key, func(cur *store.Item) (store.Action, store.Item) {
		if cur == nil || cur.CAS != cas {
			return store.Keep, store.Item{}
		}
		return store.Remove, store.Item{}
	})
}

// claimRefresh marks key's entry, if it is still the version cas, as told to refresh (the store item's WinSent),
// and reports whether this caller marked it: under the lock, so one caller of all that find it unmarked does.
func (c *Cache) claimRefresh(key []byte, cas uint64) (claimed bool) {
	c.st.Update(key, func(cur *store.Item) (store.Action, store.Item) {
		if cur != nil && cur.CAS == cas && !cur.WinSent {
			cur.WinSent, claimed = true, true
		}
		return store.Keep, store.Item{}
	})
	return claimed
}

// encBufs are Put's buffers for an entry's value, which the store copies.
var encBufs = sync.Pool{New: func() any { return new([]byte) }}

// Put stores reply under key unless a table in deps changed since Begin (then the reply may be stale) or the
// reply is too large; a ttl above 0 bounds the entry's life (a hint's ttl=N). The cache copies reply: the caller
// may reuse it once Put returns.
// It reports whether the reply was stored.
func (c *Cache) Put(key string, reply []byte, rows int64, deps []Dep, ttl time.Duration) bool {
	if len(reply) > MaxReply || rows < 0 || rows > math.MaxUint32 || len(key) > store.MaxKeyLen {
		return false
	}
	var expires, refreshAt, exptime int64
	if ttl > 0 {
		now := c.now()
		expires, refreshAt = now.Add(ttl).UnixNano(), now.Add(ttl-refreshWindow(ttl)).UnixNano()
		exptime = (expires + int64(time.Second) - 1) / int64(time.Second) // a second that has begun, not passed
	}
	bp := encBufs.Get().(*[]byte)
	defer func() {
		if cap(*bp) <= 64<<10 {
			encBufs.Put(bp)
		}
	}()
	v, ok := encode((*bp)[:0], c.reg, reply, deps, expires, refreshAt)
	*bp = v
	if !ok {
		return false
	}
	next := store.Item{Value: v, Flags: uint32(rows), Exptime: exptime, Ephemeral: true}
	raced := false
	_, err := c.st.Update([]byte(key), func(*store.Item) (store.Action, store.Item) {
		if !valid(deps) { // under the lock that guards the entry: no invalidation slips between check and store
			raced = true
			return store.Keep, store.Item{}
		}
		return store.Replace, next
	})
	switch {
	case raced:
		c.dropped.Add(1)
		return false
	case err != nil: // larger than a store shard's share of the limit
		return false
	}
	c.stores.Add(1)
	return true
}

// Lead makes concurrent misses of key one backend query: the first caller leads (leader true) and must call
// Done(key) when its fill ends, stored or not; the others get a channel that is closed then, after which they
// ask Get again (and run the statement themselves if the leader stored nothing).
func (c *Cache) Lead(key string) (leader bool, wait <-chan struct{}) {
	s := c.fillShard(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	if ch, ok := s.m[key]; ok {
		c.joined.Add(1)
		return false, ch
	}
	s.m[key] = make(chan struct{})
	return true, nil
}

// Done ends the fill of key that Lead made this caller lead.
func (c *Cache) Done(key string) {
	s := c.fillShard(key)
	s.mu.Lock()
	if ch, ok := s.m[key]; ok {
		close(ch)
		delete(s.m, key)
	}
	s.mu.Unlock()
}

// BypassReason says why a statement the cache would answer went to the backend and was not cached.
type BypassReason int

const (
	NotFresh  BypassReason = iota // the binlog followers do not vouch for freshness now
	Pinned                        // the session is in a transaction or changed its state
	Untrusted                     // it reads a table whose writes the binlog does not name (a view)
	numBypassReasons
)

// BypassReasons name the reasons, as /metrics labels them.
var BypassReasons = [numBypassReasons]string{NotFresh: "not_fresh", Pinned: "pinned", Untrusted: "untrusted_table"}

// Bypassed counts a statement that bypassed the cache for reason.
func (c *Cache) Bypassed(reason BypassReason) { c.bypasses[reason].Add(1) }

// Stats are the cache's counters.
type Stats struct {
	Hits      int64 `json:"hits"`
	Misses    int64 `json:"misses"`
	Stores    int64 `json:"stores"`
	Dropped   int64 `json:"dropped"`   // fills that raced a write, and entries found invalid
	Evictions int64 `json:"evictions"` // entries the store's clock evicted for memory
	Joined    int64 `json:"joined"`    // misses that waited for another session's fill of the same key
	Refreshes int64 `json:"refreshes"` // ttl entries renewed softly: a miss while the old entry was still served
	// Bypasses count the statements the cache would answer that went to the backend, by BypassReasons.
	Bypasses map[string]int64 `json:"bypasses"`
	Entries  int              `json:"entries"`
	Bytes    int64            `json:"bytes"` // what the entries are charged (store.Size each), within the limit
	// Fresh is true while every group's copies may be served (validity.Registry.Vouched: followers within
	// max_staleness, or ttl or none chosen); whether a session is answered is its own group's (validity.Gate).
	Fresh bool `json:"fresh"`
}

// Stats returns a snapshot.
func (c *Cache) Stats() Stats {
	ss := c.st.Stats()
	st := Stats{Hits: c.hits.Load(), Misses: c.misses.Load(), Stores: c.stores.Load(), Dropped: c.dropped.Load(),
		Evictions: ss.Evictions, Joined: c.joined.Load(), Refreshes: c.refreshes.Load(),
		Bypasses: map[string]int64{}, Entries: int(ss.CurrItems), Bytes: ss.Bytes, Fresh: c.reg.Vouched()}
	for r, name := range BypassReasons {
		st.Bypasses[name] = c.bypasses[r].Load()
	}
	return st
}

// Saved is an entry as a warm-restart snapshot keeps it (package warm): what it depends on is named, not stamped,
// since stamps mean nothing to another process.
type Saved struct {
	Key     string
	Reply   []byte
	Rows    int64
	Expires int64 // Unix nanos; 0 never
	Tables  []validity.TableID
}

// Save calls fn with every entry that is valid now (and not expired), a batch at a time (store.Walk: fn runs
// without the store's locks). Take the binlog checkpoints that will vouch for them before calling it (see package
// warm).
func (c *Cache) Save(fn func(Saved)) {
	now := c.now().UnixNano()
	c.st.Walk(func(key string, it store.Item) bool {
		e := decode(it.Value, it.Exptime != 0) // Walk's copy: the reply is fn's to keep
		if e.expires != 0 && e.expires <= now || !c.validEncoded(e.deps) {
			return true
		}
		sv := Saved{Key: key, Reply: e.reply, Rows: int64(it.Flags), Expires: e.expires}
		eachDep(e.deps, func(i uint32, _ uint64, _ []byte) bool {
			sv.Tables = append(sv.Tables, c.reg.TableAt(i).ID()) // validEncoded found every table
			return true
		})
		fn(sv)
		return true
	})
}

// Restore stores a saved entry as Put stores a fill: deps are the stamps of its tables taken before anything
// that could invalidate it was applied (Begin, before the binlog followers replay from the saved checkpoint), so
// an entry a replayed commit invalidated meanwhile is dropped. It reports whether the entry was stored.
func (c *Cache) Restore(sv Saved, deps []Dep) bool {
	var ttl time.Duration
	if sv.Expires != 0 {
		if ttl = time.Unix(0, sv.Expires).Sub(c.now()); ttl <= 0 {
			return false
		}
	}
	return c.Put(sv.Key, sv.Reply, sv.Rows, deps, ttl)
}
