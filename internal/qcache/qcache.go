// Package qcache is the SQL door's result cache: the reply packets of a cacheable SELECT, kept under a key that
// says everything the reply depends on, and served again only while package validity says no table it read has
// changed since.
//
// The rules (see package validity for the stamps):
//   - A fill takes each table's Stamp before the statement goes to the backend (Begin); the reply is stored only
//     if no table it read was invalidated meanwhile (Put checks, under the shard lock that also guards the
//     entry), so a fill that raced a write is dropped.
//   - A stored entry is served only while every table it read is valid at its stamp and the gate of the group
//     the session reads from Vouches (validity.Gate: its binlog follower is within max_staleness, or its copies
//     carry a ttl); one group's lagging follower never closes the cache to another group's sessions. An entry
//     depends on a whole table (TableValid: any row write of it, through either door or in the binlog, drops the
//     entry) or, for a point select on an integer value or an IN list of them (BeginKeys), on those column keys
//     only (RowKeyValid: a change of another row leaves it alone).
//   - Concurrent misses of one key make one backend query (Lead/Done): the others wait for it, bounded, and are
//     answered from what it stored.
//   - An entry with a ttl is refreshed softly: in the last part of its life (refreshWindow) the first Get is told
//     to miss, so that caller runs the statement and stores a new entry, while every other Get is still answered
//     from the old one until it expires. So a popular entry is renewed by one query, with no stampede and no gap.
//   - Memory: entries are charged their key and reply bytes plus a fixed overhead, within Options.MemoryLimit,
//     with least-recently-used eviction per shard.
//   - Across a restart (package warm): Save hands out only entries valid at that moment, naming their tables;
//     Restore stores one as Put stores a fill, against stamps taken before the followers replay the binlog.
//
// The key is the caller's: it must hold everything the reply bytes depend on (statement text or prepared
// statement and its parameters, default database, user, character set and protocol capabilities).
package qcache

import (
	"container/list"
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"

	"github.com/keywaydb/keyway/internal/validity"
)

// DefaultMemoryLimit is Options.MemoryLimit's default.
const DefaultMemoryLimit = 64 << 20

// MaxReply is the largest reply kept: bigger result sets are relayed and not cached.
const MaxReply = 1 << 20

// entryOverhead is what an entry costs beyond its key and reply: list element, map slot, dependency slice.
const entryOverhead = 160

const shards = 16

// Options configure a Cache.
type Options struct {
	MemoryLimit int64 // bytes, for all entries together
	Registry    *validity.Registry
	Now         func() time.Time // the clock for ttls; nil = time.Now
}

// Cache is the result cache. It is safe for concurrent use.
type Cache struct {
	reg    *validity.Registry
	now    func() time.Time
	seed   maphash.Seed
	shards [shards]shard

	hits, misses, stores, dropped, evictions, joined, refreshes atomic.Int64
	bypasses                                                    [numBypassReasons]atomic.Int64
}

type shard struct {
	mu    sync.Mutex
	limit int64
	used  int64
	m     map[string]*list.Element
	lru   list.List // front = most recently used; values are *entry
	// fills are the keys being filled now, each with a channel closed when its fill ends (single-flight).
	fills map[string]chan struct{}
}

// Dep is one table a reply read, with the table's stamp before the statement was sent; Key, when set, is the
// column key (validity.ColumnKey) of the one row value the reply depends on.
type Dep struct {
	Table *validity.Table
	Stamp uint64
	Key   []byte
}

type entry struct {
	key     string
	reply   []byte
	rows    int64
	deps    []Dep
	size    int64
	expires int64 // Unix nanos after which the entry is not served; 0 never
	// refreshAt (Unix nanos; 0 without a ttl) starts the soft refresh; refreshing is set once a Get was told to
	// refresh the entry. Both are guarded by the shard lock.
	refreshAt  int64
	refreshing bool
}

// refreshWindow is the last part of a ttl entry's life in which it is refreshed softly: a fifth of its ttl, at
// most 5 s.
func refreshWindow(ttl time.Duration) time.Duration { return min(ttl/5, 5*time.Second) }

