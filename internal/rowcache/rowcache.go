// Package rowcache is the read-through copy of table rows in front of a caching container: copies of rows kept in
// the local store, fills from the table on a miss (concurrent misses on one row make one query), the stamps that
// keep copies valid, the copies writes leave, and the binlog echo check (HoldsRow).
//
// Invariants:
//   - A copy is served only through Held, the one rule: the row's group vouches for its copies
//     (validity.Gate.Serves), and the copy is in the store with a stamp the row's validity still accepts
//     (validity.Table.KeyValid).
//   - The row's group is the container's, or, for a container on a sharded table (Options.GateOf), the group of
//     the row's shard under the map now: each shard group has its own binlog follower and gate, so one lagging
//     shard stops only its own rows' copies. Everything else is the table's, whichever shard holds the row: one
//     store prefix, one validity (a row key lives on one shard, so invalidating by table and key is exact), one
//     fill per row. That is why a sharded container has one Cache with a gate per row, not one Cache per shard
//     part: the parts (opened late, for a group a reloaded map names first) need nothing of their own, and a key a
//     reloaded map moves keeps its one copy, vouched for by its new group.
//   - A fill takes the table's stamp before its query, and the copy keeps it (the store item's Tag). Every write
//     (through either door, or seen in the binlog, unless HoldsRow finds it is the row the copy already is)
//     invalidates copies stamped before it, so a fill that raced with a write is discarded, never stored.
//   - Every check that decides to store a copy runs under the store's shard lock (store.Update), so an invalidation
//     cannot slip between the check and the store.
//   - A write that keeps its own row checks, with validity.Table.WroteThrough, that no other write overtook it
//     between its commit and its copy.
//   - A valid copy is never replaced by one stamped earlier: a later read or write left it.
//   - Copies are ephemeral (never written to disk): the table, or the write-behind journal, is the truth.
//   - A row's store key is the container's prefix and the row key normalized as the key column compares keys, so
//     "k" and "K" share one copy under a case-insensitive collation; its validity key is the same without the
//     prefix, so containers on one table share it.
//   - With write-behind, a read takes its stamp first, then asks the queue, then the table: a fill can never cache
//     the table's older row over a queued write.
package rowcache

import (
	"context"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"

	"github.com/keywaydb/keyway/internal/container"
	"github.com/keywaydb/keyway/internal/store"
	"github.com/keywaydb/keyway/internal/validity"
	"github.com/keywaydb/keyway/internal/writebehind"
)

// Options describe a Cache to New.
type Options struct {
	Container *container.Container
	Store     *store.Store
	// Prefix starts the store key of every copy ("@@name."); nothing else in the store may use it for copies.
	Prefix string
	// Validity is the table's validity state, shared with the SQL door and the binlog follower.
	Validity *validity.Table
	// Gate is the container's group's freshness: whether copies may be served now; nil serves every valid copy.
	Gate *validity.Gate
	// GateOf, when set, replaces Gate for a container whose rows live on several groups (a sharded table): the
	// gate of the group that holds row now. ok is false for a row of which no copy may be kept: no group holds it
	// (a key with no shard: the read goes to the container, which says why), or the key column's collation folds
	// its key into one a group other than its own holds (a different row, which would share its copy).
	GateOf func(row []byte) (gate *validity.Gate, ok bool)
	// Caching says the container's gets keep copies (get policy caching). Without it the cache holds none and lets
	// no change of a row pass its watch.
	Caching bool
	// CopyTTL, when not 0, bounds a copy's life (a group with invalidate = "ttl", whose direct writes keyway cannot
	// see): a copy expires then, in whole seconds, even if nothing invalidated it.
	CopyTTL time.Duration
}

