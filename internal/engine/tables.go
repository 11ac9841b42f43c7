package engine

// Containers: keys "@@name.key" (or, with a container named "default", keys
// without a prefix) are rows of a MySQL table. Each operation class follows
// the container's policy:
//
//   - cache_only: the local store only, as a key without a container.
//   - db_only:    the table every time.
//   - caching:    reads are served by the local store and filled from the table
//     on a miss (concurrent misses on one key make one query); writes go to the
//     table and then either write through (the copy becomes the row as the
//     table returns it, when keyway knows that: container.AsStored) or drop
//     the local copy.
//   - disabled:   refused.
//
// A fill that raced with a write is discarded, and a copy is served only while
// it is valid, by the rules of package validity: a fill takes the table's stamp
// before its query, the copy keeps it (the store item's Tag), and every write
// (through either door, or seen in the binlog) invalidates copies stamped
// before it. A write that keeps its own value checks, with
// validity.Table.WroteThrough, that no other write overtook it between its
// commit and its copy. The store-time check runs under the store's shard lock, so an
// invalidation cannot slip between check and store. The row's key in validity
// is the normalized row key without the container's prefix, so containers on
// one table share it. While the container's group cannot vouch for its copies
// (validity.Gate.Serves: its binlog follower is behind max_staleness or
// disconnected, or the group has no usable binlog and no invalidate = "ttl" or
// "none"), caching reads go to the table as db_only ones do and store nothing.
//
// Write-behind (write = "async"): a plain set is checked against the table's
// columns, queued (see package writebehind) and cached, and acknowledged
// without waiting for the table. Until the table has it, the queue answers
// reads of the row: a read takes the generation first, then asks the queue,
// then the table, so a fill can never cache the table's older row over a
// queued write. Every other command on a row first waits for the row's queued
// write (Sync), because its answer depends on the row; flush_all and the SQL
// door's writes wait for the whole queue (Drain).

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/bits"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/keywaydb/keyway/internal/container"
	"github.com/keywaydb/keyway/internal/store"
	"github.com/keywaydb/keyway/internal/validity"
	"github.com/keywaydb/keyway/internal/writebehind"
)

// Container is a container as the engine uses it, with its policies. Build it with Engine.NewContainer; its fields are
// read-only after that.
type Container struct {
	Name     string
	Source   string // the table, "schema.table", lower-case
	C        *container.Container
	Policies container.Policies
	Behind   *writebehind.Queue // write = "async": the sets not yet in the table; nil for sync
	// CopyTTL, when not 0, bounds a cached copy's life (a group with invalidate = "ttl", whose direct writes
	// keyway cannot see): a copy expires then, in whole seconds, even if nothing invalidated it.
	CopyTTL time.Duration
	// Group is the backend group the table lives on ("" in tests: no gate).
	Group string

	// v is the table's validity state, shared with the SQL door and the binlog follower (see package
	// validity): a cached row keeps its stamp in the store item's Tag and is served only while v says it is valid.
	v       *validity.Table
	gate    *validity.Gate // the group's freshness: whether copies may be served now; nil (no group) serves them
	fillMu  sync.Mutex
	fills   map[string]*fill
	writing ownWrites // writes in flight to the table (see holdsRow)
	// filling counts the reads (and a warm restart's restore) that may store a copy under a stamp taken earlier:
	// each counts itself before it takes its stamp and until its copy is stored or refused (see holdsRow).
	filling atomic.Int64
	// settling counts the starts of those reads and of the writes that store the row they leave (writing): the
	// binlog follower's validity.KeyWatch.Settling (see holdsRow).
	settling atomic.Uint64
	// copies counts the copies stored under a key that had none (never decremented): see countCopy.
	copies atomic.Uint64
	space  tableSpace // the table as a key space (keyspace.go)
}

// JournalPrefix starts every local-store key that belongs to a container ("@@name."): cached rows, cache_only
// keys and the write-behind journal. TakeJournal(JournalPrefix) finds what containers left in the journal.
const JournalPrefix = "@@"

// ContainerOptions describe a container to NewContainer.
type ContainerOptions struct {
	Container *container.Container
	Policies  container.Policies
	// WriteBehind, when set, makes the container write behind (write = "async"): its queue journals in the
	// engine's store under the container's prefix and replays what an earlier run left there. OnDrop is the
	// engine's own.
	WriteBehind *writebehind.Options
	CopyTTL     time.Duration // see Container.CopyTTL
	// Group is the backend group the table lives on: its validity.Gate decides whether copies are served. ""
	// (tests without a server) serves every valid copy.
	Group string
}