// New returns an empty cache.
func New(o Options) *Cache {
	if o.MemoryLimit <= 0 {
		o.MemoryLimit = DefaultMemoryLimit
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	c := &Cache{reg: o.Registry, now: o.Now, seed: maphash.MakeSeed()}
	for i := range c.shards {
		c.shards[i].limit = o.MemoryLimit / shards
		c.shards[i].m = map[string]*list.Element{}
		c.shards[i].fills = map[string]chan struct{}{}
	}
	return c
}

func (c *Cache) shard(key string) *shard {
	return &c.shards[maphash.String(c.seed, key)%shards]
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
// old reply.
func (c *Cache) Get(gate *validity.Gate, key []byte) (reply []byte, rows int64, ok bool) {
	if !gate.Vouches() {
		c.misses.Add(1)
		return nil, 0, false
	}
	s := &c.shards[maphash.Bytes(c.seed, key)%shards] // as shard(string(key)) finds it
	s.mu.Lock()
	el := s.m[string(key)] // a lookup: the conversion allocates nothing
	if el != nil {
		e := el.Value.(*entry)
		var now int64
		if e.expires != 0 {
			now = c.now().UnixNano()
		}
		if valid(e.deps) && (e.expires == 0 || now < e.expires) {
			if e.expires != 0 && now >= e.refreshAt && !e.refreshing {
				e.refreshing = true
				s.mu.Unlock()
				c.refreshes.Add(1)
				return nil, 0, false
			}
			s.lru.MoveToFront(el)
			s.mu.Unlock()
			c.hits.Add(1)
			return e.reply, e.rows, true
		}
		s.removeLocked(el)
		c.dropped.Add(1)
	}
	s.mu.Unlock()
	c.misses.Add(1)
	return nil, 0, false
}

// Put stores reply under key unless a table in deps changed since Begin (then the reply may be stale) or the
// reply is too large; a ttl above 0 bounds the entry's life (a hint's ttl=N). The cache keeps reply: the caller
// must not change it.
// It reports whether the reply was stored.
func (c *Cache) Put(key string, reply []byte, rows int64, deps []Dep, ttl time.Duration) bool {
	size := int64(len(key)+len(reply)) + entryOverhead
	s := c.shard(key)
	if len(reply) > MaxReply || size > s.limit {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !valid(deps) {
		c.dropped.Add(1)
		return false
	}
	if el := s.m[key]; el != nil {
		s.removeLocked(el)
	}
	for s.used+size > s.limit && s.lru.Len() > 0 {
		s.removeLocked(s.lru.Back())
		c.evictions.Add(1)
	}
	e := &entry{key: key, reply: reply, rows: rows, deps: deps, size: size}
	if ttl > 0 {
		now := c.now()
		e.expires, e.refreshAt = now.Add(ttl).UnixNano(), now.Add(ttl-refreshWindow(ttl)).UnixNano()
	}
	s.m[key] = s.lru.PushFront(e)
	s.used += size
	c.stores.Add(1)
	return true
}

func (s *shard) removeLocked(el *list.Element) {
	e := el.Value.(*entry)
	delete(s.m, e.key)
	s.lru.Remove(el)
	s.used -= e.size
}

// Lead makes concurrent misses of key one backend query: the first caller leads (leader true) and must call
// Done(key) when its fill ends, stored or not; the others get a channel that is closed then, after which they
// ask Get again (and run the statement themselves if the leader stored nothing).
func (c *Cache) Lead(key string) (leader bool, wait <-chan struct{}) {
	s := c.shard(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	if ch, ok := s.fills[key]; ok {
		c.joined.Add(1)
		return false, ch
	}
	s.fills[key] = make(chan struct{})
	return true, nil
}

// Done ends the fill of key that Lead made this caller lead.
func (c *Cache) Done(key string) {
	s := c.shard(key)
	s.mu.Lock()
	if ch, ok := s.fills[key]; ok {
		close(ch)
		delete(s.fills, key)
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
	Dropped   int64 `json:"dropped"` // fills that raced a write, and entries found invalid
	Evictions int64 `json:"evictions"`
	Joined    int64 `json:"joined"`    // misses that waited for another session's fill of the same key
	Refreshes int64 `json:"refreshes"` // ttl entries renewed softly: a miss while the old entry was still served
	// Bypasses count the statements the cache would answer that went to the backend, by BypassReasons.
	Bypasses map[string]int64 `json:"bypasses"`
	Entries  int              `json:"entries"`
	Bytes    int64            `json:"bytes"`
	// Fresh is true while every group's copies may be served (validity.Registry.Vouched: followers within
	// max_staleness, or ttl or none chosen); whether a session is answered is its own group's (validity.Gate).
	Fresh bool `json:"fresh"`
}

// Stats returns a snapshot.
func (c *Cache) Stats() Stats {
	st := Stats{Hits: c.hits.Load(), Misses: c.misses.Load(), Stores: c.stores.Load(), Dropped: c.dropped.Load(),
		Evictions: c.evictions.Load(), Joined: c.joined.Load(), Refreshes: c.refreshes.Load(),
		Bypasses: map[string]int64{}, Fresh: c.reg.Vouched()}
	for r, name := range BypassReasons {
		st.Bypasses[name] = c.bypasses[r].Load()
	}
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.Lock()
		st.Entries += s.lru.Len()
		st.Bytes += s.used
		s.mu.Unlock()
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

// Save calls fn with every entry that is valid now (and not expired), one shard at a time. Take the binlog
// checkpoints that will vouch for them before calling it (see package warm).
func (c *Cache) Save(fn func(Saved)) {
	now := c.now().UnixNano()
	var batch []Saved
	for i := range c.shards {
		s := &c.shards[i]
		batch = batch[:0]
		s.mu.Lock()
		for el := s.lru.Front(); el != nil; el = el.Next() {
			e := el.Value.(*entry)
			if !valid(e.deps) || (e.expires != 0 && e.expires <= now) {
				continue
			}
			sv := Saved{Key: e.key, Reply: e.reply, Rows: e.rows, Expires: e.expires}
			for _, d := range e.deps {
				sv.Tables = append(sv.Tables, d.Table.ID())
			}
			batch = append(batch, sv)
		}
		s.mu.Unlock()
		for _, sv := range batch {
			fn(sv)
		}
	}
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