// Cache is the read-through copy of one container's rows. Build it with New; call SetQueue, if the container writes
// behind, before it serves.
type Cache struct {
	c       *container.Container
	st      *store.Store
	prefix  string
	v       *validity.Table
	gate    *validity.Gate
	gateOf  func(row []byte) (*validity.Gate, bool) // Options.GateOf; nil: gate is every row's
	caching bool
	queue   *writebehind.Queue // the container's write-behind queue; nil for sync writes

	// CopyTTL is Options.CopyTTL; read-only once the cache serves.
	CopyTTL time.Duration

	fillMu  sync.Mutex
	fills   map[string]*fill
	writing ownWrites // writes in flight to the table (see HoldsRow)
	// filling counts the reads (and a warm restart's restore) that may store a copy under a stamp taken earlier:
	// each counts itself before it takes its stamp and until its copy is stored or refused (see HoldsRow).
	filling atomic.Int64
	// settling counts the starts of those reads and of the writes that store the row they leave (writing): the
	// binlog follower's validity.KeyWatch.Settling (see HoldsRow).
	settling atomic.Uint64
	// copies counts the copies stored under a key that had none (never decremented): see countCopy.
	copies atomic.Uint64
}

// New returns the cache of o.Container's rows and registers its key column with the table's validity, so the binlog
// follower invalidates its copies by key and lets the echo of a row it holds pass (HoldsRow).
func New(o Options) *Cache {
	c := &Cache{c: o.Container, st: o.Store, prefix: o.Prefix, v: o.Validity, gate: o.Gate, gateOf: o.GateOf, caching: o.Caching,
		CopyTTL: o.CopyTTL, fills: make(map[string]*fill)}
	c.v.WatchKey(validity.KeyWatch{Column: o.Container.Def().KeyColumn, Norm: o.Container.AppendNormKey,
		Holds: c.HoldsRow, Settling: c.settling.Load})
	// Copies of many rows live long here: a write of one row should rarely share another's mark.
	c.v.WidenSlots(validity.WideSlots)
	return c
}

// SetQueue tells the cache the container's write-behind queue, which answers reads of the rows it holds until the
// table has them. Call it before the cache serves.
func (c *Cache) SetQueue(q *writebehind.Queue) { c.queue = q }

// tableTimeout bounds one read of the table.
const tableTimeout = 10 * time.Second

// Key is the local store's key for the copy of row.
func (c *Cache) Key(row []byte) []byte {
	return c.appendKey(make([]byte, 0, len(c.prefix)+len(row)), row)
}

// appendKey appends Key(row) to dst.
func (c *Cache) appendKey(dst, row []byte) []byte {
	return c.c.AppendNormKey(append(dst, c.prefix...), row)
}

// validityKey is the key validity stamps a copy under: its store key sk without the prefix.
func (c *Cache) validityKey(sk []byte) []byte { return sk[len(c.prefix):] }

// Lookup is what Held found.
type Lookup uint8

const (
	Hit    Lookup = iota // a valid copy, served
	Miss                 // no valid copy: read the row (Fill)
	Bypass               // the group cannot vouch for copies now: read the table and store nothing
)

// Use is how Held asks.
type Use uint8

const (
	Serve Use = iota // a read that serves the copy: the gate is asked
	// Vouched is a read of a batch that found the gate open (a multi-get's later rows): it is not asked again,
	// unless the rows have gates of their own (PerRowGates), when each row's is asked.
	Vouched
)

// PerRowGates reports whether each row has its own group's gate (Options.GateOf: a sharded table), so a batch's
// rows must each ask Held as a Serve would.
func (c *Cache) PerRowGates() bool { return c.gateOf != nil }

// serves reports whether row's group vouches for its copies now (see Options.GateOf): ok is false for a row no
// group holds.
func (c *Cache) serves(row []byte) (serves, ok bool) {
	if c.gateOf == nil {
		return c.gate.Serves(), true
	}
	g, ok := c.gateOf(row)
	return ok && g.Serves(), ok
}

// keeps reports whether a copy of row may be kept at all (see Options.GateOf).
func (c *Cache) keeps(row []byte) bool {
	if c.gateOf == nil {
		return true
	}
	_, ok := c.gateOf(row)
	return ok
}