// NewContainer binds a container to the engine with its policies (and, for write-behind, starts its queue). Pass the
// tables to SetContainers before serving.
func (e *Engine) NewContainer(o ContainerOptions) *Container {
	def := o.Container.Def()
	id := validity.TableID{Schema: strings.ToLower(def.Schema), Name: strings.ToLower(def.Table)}
	t := &Container{Name: def.Name, Source: id.String(), C: o.Container, Policies: o.Policies, CopyTTL: o.CopyTTL,
		Group: o.Group, v: e.validity.Table(id)}
	if o.Group != "" {
		t.gate = e.validity.Gate(o.Group)
	}
	t.space = tableSpace{t}
	// The binlog follower turns a change of the key column into this key, and keeps a copy that equals the row
	// the change left (the echo of a write this container cached as it wrote it).
	t.v.WatchKey(validity.KeyWatch{Column: def.KeyColumn, Norm: o.Container.AppendNormKey,
		Holds:    func(vk []byte, img validity.RowImage, first bool) (bool, bool) { return e.holdsRow(t, vk, img, first) },
		Settling: t.settling.Load})
	// Copies of many rows live long here: a write of one row should rarely share another's mark.
	t.v.WidenSlots(validity.WideSlots)
	if o.WriteBehind != nil {
		wo := *o.WriteBehind
		wo.OnDrop = func(row []byte) { e.DroppedWrite(t, row) }
		t.Behind = writebehind.New(o.Container, e.st, JournalPrefix+t.Name+".", wo)
		// Statements through the SQL door that name the table see, and act after, every set the queue
		// acknowledged.
		e.validity.OnSettle(id, t.Behind.Drain)
	}
	return t
}

// tableTimeout bounds one operation on a table.
const tableTimeout = 10 * time.Second

// ErrNoContainer means a key names a container that is not configured.
var ErrNoContainer = errors.New("no such container")

// SetContainers binds containers by name; call before serving. Keys without "@@" go to the container named
// defaultName ("" or a name not among tables: the local store).
func (e *Engine) SetContainers(tables []*Container, defaultName string) {
	e.tables = make(map[string]*Container, len(tables))
	for _, t := range tables {
		t.fills = make(map[string]*fill)
		t.space = tableSpace{t}
		e.tables[t.Name] = t
	}
	e.defaultTable = e.tables[defaultName]
}

// HasContainers reports whether any container is configured.
func (e *Engine) HasContainers() bool { return len(e.tables) > 0 }

// route finds the container of key and the row key within it. It returns a
// nil table for a key the local store serves alone.
func (e *Engine) route(key []byte) (*Container, []byte, error) {
	if len(e.tables) == 0 {
		return nil, key, nil
	}
	if name, row, ok := splitContainer(key); ok {
		t := e.tables[string(name)]
		if t == nil {
			return nil, nil, fmt.Errorf("%w %q (configure it in [[containers]])", ErrNoContainer, name)
		}
		return t, row, nil
	}
	return e.defaultTable, key, nil
}

// splitContainer splits "@@name.row" into name and row; ok is false for a key that names no container.
func splitContainer(key []byte) (name, row []byte, ok bool) {
	if len(key) > 2 && key[0] == '@' && key[1] == '@' {
		for i := 2; i < len(key); i++ {
			if key[i] == '.' {
				return key[2:i], key[i+1:], true
			}
		}
	}
	return nil, nil, false
}

// SwitchTo is the container a key of the InnoDB plugin's form "@@name" (no ".row") switches a connection to, or nil
// when key is not of that form or names no configured container. The plugin answers such a get with the container's
// table (PluginTableName) and from then on sends the connection's keys without "@@" to that container; the door keeps
// that choice per connection and passes keys through InContainer.
func (e *Engine) SwitchTo(key []byte) *Container {
	if len(key) < 3 || key[0] != '@' || key[1] != '@' || bytes.IndexByte(key, '.') >= 0 {
		return nil
	}
	return e.tables[string(key[2:])]
}

// InContainer is key as sent on a connection switched to t (see SwitchTo): a key that names no container is t's
// row ("@@name.key"), as the plugin routes it; a key that names one, and every key when t is nil, is unchanged.
func InContainer(t *Container, key []byte) []byte {
	if t == nil {
		return key
	}
	if _, _, ok := splitContainer(key); ok {
		return key
	}
	return prefixed(t, key)
}

// PluginTableName is the value the InnoDB plugin answers "get @@name" with: the container's "schema/table".
func (t *Container) PluginTableName() string {
	def := t.C.Def()
	return def.Schema + "/" + def.Table
}

// storeKey is the local store's key for a key of a container whose policy
// keeps it in the local store alone (cache_only): the container's prefix
// keeps containers apart, and the key is exact, as memcached's are.
func storeKey(t *Container, row []byte) []byte {
	return prefixed(t, row)
}

// rowKey is the local store's key for the cached copy of a table row. The
// row key is normalized as the key column compares keys, so "k" and "K" share
// one copy under a case-insensitive collation: they are one row, and a write
// of either must invalidate it.
func rowKey(t *Container, row []byte) []byte {
	return t.C.AppendNormKey(prefix(t, len(row)), row)
}

// validityKey is the key validity stamps a cached row under: rowKey's
// normalized row, without the container's prefix.
func validityKey(t *Container, sk []byte) []byte { return sk[len(JournalPrefix)+len(t.Name)+1:] }

func prefixed(t *Container, row []byte) []byte {
	return append(prefix(t, len(row)), row...)
}

// appendPrefixed appends prefixed's key to dst.
func appendPrefixed(dst []byte, t *Container, row []byte) []byte {
	return append(append(append(append(dst, JournalPrefix...), t.Name...), '.'), row...)
}

// prefix is "@@name." with room for n more bytes.
func prefix(t *Container, n int) []byte {
	return appendPrefixed(make([]byte, 0, len(t.Name)+3+n), t, nil)
}