// Held is the one rule for serving a held copy: the copy of row that may be served now, if the cache holds one
// (marked used, as a get marks an item). Every path that serves a copy asks it. A row of which no copy may be kept
// (Options.GateOf) is a Bypass too: the read goes to the container and keeps nothing.
func (c *Cache) Held(row []byte, use Use) (store.Item, Lookup) {
	if use != Vouched || c.gateOf != nil {
		if serves, _ := c.serves(row); !serves {
			return store.Item{}, Bypass
		}
	}
	var buf [128]byte
	sk := c.appendKey(buf[:0], row) // a lookup's key: on the stack unless long
	if it, ok := c.st.Get(sk); ok && c.v.KeyValid(c.validityKey(sk), it.Tag) {
		return it, Hit
	}
	return store.Item{}, Miss
}

// fill is one in-flight read of a row; concurrent misses wait for it.
type fill struct {
	stamp uint64 // the table's stamp when the query started
	done  chan struct{}
	it    container.Item
	ok    bool
	err   error
}

// Fill reads row after a Miss, sharing one query among concurrent misses, and keeps a copy of what it read unless a
// write of the row came since its stamp. ok is false when the row is missing.
func (c *Cache) Fill(row []byte) (it store.Item, ok bool, err error) {
	c.BeginFill() // before readOnce takes (or joins) a stamp; after storeCopy stored, or not (see HoldsRow)
	defer c.EndFill()
	sk := c.Key(row)
	f := c.readOnce(row, sk)
	if f.err != nil || !f.ok {
		return store.Item{}, false, f.err
	}
	item := FromRow(f.it)
	c.storeCopy(sk, item, f.stamp)
	return item, true, nil
}

// readOnce reads row, sharing one query among concurrent callers (single-flight;
// golang.org/x/sync is not served by this module proxy, and this is all of it we need).
// A caller joins a query in flight only if no write of the row (nor of unknown
// rows) happened since it started: otherwise the query may predate a write the
// caller must see, and it runs its own. sk is the row's store key.
func (c *Cache) readOnce(row, sk []byte) *fill {
	c.fillMu.Lock()
	if f := c.fills[string(row)]; f != nil && c.v.KeyValid(c.validityKey(sk), f.stamp) {
		c.fillMu.Unlock()
		<-f.done
		return f
	}
	f := &fill{stamp: c.v.Stamp(), done: make(chan struct{})}
	c.fills[string(row)] = f
	c.fillMu.Unlock()
	// The queue is asked after the stamp is taken: a write queued later
	// invalidates it, so this fill will not be cached over it.
	if it, ok, err := c.queuedRow(row); err != nil {
		f.err = err // the container is not checked: the table must not be asked (see writebehind)
	} else if ok {
		f.it, f.ok = it, !Expired(it.Exptime, time.Now().Unix())
	} else {
		ctx, cancel := context.WithTimeout(context.Background(), tableTimeout)
		f.it, f.ok, f.err = c.c.Get(ctx, row)
		cancel()
	}
	c.fillMu.Lock()
	if c.fills[string(row)] == f {
		delete(c.fills, string(row))
	}
	c.fillMu.Unlock()
	close(f.done)
	return f
}

// queuedRow is the write-behind queue's write for row, if one is waiting.
// An error (the container is not checked and the queue cannot tell) means
// the row must not be read from the table either.
func (c *Cache) queuedRow(row []byte) (container.Item, bool, error) {
	if c.queue == nil {
		return container.Item{}, false, nil
	}
	return c.queue.Get(row)
}