func disabled(t *Container, op string) error {
	return clientErrorf("container %q: %s is disabled by its policy", t.Name, op)
}

// fill is one in-flight read of a row; concurrent misses wait for it.
type fill struct {
	stamp uint64 // the table's stamp when the query started
	done  chan struct{}
	it    container.Item
	ok    bool
	err   error
}

// vouched reports whether t's cached rows may be served (its group's gate:
// validity.Gate.Serves); when not, it counts n reads that bypass them.
func (e *Engine) vouched(t *Container, n int) bool {
	if t.gate.Serves() {
		return true
	}
	e.counters.CacheBypasses.Add(int64(n))
	return false
}

// tableGet reads a row for a get under the container's get policy.
func (e *Engine) tableGet(t *Container, row []byte) (store.Item, bool, error) {
	if t.Policies.Get == container.Disabled {
		return store.Item{}, false, disabled(t, "get")
	}
	if t.Policies.Get == container.DBOnly || !e.vouched(t, 1) {
		if it, ok, waiting, err := e.queued(t, row); err != nil || waiting {
			return it, ok, err
		}
		ctx, cancel := context.WithTimeout(context.Background(), tableTimeout)
		defer cancel()
		it, ok, err := t.C.Get(ctx, row)
		return fromRow(it), ok, err
	}
	sk := rowKey(t, row)
	if it, ok := e.st.Get(sk); ok && t.v.KeyValid(validityKey(t, sk), it.Tag) {
		return it, true, nil
	}
	t.startFill() // before readOnce takes (or joins) a stamp; after cacheRow stored, or not (see holdsRow)
	defer t.filling.Add(-1)
	f := t.readOnce(row, sk)
	if f.err != nil || !f.ok {
		return store.Item{}, false, f.err
	}
	item := fromRow(f.it)
	e.cacheRow(t, sk, item, f.stamp)
	return item, true, nil
}

// cacheRow stores a row read from the table after stamp in the local store
// (under sk, the row's cache key), unless a write of the row or of unknown
// rows happened since the stamp (then it may be stale). The check runs under
// the store's shard lock, so an invalidation cannot slip between check and
// store. Cached rows are ephemeral: never written to disk (rows loaded from
// disk would not be trusted anyway). It reports whether the copy was stored.
func (e *Engine) cacheRow(t *Container, sk []byte, item store.Item, stamp uint64) (stored bool) {
	item.Tag = stamp
	item.Ephemeral = true // the table is the truth: a copy needs no disk
	e.boundCopy(t, &item)
	vk := validityKey(t, sk)
	added := false
	_, err := e.st.Update(sk, func(cur *store.Item) (store.Action, store.Item) {
		if stored = t.v.KeyValid(vk, stamp); !stored {
			return store.Keep, store.Item{}
		}
		// A valid copy stamped later came from a later read or write: never put an earlier read over it (a copy
		// kept because it equals the binlog's image of a change relies on that; see holdsRow).
		if cur != nil && cur.Tag > stamp && t.v.KeyValid(vk, cur.Tag) {
			stored = false
			return store.Keep, store.Item{}
		}
		added = cur == nil
		return store.Replace, item
	})
	if added && err == nil {
		e.countCopy(t)
	}
	return stored && err == nil
}

// countCopy counts a copy stored under a key that had none. A copy is dropped by the second write of another key
// that shares its slot (validity.Table.WidenSlots), so the slots must grow with the copies: every copiesPerCheck
// new copies, the table gets slotsPerCopy slots per item the store holds now (a write then touches about
// 1/slotsPerCopy copies of other keys), within an eighth of the store's memory limit (16 bytes a slot). The count
// never goes down (a cache whose keys come and go asks again), and the store's own count decides.
func (e *Engine) countCopy(t *Container) {
	if t.copies.Add(1)%copiesPerCheck != 0 {
		return
	}
	st := e.st.Stats()
	if want := slotsFor(st.CurrItems, st.Limit); want > t.v.Slots() {
		t.v.WidenSlots(want)
	}
}

// slotsFor is how many per-key slots a container's table keeps when the store holds items within limit bytes (see
// countCopy): a power of two.
func slotsFor(items, limit int64) int {
	return int(min(roundUpPow2(slotsPerCopy*items), roundDownPow2(limit/8/16)))
}

// slotsPerCopy is how many per-key slots a container's table keeps per cached item (see countCopy). Measured with
// 30,000 rows set through a container then read at random, when a slot remembered only its last write's tick: with
// one slot per two rows (WideSlots), 22% of the gets missed once and read the table; with many more, none did.
const slotsPerCopy = 4

// copiesPerCheck is how often countCopy asks the store how many items it holds (a lock of each shard).
const copiesPerCheck = 4096

// roundUpPow2 is the least power of two ≥ n (1 for n ≤ 1).
func roundUpPow2(n int64) int64 { return 1 << bits.Len64(uint64(max(n, 1)-1)) }

// roundDownPow2 is the greatest power of two ≤ n (1 for n ≤ 1).
func roundDownPow2(n int64) int64 { return 1 << max(bits.Len64(uint64(max(n, 1)))-1, 0) }

// holdsRow reports whether this container can let a change of the row keyed vk (validityKey's form), imaged by img,
// pass without invalidating the key (see validity.KeyWatch.Holds):
//
//   - its copy is valid and is what a read of the row returns: value, flags, CAS and expiry;
//   - or, on the change's first application, the one write of the row in flight leaves exactly this row. The
//     binlog can echo a write before the writer has learned that it committed, let alone stored its copy; the
//     writer stores the row when it returns, and the copy before it stays valid until then (the write is not
//     acknowledged yet, so no reader can expect it). The second application (a moment later) asks the copy alone;
//   - or it holds no valid copy and nothing is in flight that could store one under a stamp from before the change
//     (no read counted in filling, no write of the row): there is nothing here to drop. This is what lets two
//     containers share a table, where the key's mark is one for both.
//
// settled (first application only): the answer kept the copy, or found none to keep, with no read counted in
// filling and no write of the row in flight. Only a read or a write that starts later could then store a copy of
// the row as it was before the change, and each start moves settling, which the follower read before asking; while
// it has not moved, the second application has nothing new to look at. (A set on an async container stores its
// copy without moving it: its value is newer than any row the table holds.)
//
// A copy whose life CopyTTL bounds carries an expiry the row does not have, so such a container never lets a
// change pass. The table's other caches are judged by their own watches.
func (e *Engine) holdsRow(t *Container, vk []byte, img validity.RowImage, first bool) (holds, settled bool) {
	if t.CopyTTL > 0 || t.Policies.Get != container.Caching {
		return false, false
	}
	row, known := t.C.FromImage(img.Value) // known: keyway can tell what a read of the row returns
	// The follower asks this for every row it sees written: the store key is built on the stack when it fits.
	var buf [128]byte
	cur, found := e.st.Peek(appendPrefixed(buf[:0], t, vk))
	valid := found && t.v.KeyValid(vk, cur.Tag)
	if known && valid && sameRow(cur, row, true) {
		return true, first && t.filling.Load() == 0 && !t.writing.any(vk)
	}
	switch t.writing.leaves(vk, row, known) {
	case leavesRow:
		return first, false
	case leavesOther:
		return false, false
	}
	holds = !valid && t.filling.Load() == 0
	return holds, holds && first
}

// startFill counts a read (or a warm restart's restore) that may store a copy under a stamp taken from now on: in
// filling until it ends (filling.Add(-1)), and in settling (see holdsRow). filling first: the follower reads
// settling before it looks at filling, so a start it does not find in filling has moved settling.
func (t *Container) startFill() {
	t.filling.Add(1)
	t.settling.Add(1)
}

// startWrite counts a write of vk that will store the row it leaves: in writing until done (see ownWrites.begin),
// and in settling (see holdsRow). writing first, for the reason startFill counts filling first.
func (t *Container) startWrite(vk []byte, row container.Item) (done func()) {
	done = t.writing.begin(vk, row)
	t.settling.Add(1)
	return done
}

// sameRow reports whether a copy is the row a read returns; withCAS says whether to compare CAS too.
func sameRow(copy store.Item, row container.Item, withCAS bool) bool {
	return bytes.Equal(copy.Value, row.Value) && copy.Flags == row.Flags && copy.Exptime == row.Exptime &&
		(!withCAS || copy.CAS == row.CAS)
}

// ownWrites are a container's writes of rows that are on their way to the table and not yet settled in the local
// copy, by validity key, with the row each leaves (see holdsRow).
type ownWrites struct {
	mu sync.Mutex
	m  map[string]*ownWrite
}

type ownWrite struct {
	row container.Item // its CAS is 0 when not known yet (see tableStore)
	n   int            // writes of the key in flight; the row is only trusted for one
}

// begin records a write of vk that will leave row; call the returned func once the local copy is settled.
func (w *ownWrites) begin(vk []byte, row container.Item) (done func()) {
	w.mu.Lock()
	if w.m == nil {
		w.m = make(map[string]*ownWrite)
	}
	o := w.m[string(vk)]
	if o == nil {
		o = &ownWrite{row: row}
		w.m[string(vk)] = o
	}
	o.n++
	w.mu.Unlock()
	return func() {
		w.mu.Lock()
		if o.n--; o.n == 0 {
			delete(w.m, string(vk))
		}
		w.mu.Unlock()
	}
}

// any reports whether a write of vk is in flight.
func (w *ownWrites) any(vk []byte) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.m[string(vk)] != nil
}

// inFlight is what the writes of a row in flight leave.
type inFlight int

const (
	noWrite     inFlight = iota
	leavesRow            // one write, leaving the row asked about
	leavesOther          // another row, or more than one write
)

// leaves says whether writes of vk are in flight and whether exactly one is, leaving row (known: row is what a
// read returns; otherwise no write can be said to leave it).
func (w *ownWrites) leaves(vk []byte, row container.Item, known bool) inFlight {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch o := w.m[string(vk)]; {
	case o == nil:
		return noWrite
	case known && o.n == 1 && sameRow(fromRow(o.row), row, o.row.CAS != 0):
		return leavesRow
	}
	return leavesOther
}