// ReadMany reads rows (rows[j] into items[idx[j]]) with one query, queued writes answering for their rows, and, with
// keep, keeps a copy of each row it read as Fill does. Rows missing are left unfound. The error is the query's, or a
// queue's that could not tell; the other rows are answered regardless.
func (c *Cache) ReadMany(idx []int, rows [][]byte, items []store.Item, found []bool, keep bool) error {
	c.BeginFill() // see HoldsRow
	defer c.EndFill()
	// The table's stamp before anything is asked.
	stamp := c.v.Stamp()
	// Queued writes answer for their rows (asked after the stamp is taken;
	// see readOnce); the table is asked for the rest.
	ask, queued := rows, map[string]container.Item(nil)
	var qerr error
	if c.queue != nil {
		ask = nil
		for _, row := range rows {
			it, ok, err := c.queuedRow(row)
			if err != nil {
				qerr = err // not checked: neither the queue nor the table answers for row
				continue
			}
			if ok {
				if queued == nil {
					queued = map[string]container.Item{}
				}
				queued[string(row)] = it
			} else {
				ask = append(ask, row)
			}
		}
	}
	var rowsFound map[string]container.Item
	var err error
	if len(ask) > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), tableTimeout)
		rowsFound, err = c.c.GetMulti(ctx, ask) // the error names the container already
		cancel()
	}
	if len(queued) > 0 && rowsFound == nil {
		rowsFound = map[string]container.Item{}
	}
	now := c.st.Now()
	for k, it := range queued {
		if !Expired(it.Exptime, now) {
			rowsFound[k] = it
		}
	}
	for j, i := range idx {
		r, ok := rowsFound[string(rows[j])]
		if !ok {
			continue
		}
		items[i], found[i] = FromRow(r), true
		if serves, _ := c.serves(rows[j]); keep && serves { // a group that stopped vouching meanwhile stores nothing either
			c.storeCopy(c.Key(rows[j]), items[i], stamp)
		}
	}
	if err == nil {
		err = qerr
	}
	return err
}

// Expired reports whether a row whose expiry column holds exptime (Unix seconds, 0: never) has expired at now.
func Expired(exptime, now int64) bool { return exptime != 0 && exptime <= now }

// FromRow is a row as the local store keeps it.
func FromRow(it container.Item) store.Item {
	return store.Item{Value: it.Value, Flags: it.Flags, CAS: it.CAS, Exptime: it.Exptime}
}

// storeCopy stores a row read from the table after stamp in the local store
// (under sk, the row's store key), unless a write of the row or of unknown
// rows happened since the stamp (then it may be stale). The check runs under
// the store's shard lock, so an invalidation cannot slip between check and
// store. It reports whether the copy was stored.
func (c *Cache) storeCopy(sk []byte, item store.Item, stamp uint64) (stored bool) {
	item.Tag = stamp
	item.Ephemeral = true // the table is the truth: a copy needs no disk
	c.boundCopy(&item)
	vk := c.validityKey(sk)
	added := false
	_, err := c.st.Update(sk, func(cur *store.Item) (store.Action, store.Item) {
		if stored = c.v.KeyValid(vk, stamp); !stored {
			return store.Keep, store.Item{}
		}
		// A valid copy stamped later came from a later read or write: never put an earlier read over it (a copy
		// kept because it equals the binlog's image of a change relies on that; see HoldsRow).
		if cur != nil && cur.Tag > stamp && c.v.KeyValid(vk, cur.Tag) {
			stored = false
			return store.Keep, store.Item{}
		}
		added = cur == nil
		return store.Replace, item
	})
	if added && err == nil {
		c.countCopy()
	}
	return stored && err == nil
}

// Stamp is the table's stamp now: a write takes it before it is sent, for WroteThrough.
func (c *Cache) Stamp() uint64 { return c.v.Stamp() }

// WroteThrough makes the copy of row the row a write left (written, as a read of the table returns it), unless
// another invalidation of the row came after since (the Stamp the write took before it was sent: see
// validity.Table.WroteThrough); then the copy goes.
func (c *Cache) WroteThrough(row []byte, since uint64, written store.Item) {
	sk := c.Key(row)
	tick, unchanged := c.v.WroteThrough(c.validityKey(sk), since)
	c.keepWritten(sk, written, tick, unchanged && c.keeps(row))
}

// Drop records a write of row whose result the cache does not know (or that failed, and may have committed anyway)
// and drops its copy, so the next read goes to the table.
func (c *Cache) Drop(row []byte) {
	sk := c.Key(row)
	c.v.Wrote(c.validityKey(sk))
	c.st.Update(sk, func(*store.Item) (store.Action, store.Item) { return store.Remove, store.Item{} })
}