// readOnce reads row, sharing one query among concurrent callers (single-flight;
// golang.org/x/sync is not served by this module proxy, and this is all of it we need).
// A caller joins a query in flight only if no write of the row (nor of unknown
// rows) happened since it started: otherwise the query may predate a write the
// caller must see, and it runs its own. sk is the row's cache key.
func (t *Container) readOnce(row, sk []byte) *fill {
	t.fillMu.Lock()
	if f := t.fills[string(row)]; f != nil && t.v.KeyValid(validityKey(t, sk), f.stamp) {
		t.fillMu.Unlock()
		<-f.done
		return f
	}
	f := &fill{stamp: t.v.Stamp(), done: make(chan struct{})}
	t.fills[string(row)] = f
	t.fillMu.Unlock()
	// The queue is asked after the stamp is taken: a write queued later
	// invalidates it, so this fill will not be cached over it.
	if it, ok, err := t.queuedRow(row); err != nil {
		f.err = err // the container is not checked: the table must not be asked (see writebehind)
	} else if ok {
		f.it, f.ok = it, !expired(it.Exptime, time.Now().Unix())
	} else {
		ctx, cancel := context.WithTimeout(context.Background(), tableTimeout)
		f.it, f.ok, f.err = t.C.Get(ctx, row)
		cancel()
	}
	t.fillMu.Lock()
	if t.fills[string(row)] == f {
		delete(t.fills, string(row))
	}
	t.fillMu.Unlock()
	close(f.done)
	return f
}

// queuedRow is the write-behind queue's write for row, if one is waiting.
// An error (the container is not checked and the queue cannot tell) means
// the row must not be read from the table either.
func (t *Container) queuedRow(row []byte) (container.Item, bool, error) {
	if t.Behind == nil {
		return container.Item{}, false, nil
	}
	return t.Behind.Get(row)
}

// queued answers a read of row from the write-behind queue: waiting reports
// that a write is queued, ok that it is a live item.
func (e *Engine) queued(t *Container, row []byte) (it store.Item, ok, waiting bool, err error) {
	r, waiting, err := t.queuedRow(row)
	if err != nil || !waiting {
		return store.Item{}, false, false, err
	}
	if expired(r.Exptime, e.st.Now()) {
		return store.Item{}, false, true, nil
	}
	return fromRow(r), true, true, nil
}

func expired(exptime, now int64) bool { return exptime != 0 && exptime <= now }

// writeBehind acknowledges a plain set on an async container once it is
// checked against the table's columns, queued (journaled) and cached; the
// queue writes it to the table later.
func (e *Engine) writeBehind(t *Container, row []byte, item container.Item) (Status, uint64, error) {
	if err := t.C.Check(row, item); err != nil {
		return Failed, 0, err
	}
	item.CAS = t.C.AssignCAS(item)
	sk := rowKey(t, row)
	vk := validityKey(t, sk)
	var tick uint64
	err := t.Behind.Put(row, item, func() { tick = t.v.Wrote(vk) })
	if err != nil {
		return Failed, 0, err
	}
	// Cache the write unless another write of the row was queued after it
	// (that write caches its own) or a write of unknown rows (the SQL door)
	// came since.
	// The journal holds the write until the table does.
	e.keepWritten(t, sk, fromRow(item), tick, t.Policies.Get == container.Caching)
	return Stored, item.CAS, nil
}

// keepWritten makes the local copy of a row just written (under sk, the row's cache key) the row written, stamped
// with the write's tick, when cache says the container keeps copies and no invalidation of the row came after the
// tick; otherwise it drops the copy, so the local copy is never older than the queue or the table. The check runs
// under the store's shard lock (see cacheRow). A copy is ephemeral: the table, or the write-behind journal, holds
// the write.
func (e *Engine) keepWritten(t *Container, sk []byte, local store.Item, tick uint64, cache bool) {
	local.Tag = tick
	local.Ephemeral = true
	e.boundCopy(t, &local)
	added := false
	_, err := e.st.Update(sk, func(cur *store.Item) (store.Action, store.Item) {
		if cache && t.v.KeyValid(validityKey(t, sk), tick) {
			added = cur == nil
			return store.Replace, local
		}
		return store.Remove, store.Item{}
	})
	if added && err == nil {
		e.countCopy(t)
	}
	if err != nil {
		// The store refused the copy (too large, out of memory): the write stands; drop whatever copy is left.
		e.st.Update(sk, func(*store.Item) (store.Action, store.Item) { return store.Remove, store.Item{} })
	}
}

// boundCopy gives a copy the container's CopyTTL: it expires within that (rounded up to whole seconds, the
// store's clock) unless the row expires sooner.
func (e *Engine) boundCopy(t *Container, it *store.Item) {
	if t.CopyTTL <= 0 {
		return
	}
	limit := e.st.Now() + int64((t.CopyTTL+time.Second-1)/time.Second)
	if it.Exptime == 0 || it.Exptime > limit {
		it.Exptime = limit
	}
}

// DroppedWrite is told by a write-behind queue that the table refused a
// queued write of row: the cached copy goes, so the table stays the truth.
func (e *Engine) DroppedWrite(t *Container, row []byte) {
	sk := rowKey(t, row)
	t.v.Wrote(validityKey(t, sk))
	e.st.Update(sk, func(*store.Item) (store.Action, store.Item) { return store.Remove, store.Item{} })
}

func fromRow(it container.Item) store.Item {
	return store.Item{Value: it.Value, Flags: it.Flags, CAS: it.CAS, Exptime: it.Exptime}
}

// tableWrite runs a write under policy (the container's set or delete
// policy): on the table, then, for caching, it settles the local copy. A
// write that knows the row it left (write returns it, as the table returns it:
// see container.AsStored) writes through: the copy becomes that row, so the
// next get is a hit. Any other write, or one that failed, drops the copy.
// Keys whose policy is cache_only never get here (see Container.spaceFor).
func (e *Engine) tableWrite(t *Container, row []byte, policy container.Policy, op string, write func(ctx context.Context) (*container.Item, error)) error {
	if policy == container.Disabled {
		return disabled(t, op)
	}
	if t.Behind != nil {
		// The answer depends on the row: let its queued write land first.
		if err := t.Behind.Sync(row); err != nil {
			return err
		}
	}
	// The stamp before the write: WroteThrough checks that nothing else
	// invalidated the row since (see validity.Table.WroteThrough).
	since := t.v.Stamp()
	ctx, cancel := context.WithTimeout(context.Background(), tableTimeout)
	defer cancel()
	written, err := write(ctx)
	if testHookAfterTableWrite != nil {
		testHookAfterTableWrite(t, row)
	}
	// A container that keeps copies for gets must not keep one older than this write, whatever the write's own
	// policy: a db_only set or delete is read back through the copy too (keyway's promise: an acknowledged write
	// is visible to every later read through it).
	if policy == container.Caching || t.Policies.Get == container.Caching {
		sk := rowKey(t, row)
		vk := validityKey(t, sk)
		if err == nil && written != nil && policy == container.Caching && t.Policies.Get == container.Caching {
			tick, unchanged := t.v.WroteThrough(vk, since)
			e.keepWritten(t, sk, fromRow(*written), tick, unchanged)
			return nil
		}
		// Invalidate even after an error: the write may have committed.
		t.v.Wrote(vk)
		e.st.Update(sk, func(*store.Item) (store.Action, store.Item) { return store.Remove, store.Item{} })
	}
	return err
}

// testHookAfterTableWrite, when set by a test, runs between a table write's commit and its cache update: the window
// in which another writer's commit and invalidation can overtake it.
var testHookAfterTableWrite func(t *Container, row []byte)

// statusOf maps a container status to the engine's.
func statusOf(s container.Status) Status {
	switch s {
	case container.Stored:
		return Stored
	case container.NotStored:
		return NotStored
	case container.Exists:
		return Exists
	case container.NotFound:
		return NotFound
	case container.Deleted:
		return Deleted
	case container.Touched:
		return Touched
	case container.NonNumeric:
		return NonNumeric
	}
	return Failed
}

// tableStore runs a storage command on a table (a set policy other than
// cache_only). The returned item is the row as the table now returns it when
// keyway knows that (see container.AsStored), else what was sent: the row is
// not read back.
func (e *Engine) tableStore(t *Container, row, value []byte, r StoreRequest) (status Status, it store.Item, err error) {
	item := container.Item{Value: value, Flags: r.Flags, Exptime: e.Deadline(r.TTL)}
	var newCAS uint64
	var stored *container.Item
	if t.Behind != nil && r.Mode == Set && t.Policies.Set != container.Disabled {
		status, newCAS, err = e.writeBehind(t, row, item)
	} else {
		if t.Policies.Set == container.Caching && t.Policies.Get == container.Caching && r.Mode != Append && r.Mode != Prepend {
			// The binlog may echo this write before it returns: say what row it leaves (see holdsRow). Its CAS is
			// known here only without a cas column (a hash, never 0); with one, the committer assigns it (0 here).
			if want, ok := t.C.AsStored(item, 0); ok {
				defer t.startWrite(validityKey(t, rowKey(t, row)), want)()
			}
		}
		err = e.tableWrite(t, row, t.Policies.Set, "set", func(ctx context.Context) (*container.Item, error) {
			var s container.Status
			var werr error
			switch r.Mode {
			case CAS:
				newCAS, s, werr = t.C.CompareAndSwap(ctx, row, item, r.CAS)
			case Set:
				newCAS, werr = t.C.Set(ctx, row, item)
				s = container.Stored
			case Add:
				newCAS, s, werr = t.C.Add(ctx, row, item)
			case Replace:
				newCAS, s, werr = t.C.Replace(ctx, row, item)
			case Append:
				newCAS, s, werr = t.C.Append(ctx, row, item)
			case Prepend:
				newCAS, s, werr = t.C.Prepend(ctx, row, item)
			}
			status = statusOf(s)
			if werr != nil || s != container.Stored || r.Mode == Append || r.Mode == Prepend {
				return nil, werr // an append's row is not known without reading it
			}
			if as, ok := t.C.AsStored(item, newCAS); ok {
				stored = &as
			}
			return stored, nil
		})
	}
	if err != nil || status != Stored {
		if err != nil {
			status = Failed
		}
		return status, store.Item{}, err
	}
	if stored != nil {
		return status, fromRow(*stored), nil
	}
	return status, fromRow(container.Item{Value: value, Flags: item.Flags, Exptime: item.Exptime, CAS: newCAS}), nil
}