// WriteBehind queues a set of row on the write-behind queue and, when keep, makes its copy the row queued unless
// another write of the row was queued after it (that write keeps its own) or a write of unknown rows (the SQL door)
// came since. The journal holds the write until the table does.
func (c *Cache) WriteBehind(row []byte, item container.Item, keep bool) error {
	sk := c.Key(row)
	vk := c.validityKey(sk)
	var tick uint64
	if err := c.queue.Put(row, item, func() { tick = c.v.Wrote(vk) }); err != nil {
		return err
	}
	c.keepWritten(sk, FromRow(item), tick, keep && c.keeps(row))
	return nil
}

// keepWritten makes the local copy of a row just written (under sk, the row's store key) the row written, stamped
// with the write's tick, when keep says the container keeps copies and no invalidation of the row came after the
// tick; otherwise it drops the copy, so the local copy is never older than the queue or the table. The check runs
// under the store's shard lock (see storeCopy). A copy is ephemeral: the table, or the write-behind journal, holds
// the write.
func (c *Cache) keepWritten(sk []byte, local store.Item, tick uint64, keep bool) {
	local.Tag = tick
	local.Ephemeral = true
	c.boundCopy(&local)
	added := false
	_, err := c.st.Update(sk, func(cur *store.Item) (store.Action, store.Item) {
		if keep && c.v.KeyValid(c.validityKey(sk), tick) {
			added = cur == nil
			return store.Replace, local
		}
		return store.Remove, store.Item{}
	})
	if added && err == nil {
		c.countCopy()
	}
	if err != nil {
		// The store refused the copy (too large, out of memory): the write stands; drop whatever copy is left.
		c.st.Update(sk, func(*store.Item) (store.Action, store.Item) { return store.Remove, store.Item{} })
	}
}

// boundCopy gives a copy the cache's CopyTTL: it expires within that (rounded up to whole seconds, the
// store's clock) unless the row expires sooner.
func (c *Cache) boundCopy(it *store.Item) {
	if c.CopyTTL <= 0 {
		return
	}
	limit := c.st.Now() + int64((c.CopyTTL+time.Second-1)/time.Second)
	if it.Exptime == 0 || it.Exptime > limit {
		it.Exptime = limit
	}
}

// countCopy counts a copy stored under a key that had none. A copy is dropped by the second write of another key
// that shares its slot (validity.Table.WidenSlots), so the slots must grow with the copies: every copiesPerCheck
// new copies, the table gets slotsPerCopy slots per item the store holds now (a write then touches about
// 1/slotsPerCopy copies of other keys), within an eighth of the store's memory limit (16 bytes a slot). The count
// never goes down (a cache whose keys come and go asks again), and the store's own count decides.
func (c *Cache) countCopy() {
	if c.copies.Add(1)%copiesPerCheck != 0 {
		return
	}
	st := c.st.Stats()
	if want := slotsFor(st.CurrItems, st.Limit); want > c.v.Slots() {
		c.v.WidenSlots(want)
	}
}

// slotsFor is how many per-key slots a container's table keeps when the store holds items within limit bytes (see
// countCopy): a power of two.
func slotsFor(items, limit int64) int {
	return int(min(roundUpPow2(slotsPerCopy*items), roundDownPow2(limit/8/16)))
}

// slotsPerCopy is how many per-key slots a container's table keeps per cached item (see countCopy): with one slot
// per two rows (validity.WideSlots), random reads of many rows set through a container often missed copies that
// writes of other keys had dropped; with many more slots they hardly ever do.
const slotsPerCopy = 4

// copiesPerCheck is how often countCopy asks the store how many items it holds (a lock of each shard).
const copiesPerCheck = 4096

// roundUpPow2 is the least power of two ≥ n (1 for n ≤ 1).
func roundUpPow2(n int64) int64 { return 1 << bits.Len64(uint64(max(n, 1)-1)) }

// roundDownPow2 is the greatest power of two ≤ n (1 for n ≤ 1).
func roundDownPow2(n int64) int64 { return 1 << max(bits.Len64(uint64(max(n, 1)))-1, 0) }