// tableIncrDecr runs incr/decr on a table; a.Create (binary and meta) adds the
// row with a.Initial when it is missing.
func (e *Engine) tableIncrDecr(t *Container, row []byte, a Arith, res ArithResult) (ArithResult, error) {
	res.Status = Failed
	err := e.tableWrite(t, row, t.Policies.Set, "incr/decr", func(ctx context.Context) (*container.Item, error) {
		for attempt := 0; attempt < 2; attempt++ {
			v, s, err := t.C.IncrDecr(ctx, row, a.Delta, a.Decr)
			if err != nil || s != container.NotFound || !a.Create {
				res.Value, res.Status = v, statusOf(s)
				return nil, err
			}
			_, s, err = t.C.Add(ctx, row, container.Item{Value: strconv.AppendUint(nil, a.Initial, 10), Exptime: e.Deadline(a.CreateTTL)})
			if err != nil || s == container.Stored {
				res.Value, res.Status, res.Created = a.Initial, statusOf(s), s == container.Stored
				return nil, err
			}
			// Someone added it meanwhile: incr that.
		}
		return nil, nil
	})
	if err != nil {
		res.Status = Failed
	}
	return res, err
}

// tableDelete deletes a row under the container's delete policy.
func (e *Engine) tableDelete(t *Container, row []byte) (Status, error) {
	status := Deleted
	err := e.tableWrite(t, row, t.Policies.Delete, "delete", func(ctx context.Context) (*container.Item, error) {
		s, err := t.C.Delete(ctx, row)
		status = statusOf(s)
		return nil, err
	})
	if err != nil {
		return Failed, err
	}
	return status, nil
}

// tableTouch sets a row's expiry under the container's set policy. The
// returned item is empty: the row is not read back.
func (e *Engine) tableTouch(t *Container, row []byte, exptime int64) (store.Item, Status, error) {
	status := Failed
	err := e.tableWrite(t, row, t.Policies.Set, "touch", func(ctx context.Context) (*container.Item, error) {
		s, err := t.C.Touch(ctx, row, e.Deadline(exptime))
		status = statusOf(s)
		return nil, err
	})
	count(status == Touched, &e.counters.TouchHits, &e.counters.TouchMisses)
	if err != nil {
		return store.Item{}, Failed, err
	}
	return store.Item{}, status, nil
}

// GetMulti looks up keys in order, as a multi-key get: each key space
// answers its share at once, so the local store answers what it can and the
// rows each container still needs are read with one query per container
// (WHERE key IN (…)). The error is the first a key or a space met; the other
// keys are answered regardless.
func (e *Engine) GetMulti(keys [][]byte) ([]store.Item, []bool, error) {
	return e.getMulti(nil, keys, false)
}

// GetMultiTallied is GetMulti counted in t (see Tally).
func (e *Engine) GetMultiTallied(t *Tally, keys [][]byte) ([]store.Item, []bool, error) {
	return e.getMulti(t, keys, false)
}

// ErrWouldWait is TryGetMulti's answer when a key's answer needs MySQL.
var ErrWouldWait = errors.New("engine: the answer needs MySQL")

// TryGetMulti is GetMulti answered from what keyway holds, for a caller that must not wait (a memcache event loop):
// when any key's answer needs MySQL (a row with no valid copy held, a container that does not cache, the binlog not
// yet followed), it returns ErrWouldWait, having asked nothing and counted nothing, and the caller calls GetMulti
// where it may wait. It is the check MayWait makes for a read, made with the read itself instead of before it.
// What it answers is counted in t (nil: the engine's counters).
func (e *Engine) TryGetMulti(t *Tally, keys [][]byte) ([]store.Item, []bool, error) {
	return e.getMulti(t, keys, true)
}

// TryGetTallied is GetTallied answered from what keyway holds, as TryGetMulti answers one key, and allocates nothing.
func (e *Engine) TryGetTallied(t *Tally, key []byte) (store.Item, bool, error) {
	sp, k, err := e.space(key, classGet)
	if err != nil {
		e.countGet(t, false)
		return store.Item{}, false, err
	}
	it, ok, err := sp.tryGet(e, k)
	if errors.Is(err, ErrWouldWait) {
		return store.Item{}, false, err // counted by the call that may wait
	}
	e.countGet(t, ok)
	return it, ok, err
}

// getMulti is GetMultiTallied, or TryGetMulti with noWait.
func (e *Engine) getMulti(t *Tally, keys [][]byte, noWait bool) ([]store.Item, []bool, error) {
	items := make([]store.Item, len(keys))
	found := make([]bool, len(keys))
	var firstErr error
	if !e.HasContainers() {
		for i, key := range keys {
			items[i], found[i] = e.st.Get(key)
		}
	} else {
		// Group the keys by space, in order of first appearance; there are few spaces.
		type share struct {
			sp  keySpace
			idx []int
			k   [][]byte
		}
		var shares []share
	next:
		for i, key := range keys {
			sp, k, err := e.space(key, classGet)
			if err != nil {
				if firstErr == nil {
					firstErr = err
				}
				continue
			}
			for j := range shares {
				if shares[j].sp == sp {
					shares[j].idx, shares[j].k = append(shares[j].idx, i), append(shares[j].k, k)
					continue next
				}
			}
			shares = append(shares, share{sp: sp, idx: []int{i}, k: [][]byte{k}})
		}
		for _, sh := range shares {
			err := sh.sp.getMany(e, sh.idx, sh.k, items, found, noWait)
			if errors.Is(err, ErrWouldWait) {
				return nil, nil, err
			}
			if err != nil && firstErr == nil {
				firstErr = err
			}
		}
	}
	var hits int64
	for _, f := range found {
		if f {
			hits++
		}
	}
	e.countGets(t, int64(len(keys)), hits)
	return items, found, firstErr
}

// heldCopy is the copy of row that keyway holds, if it holds one that is valid (see tableGetMany).
func (e *Engine) heldCopy(t *Container, row []byte) (store.Item, bool) {
	var buf [128]byte
	sk := appendRowKey(buf[:0], t, row) // a lookup's key: on the stack unless long
	if it, ok := e.st.Get(sk); ok && t.v.KeyValid(validityKey(t, sk), it.Tag) {
		return it, true
	}
	return store.Item{}, false
}

// tableTryGet is a get of row answered from the copy keyway holds, as tableGetMany answers with noWait: ErrWouldWait
// when the answer needs MySQL (no valid copy held, a policy that does not cache, the binlog not yet followed).
func (e *Engine) tableTryGet(t *Container, row []byte) (store.Item, bool, error) {
	switch {
	case t.Policies.Get == container.Disabled:
		return store.Item{}, false, disabled(t, "get")
	case t.Policies.Get != container.Caching || !t.gate.Serves():
		return store.Item{}, false, ErrWouldWait
	}
	if it, ok := e.heldCopy(t, row); ok {
		return it, true, nil
	}
	return store.Item{}, false, ErrWouldWait
}

// tableGetMany answers a multi-get's rows of t (rows[j] into items[idx[j]]):
// fresh cached copies first, then queued writes, then one query for the rest.
// With noWait each row is tableTryGet's: answered from its copy, or ErrWouldWait for the whole call.
func (e *Engine) tableGetMany(t *Container, idx []int, rows [][]byte, items []store.Item, found []bool, noWait bool) error {
	if noWait {
		for j, row := range rows {
			it, ok, err := e.tableTryGet(t, row)
			if err != nil {
				return err
			}
			items[idx[j]], found[idx[j]] = it, ok
		}
		return nil
	}
	switch t.Policies.Get {
	case container.Disabled:
		return disabled(t, "get")
	case container.Caching:
		if !e.vouched(t, len(rows)) {
			break
		}
		n := 0
		for j, row := range rows {
			if it, ok := e.heldCopy(t, row); ok {
				items[idx[j]], found[idx[j]] = it, true
				continue
			}
			idx[n], rows[n] = idx[j], row
			n++
		}
		idx, rows = idx[:n], rows[:n]
	}
	if len(rows) == 0 {
		return nil
	}
	// The table's stamp before anything is asked.
	t.startFill() // see holdsRow
	defer t.filling.Add(-1)
	stamp := t.v.Stamp()
	// Queued writes answer for their rows (asked after the stamp is taken;
	// see readOnce); the table is asked for the rest.
	ask, queued := rows, map[string]container.Item(nil)
	var qerr error
	if t.Behind != nil {
		ask = nil
		for _, row := range rows {
			it, ok, err := t.queuedRow(row)
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
		rowsFound, err = t.C.GetMulti(ctx, ask) // the error names the container already
		cancel()
	}
	if len(queued) > 0 && rowsFound == nil {
		rowsFound = map[string]container.Item{}
	}
	now := e.st.Now()
	for k, it := range queued {
		if !expired(it.Exptime, now) {
			rowsFound[k] = it
		}
	}
	for j, i := range idx {
		r, ok := rowsFound[string(rows[j])]
		if !ok {
			continue
		}
		items[i], found[i] = fromRow(r), true
		if t.Policies.Get == container.Caching && t.gate.Serves() { // a bypass stores nothing either
			e.cacheRow(t, rowKey(t, rows[j]), items[i], stamp)
		}
	}
	if err == nil {
		err = qerr
	}
	return err
}

// ContainerStatus is a container's state for /status.
type ContainerStatus struct {
	Table string `json:"table"`
	// Checked: the container checked its table and serves; false while it waits for its backend (see
	// container.Open), when its keys answer SERVER_ERROR.
	Checked     bool               `json:"checked"`
	Get         container.Policy   `json:"get"`
	Set         container.Policy   `json:"set"`
	Delete      container.Policy   `json:"delete"`
	Flush       container.Policy   `json:"flush"`
	Write       string             `json:"write"` // "sync" or "async"
	GroupCommit container.Stats    `json:"group_commit"`
	WriteBehind *writebehind.Stats `json:"write_behind,omitempty"`
}

// Status returns a snapshot of the container's policies and write counters.
func (t *Container) Status() ContainerStatus {
	st := ContainerStatus{Table: t.Source, Checked: t.C.Checked(), Get: t.Policies.Get, Set: t.Policies.Set, Delete: t.Policies.Delete,
		Flush: t.Policies.Flush, Write: "sync", GroupCommit: t.C.Stats()}
	if t.Behind != nil {
		wb := t.Behind.Stats()
		st.Write, st.WriteBehind = "async", &wb
	}
	return st
}
