// Package validity is the one place that decides whether a cached copy of table data may still be served. It owns
// what follows, and imports none of the packages that use it (engine, sqlproxy, qcache, binlog, warm and server
// import it):
//
//   - Table identity. A table is a TableID, schema and name in lower case. The SQL naming rule lives here alone:
//     an unqualified name means that table in the statement's default database, and with no default database it
//     matches the table of that name in every schema (the statement would fail on the server, but keyway errs
//     on the side of invalidating). Resolve applies the rule; callers keep its result per (digest, default
//     database), so no statement pays for string folding.
//   - Stamps. Each Table keeps a logical clock. Every invalidation takes the next tick and records it where it
//     applies: on the key's slot for a write of a known key (keys hash onto a set of slots, widened for tables
//     whose rows a cache keeps many copies of: WidenSlots; a slot remembers which key its last write was, by a
//     fingerprint, so a copy survives one write of another key sharing its slot, and a second such write, or a
//     fingerprint that matches by chance, only costs a discarded copy, never a stale one), on the table's rows
//     mark for any row write (what entries tagged by the whole table, such as range reads, check), and on the
//     epoch for a write whose rows are not known, DDL, or a gap in the binlog (every copy goes). The rule every cache
//     follows: take Stamp before asking the backend and keep it with the copy; store the copy, and later serve
//     it, only while KeyValid (or TableValid) says nothing was invalidated after that stamp. The store's check
//     runs under the lock that guards the cache entry, so an invalidation can never slip between check and store.
//   - Watched keys. A cache that keys a table's copies by a column (a container's key column, a primary key)
//     registers it with WatchKey, so the binlog follower can turn a row change into the keys to invalidate. A
//     watch with Holds may say that its cache's copy already is the row a change left (the echo of the cache's own
//     write): the follower then records Touched (the rows mark) instead of the key.
//   - Column keys (ColumnKey, RowKeyValid): the SQL result cache keys a point select on an integer value by
//     (column, canonical decimal), and the follower reports every changed row under every numeric watch
//     (Changed). A write known by one key only (a container's write through the memcache door: Wrote) cannot say
//     which other columns' keys its row has, so it raises the table's single-key mark and every column-keyed
//     entry of the table drops, as a table-wide entry would.
//   - Freshness, per backend group (Gate). Copies may be stale by as much as the binlog follower lags. A group
//     whose follower vouches (RequireVouch) serves its copies only while the follower has confirmed, within
//     max_staleness, that it has applied every commit its server had made up to some instant; a group with
//     invalidate = "ttl" or "none" serves them as the operator chose; a group nothing follows serves none (reads
//     go to MySQL). One group's gate never decides for another's tables.
//   - Positions, per backend group (Gate.NoteCommit, Needs, Newest). Ticks order invalidations inside keyway;
//     positions say where in the group's replication stream a table last changed, so a read can go to a replica
//     that has applied it. A Position is a MariaDB GTID position (per replication domain, the highest sequence
//     number; server ids are not compared). A group's gate keeps, per table, the position of the last commit that
//     changed it that keyway knows of, and the group's newest position. They live on the Gate, not on Table: a
//     Table is shared by every group, and two groups' GTIDs are never compared. Sources: every commit the binlog
//     follower reads (its tables' rows and DDL; a statement it cannot name the tables of, its start position and a
//     gap raise every table: NoteAll), and keyway's own writes, noted when they are acknowledged (before the
//     follower sees them) with the GTID the server reported. Needs(tables) is what a read of those tables needs a
//     server to have applied; a statement whose tables keyway cannot name needs Newest. Positions only rise. A
//     commit's position is noted before its invalidations are applied (the follower, and the SQL door for its own
//     writes), so a stamp taken after an invalidation finds its commit's position in Needs. A MySQL group's
//     positions stay zero for now (no GTID sets): its reads of replicas cannot be vouched for by position.
//   - The fill rule with replicas. A cache fill reads at or after the position its stamp stands for: from the
//     primary, or from a replica whose applied position covers Needs(tables) read after the stamp was taken (at
//     that moment or later). A fill from a replica that has not reached it would store an old row under a stamp
//     that says it is newer, and no later invalidation would come to drop it. The SQL door enforces this; the
//     package only keeps the positions it is checked against.
//   - Kinds. Only a base table's changes reach the binlog under its own name: a view's rows change with the tables
//     under it, and a federated table's elsewhere. A cache that relies on invalidation (no ttl) stores copies of
//     a table only once Trusted says it is a base table of an engine whose writes are logged (SetKindLookup; DDL
//     makes the answer be asked again). Without a lookup, as in a registry no follower watches, every table is
//     trusted.
//   - Settling. A component that acknowledges writes before they reach the table (a write-behind queue)
//     registers a settle function; Settle runs them before a statement that names the table, so the statement
//     sees, and acts after, every write keyway acknowledged.
//
// Invariants: a table's clock, slots, rows mark, single-key mark and epoch only grow, and no mark is ever above
// the clock; a gate's positions only rise, per domain, and a commit's position is noted before its invalidations; a Table, once created, is never replaced, so a *Table may be kept (on a plan, on a container) for the
// registry's life, and so may its Index, which TableAt turns back into it (for copies kept without Go pointers).
package validity

import (
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"
)

// TableID names a table, lower-cased. Schema is "" only for an unqualified name whose default database is not
// known: it then stands for that name in any schema.
type TableID struct {
	Schema, Name string
}

// String is "schema.name", or "name" for an ID without schema.
func (id TableID) String() string {
	if id.Schema == "" {
		return id.Name
	}
	return id.Schema + "." + id.Name
}

// ParseTableID reads "schema.table" (or a bare "table", with db as its schema when db is not ""), as a statement
// names it, folding case. This is the SQL naming rule; no other package re-implements it.
func ParseTableID(db, name string) TableID {
	schema, table, ok := strings.Cut(name, ".")
	if !ok {
		schema, table = db, name
	}
	return TableID{Schema: strings.ToLower(schema), Name: strings.ToLower(table)}
}

// Resolve returns the IDs of names (as a statement names them) in default database db. Callers keep the result
// for the (statement, db) pair.
func Resolve(db string, names []string) []TableID {
	out := make([]TableID, 0, len(names))
	for _, n := range names {
		id := ParseTableID(db, n)
		dup := false
		for _, o := range out {
			dup = dup || o == id
		}
		if !dup {
			out = append(out, id)
		}
	}
	return out
}

// keySlots is how many per-key slots a table keeps at first: enough that concurrent fills of different keys rarely
// share one, small enough (16 KiB) to keep for every table.
const keySlots = 1024

// WideSlots is how many a table keeps once a cache holds copies of many of its rows for a long time (WidenSlots): a
// copy is dropped by the second write of another key that shares its slot (keySlot), so with n copies kept, each
// write of the table puts about n/WideSlots copies it did not touch one step closer to that. 1 MiB (16 bytes a
// slot), for the tables a container keeps copies of; a container widens them further as its copies grow.
const WideSlots = 1 << 16

// Table is the validity state of one table.
type Table struct {
	id    TableID
	index uint32        // its place in the registry (Index, Registry.TableAt)
	clock atomic.Uint64 // the last tick handed out
	epoch atomic.Uint64 // tick of the last invalidation of every copy
	rows  atomic.Uint64 // tick of the last write of any row
	// single is the tick of the last write known by one key only (Wrote): column-keyed entries cannot tell
	// whether it touched their row.
	single atomic.Uint64
	// slots are the marks of the writes of the keys in each slot (keySlot), indexed by a hash of the key as the
	// table compares keys.
	// The slice only grows (WidenSlots), its length a power of two; a key's slot in a wider slice keeps the
	// marks it had, since the new index is the old one with more bits of the same hash.
	slots atomic.Pointer[[]keySlot]
	// ticking orders invalidations: each takes its tick and records it before the next takes one, so WroteThrough
	// sees every invalidation with an earlier tick. Readers never take it.
	ticking sync.Mutex

	mu      sync.Mutex
	settle  []func() error
	watches []KeyWatch

	reg    *Registry
	kindMu sync.Mutex   // one lookup at a time
	kind   atomic.Int32 // kindUnknown, kindTrusted or kindUntrusted
}

const (
	kindUnknown = iota
	kindTrusted
	kindUntrusted
)

// Trusted reports whether copies of the table may rely on invalidation: it is a base table whose writes the
// binlog names (see SetKindLookup). The first call after start or after DDL on the table asks the lookup and
// waits for its answer; an error leaves the table untrusted until the next call asks again.
func (t *Table) Trusted() bool {
	switch t.kind.Load() {
	case kindTrusted:
		return true
	case kindUntrusted:
		return false
	}
	lookup := t.reg.kindLookup.Load()
	if lookup == nil {
		return true
	}
	t.kindMu.Lock()
	defer t.kindMu.Unlock()
	if k := t.kind.Load(); k != kindUnknown {
		return k == kindTrusted
	}
	trusted, err := (*lookup)(t.id)
	switch {
	case err != nil:
		return false
	case trusted:
		t.kind.Store(kindTrusted)
	default:
		t.kind.Store(kindUntrusted)
	}
	return trusted
}

// ForgetKind makes the next Trusted ask the lookup again (DDL named the table).
func (t *Table) ForgetKind() { t.kind.Store(kindUnknown) }

// KeyWatch is a column whose values key cached copies of the table, and how a value becomes the key the copies
// are stamped under (Norm appends to dst the key as the cache compares keys, for example case-folded under a
// case-insensitive collation).
type KeyWatch struct {
	Column string
	Norm   func(dst, value []byte) []byte
	// Numeric watches key entries by ColumnKey: the follower renders a value with ColumnKey, and a value it cannot
	// render (not an integer, negative, a type it cannot vouch for) invalidates the whole table. Norm is unused.
	Numeric bool
	// Holds, when set, lets a change leave a copy in place: it reports whether the cache's copy of key is valid and
	// equals the row as the change left it (img, an after image). The binlog follower asks it when it applies the
	// change (first) and again when it applies it a second time; while it holds, the key is not invalidated (Touched
	// is recorded instead). This is how a write keyway made itself, and cached as it wrote it, survives its own echo
	// in the binlog. A copy that equals the row at a commit is exactly what a read after that commit returns; any
	// later commit comes later in the binlog and is judged on its own image.
	//
	// settled, on the first application, says the answer needs no second look unless Settling moves: nothing was
	// in flight that could store a copy of the row older than the change (a read of the table, a write of the
	// row), so only something that starts later can, and every such start moves Settling.
	Holds func(key []byte, img RowImage, first bool) (holds, settled bool)
	// Settling, required with Holds, counts the starts of whatever may store a copy of a row as it was before then
	// (a read of the table that may fill a copy, a write that will store the row it leaves). The follower reads it
	// before a change's first application; at the second, a settled answer stands while Settling has not moved,
	// and Holds is not asked again (the second look costs a lookup per row, and most echoes need none).
	Settling func() uint64
}

// RowImage is a row as the binlog images it after a change: Values in the table's column order, Columns giving
// each column's position by lower-case name.
type RowImage struct {
	Columns map[string]int
	Values  []any
}

// Value is the image's value of column (lower-case); ok is false when the image does not hold the column.
func (r RowImage) Value(column string) (v any, ok bool) {
	i, ok := r.Columns[column]
	if !ok || i >= len(r.Values) {
		return nil, false
	}
	return r.Values[i], true
}

// ID is the table's identity.
func (t *Table) ID() TableID { return t.id }

// Index is the table's number in its registry, small and stable for the registry's life: a cache that keeps its
// copies where the garbage collector does not look (no Go pointers) names a table by it, and finds it again with
// Registry.TableAt.
func (t *Table) Index() uint32 { return t.index }

// Stamp is the table's clock now: take it before a fill asks the backend, and keep it with the copy.
func (t *Table) Stamp() uint64 { return t.clock.Load() }

// KeyValid reports whether a copy of key stamped at stamp is still valid: no write of key (or of its slot), and
// no invalidation of the whole table, came after it. key is as the table compares keys (normalized by the caller).
func (t *Table) KeyValid(key []byte, stamp uint64) bool {
	return t.slot(key).valid(stamp) && t.epoch.Load() <= stamp
}

// TableValid reports whether a copy that depends on any row of the table (a range read), stamped at stamp, is
// still valid.
func (t *Table) TableValid(stamp uint64) bool {
	return t.rows.Load() <= stamp && t.epoch.Load() <= stamp
}

// RowKeyValid reports whether an entry keyed by a column key (ColumnKey) stamped at stamp is still valid: no
// change reported that key (Changed), no write known by one key only came after it (Wrote), and no invalidation
// of the whole table.
func (t *Table) RowKeyValid(key []byte, stamp uint64) bool {
	return t.slot(key).valid(stamp) && t.single.Load() <= stamp && t.epoch.Load() <= stamp
}

// Wrote records a write of key by a writer that knows the row by that key only (a container's key): copies of it
// stamped before now are invalid, and so are copies that depend on the whole table or on a column key. It returns
// the write's tick: a copy the writer stores itself carries it.
func (t *Table) Wrote(key []byte) uint64 {
	t.reg.ownWrites.Add(1)
	t.ticking.Lock()
	defer t.ticking.Unlock()
	return t.wrote(key)
}

func (t *Table) wrote(key []byte) uint64 {
	tick := t.changed(key)
	raise(&t.single, tick)
	return tick
}

// Changed records a change of a row the binlog follower saw: it reports the row under every watched key (each
// watch's key of its before and after images), so only copies of those keys, and copies that depend on the
// whole table, are invalid.
func (t *Table) Changed(key []byte) {
	t.ticking.Lock()
	defer t.ticking.Unlock()
	t.changed(key)
}

func (t *Table) changed(key []byte) uint64 {
	tick := t.clock.Add(1)
	t.slot(key).raise(tick)
	raise(&t.rows, tick)
	return tick
}

// Touched records a change of a row whose copies keyed by its key stay valid (KeyWatch.Holds said so): only copies
// that depend on the whole table are invalid.
func (t *Table) Touched() {
	t.ticking.Lock()
	defer t.ticking.Unlock()
	raise(&t.rows, t.clock.Add(1))
}

// WroteThrough records a write of key, as Wrote does, by a writer that wants to cache the value it wrote: since is
// the Stamp it took before it sent the write. unchanged reports whether key (or its slot, or the whole table) saw
// no other invalidation after since. Only then may the writer store its value, with the returned tick, under the
// usual KeyValid check: any write that committed after this one takes its tick after since, so it is either seen
// here (unchanged is false) or comes later and invalidates the copy. Without that check a write committed after
// this one, whose invalidation ran before this one's, would leave this older value cached.
func (t *Table) WroteThrough(key []byte, since uint64) (tick uint64, unchanged bool) {
	t.reg.ownWrites.Add(1)
	t.ticking.Lock()
	defer t.ticking.Unlock()
	unchanged = t.KeyValid(key, since)
	return t.wrote(key), unchanged
}

// Invalidate records a write whose rows are not known (or DDL, or a gap in what the binlog follower saw): every
// copy of the table stamped before now is invalid.
func (t *Table) Invalidate() {
	t.ticking.Lock()
	defer t.ticking.Unlock()
	tick := t.clock.Add(1)
	raise(&t.rows, tick)
	raise(&t.epoch, tick)
}

// raise sets m to tick unless it already holds a later one, so a mark never goes back whoever calls it.
func raise(m *atomic.Uint64, tick uint64) {
	for {
		old := m.Load()
		if old >= tick || m.CompareAndSwap(old, tick) {
			return
		}
	}
}

// slot is key's slot, with key's fingerprint.
func (t *Table) slot(key []byte) slotRef {
	s := *t.slots.Load()
	h := keyHash(key)
	return slotRef{&s[h&uint64(len(s)-1)], fingerprint(h)}
}

// keyHash is FNV-1a 64, inlined so a fill allocates nothing: its low bits pick the slot, its top bits are the
// fingerprint.
func keyHash(key []byte) uint64 {
	h := uint64(14695981039346656037)
	for _, b := range key {
		h = (h ^ uint64(b)) * 1099511628211
	}
	return h
}

// keySlot is the marks of the keys that share a slot: last, the tick of the slot's last write with the
// fingerprint of its key, and before, the highest tick of the earlier writes of other keys than that one (a key's
// writes in a row keep only the latest in last). A copy of a key stamped at s is
// valid while before ≤ s and the last write was of another key or is ≤ s: it outlives one write of another key
// of its slot, not two. A fingerprint is not a key: two keys with the same one count as one, so a copy is then
// dropped as if its own key had been written (never kept when it was).
//
// Writers take the table's ticking lock, in tick order, and move last into before before they replace last;
// readers load last, then before, so whatever pair they see is a state the slot was in, or one that drops more.
type keySlot struct {
	last   atomic.Uint64 // tick<<fingerprintBits | fingerprint; 0 when none
	before atomic.Uint64
}

// fingerprintBits of a key's hash tell keys of one slot apart; the tick takes the rest of last's bits.
const (
	fingerprintBits = 16
	maxPackedTick   = 1<<(64-fingerprintBits) - 1
)

func fingerprint(h uint64) uint64 {
	return max(h>>(64-fingerprintBits), 1) // 0 is no key: a last write recorded without one
}

// slotRef is a key's slot and fingerprint.
type slotRef struct {
	s  *keySlot
	fp uint64
}

// valid reports whether a copy of the key stamped at stamp is still valid as far as the slot can tell.
func (r slotRef) valid(stamp uint64) bool {
	last := r.s.last.Load()
	if last&(1<<fingerprintBits-1) == r.fp && last>>fingerprintBits > stamp {
		return false
	}
	return r.s.before.Load() <= stamp
}

// raise records a write of the key at tick (the caller holds ticking). A tick past what last can hold goes to
// before, where it drops every copy of the slot, as a write of each of its keys would.
func (r slotRef) raise(tick uint64) {
	last := r.s.last.Load()
	if last&(1<<fingerprintBits-1) != r.fp {
		raise(&r.s.before, last>>fingerprintBits)
	}
	if tick > maxPackedTick {
		raise(&r.s.before, tick)
		r.s.last.Store(0)
		return
	}
	r.s.last.Store(tick<<fingerprintBits | r.fp)
}

// Slots is how many per-key marks the table keeps.
func (t *Table) Slots() int { return len(*t.slots.Load()) }

// WidenSlots makes the table keep at least n per-key marks (n a power of two). Each new mark starts at the old mark
// its keys had, so no copy becomes valid again; a reader still on the old slice sees the marks as they were when
// the new one replaced it (raises take ticking, and so does this).
func (t *Table) WidenSlots(n int) {
	if grown := t.widenSlots(n); grown > 0 {
		t.reg.slotsGrew(grown)
	}
}

// widenSlots is WidenSlots under ticking: it reports how many slots it added.
func (t *Table) widenSlots(n int) int {
	t.ticking.Lock()
	defer t.ticking.Unlock()
	old := *t.slots.Load()
	if n <= len(old) {
		return 0
	}
	wide := make([]keySlot, n)
	for i := range wide {
		o := &old[i&(len(old)-1)]
		wide[i].before.Store(o.before.Load())
		wide[i].last.Store(o.last.Load())
	}
	t.slots.Store(&wide)
	return n - len(old)
}

// slotSize is the memory of one per-key slot.
const slotSize = int64(unsafe.Sizeof(keySlot{}))

// SlotBytes is the memory every table's per-key slots take together: they grow with the copies a cache keeps
// (WidenSlots), by up to an eighth of the store's limit per table a container caches, on top of the items.
func (r *Registry) SlotBytes() int64 { return r.slotBytes.Load() }

// OnSlotsGrown makes f be called with SlotBytes each time a table's slots grow, outside the table's locks: the
// server gives Go's heap that much more room, so the slots are not paid for by collecting more often. Call it
// before the registry is shared; a later call replaces f.
func (r *Registry) OnSlotsGrown(f func(total int64)) { r.onSlotsGrown.Store(&f) }

// slotsGrew counts n new slots and tells OnSlotsGrown's function, one growth at a time: two tables widening at once
// must not leave the function last told the smaller total.
func (r *Registry) slotsGrew(n int) {
	r.growMu.Lock()
	defer r.growMu.Unlock()
	total := r.slotBytes.Add(int64(n) * slotSize)
	if f := r.onSlotsGrown.Load(); f != nil {
		(*f)(total)
	}
}

// WatchKey registers a column whose values key copies of the table (see KeyWatch). Registering the same column
// twice keeps both: each normalizer's keys are invalidated; a numeric watch is kept once per column.
func (t *Table) WatchKey(w KeyWatch) {
	if w.Holds != nil && w.Settling == nil {
		panic("validity: a KeyWatch with Holds needs Settling")
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if w.Numeric {
		for _, o := range t.watches {
			if o.Numeric && strings.EqualFold(o.Column, w.Column) {
				return
			}
		}
	}
	t.watches = append(t.watches, w)
}

// ColumnKey appends to dst the key an entry keyed by column = value is stamped under: the lower-case column, a
// zero byte and the value as a canonical decimal (no sign, no leading zero). ok is false for a value it cannot
// render so that every equal value renders alike: anything but a Go integer of any size, an integral float64
// below 2^53, or a string or []byte that is already canonical. YEAR (go-mysql's int) is refused on purpose: MySQL compares a
// YEAR column with 24 as 2024. The binlog follower and the SQL door both use it, so their keys meet.
func ColumnKey(dst []byte, column string, value any) (_ []byte, ok bool) {
	dst = append(append(dst, strings.ToLower(column)...), 0)
	switch v := value.(type) {
	case int8:
		return appendNonNegative(dst, int64(v))
	case int16:
		return appendNonNegative(dst, int64(v))
	case int32:
		return appendNonNegative(dst, int64(v))
	case int64:
		return appendNonNegative(dst, v)
	case uint8:
		return strconv.AppendUint(dst, uint64(v), 10), true
	case uint16:
		return strconv.AppendUint(dst, uint64(v), 10), true
	case uint32:
		return strconv.AppendUint(dst, uint64(v), 10), true
	case uint64:
		return strconv.AppendUint(dst, v, 10), true
	case float64: // a DOUBLE: exact only below 2^53, where every integer has its own double
		if v < 0 || v >= 1<<53 || v != float64(uint64(v)) {
			return dst, false
		}
		return strconv.AppendUint(dst, uint64(v), 10), true
	case string:
		return appendCanonical(dst, v)
	case []byte:
		return appendCanonical(dst, string(v))
	}
	return dst, false
}

// appendNonNegative renders n, refusing a negative one: an unsigned column's large value arrives negative
// without row metadata.
func appendNonNegative(dst []byte, n int64) ([]byte, bool) {
	if n < 0 {
		return dst, false
	}
	return strconv.AppendInt(dst, n, 10), true
}

func appendCanonical(dst []byte, s string) ([]byte, bool) {
	if s == "" || len(s) > 20 || (s[0] == '0' && len(s) > 1) {
		return dst, false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return dst, false
		}
	}
	return append(dst, s...), true
}

// Watches are the table's watched key columns.
func (t *Table) Watches() []KeyWatch {
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Clone(t.watches)
}

// OnSettle registers fn to run before any statement that names the table: it returns once every write its owner
// acknowledged is in the table (or the reason why not).
func (t *Table) OnSettle(fn func() error) {
	t.mu.Lock()
	t.settle = append(t.settle, fn)
	t.mu.Unlock()
}

func (t *Table) settleFuncs() []func() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.settle
}

// Registry holds every table's validity state. The zero Registry is not usable; use NewRegistry.
type Registry struct {
	mu struct {
		sync.RWMutex
		tables map[TableID]*Table
		byName map[string][]*Table // the tables of each name, in every schema
	}
	// byIndex are the tables by Index: appended under mu, the slice's header replaced whole, so TableAt reads
	// it without a lock (an element is written before the header that covers it is published).
	byIndex atomic.Pointer[[]*Table]
	settles atomic.Bool // some table has a settle function: Settle has work to do
	// kindLookup answers Table.Trusted: whether a table is a base table whose writes the binlog names.
	kindLookup atomic.Pointer[func(TableID) (bool, error)]
	// ownWrites counts invalidations by keyway's own writes: container rows (Table.Wrote) and tables the SQL door
	// wrote (Registry.Invalidate).
	ownWrites atomic.Int64

	// gates are the groups' freshness gates (see Gate), replaced whole (under mu) when one is added, so readers
	// load them without the lock.
	gates atomic.Pointer[[]*Gate]

	slotBytes    atomic.Int64 // see SlotBytes
	onSlotsGrown atomic.Pointer[func(total int64)]
	growMu       sync.Mutex // orders slotsGrew's calls
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	r := &Registry{}
	r.mu.tables = make(map[TableID]*Table)
	r.mu.byName = make(map[string][]*Table)
	return r
}

// Table returns the state of table id (which must name its schema), creating it on first use. A table starts at
// tick 1, invalidated: copies left from a previous run (stamp 0) are never valid.
func (r *Registry) Table(id TableID) *Table {
	r.mu.RLock()
	t := r.mu.tables[id]
	r.mu.RUnlock()
	if t != nil {
		return t
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if t = r.mu.tables[id]; t == nil {
		var all []*Table
		if p := r.byIndex.Load(); p != nil {
			all = *p
		}
		t = &Table{id: id, reg: r, index: uint32(len(all))}
		slots := make([]keySlot, keySlots)
		t.slots.Store(&slots)
		t.clock.Store(1)
		t.epoch.Store(1)
		t.rows.Store(1)
		r.mu.tables[id] = t
		r.mu.byName[id.Name] = append(r.mu.byName[id.Name], t)
		all = append(all, t) // past every published length: no reader looks at the slot it writes
		r.byIndex.Store(&all)
		r.slotBytes.Add(keySlots * slotSize) // too little to make the heap's room change for
	}
	return t
}

// TableAt returns the table whose Index is i, or nil when the registry has none: it takes no lock.
func (r *Registry) TableAt(i uint32) *Table {
	p := r.byIndex.Load()
	if p == nil || int(i) >= len(*p) {
		return nil
	}
	return (*p)[i]
}

// OnSettle registers fn on table id; see Table.OnSettle.
func (r *Registry) OnSettle(id TableID, fn func() error) {
	r.Table(id).OnSettle(fn)
	r.settles.Store(true)
}

// Lookup returns the known tables among ids (an ID without schema matches its name in every schema). Tables
// nobody has registered have nothing cached and nothing to settle, so they are left out.
func (r *Registry) Lookup(ids []TableID) []*Table {
	r.mu.RLock()
	defer r.mu.RUnlock()
	var out []*Table
	for _, id := range ids {
		if id.Schema != "" {
			if t := r.mu.tables[id]; t != nil && !slices.Contains(out, t) {
				out = append(out, t)
			}
			continue
		}
		for _, t := range r.mu.byName[id.Name] {
			if !slices.Contains(out, t) {
				out = append(out, t)
			}
		}
	}
	return out
}

// Invalidate records writes of unknown rows to ids by keyway's own SQL door: see Table.Invalidate.
func (r *Registry) Invalidate(ids []TableID) {
	for _, t := range r.Lookup(ids) {
		r.ownWrites.Add(1)
		t.Invalidate()
	}
}

// OwnWrites is how many invalidations keyway's own writes made (see Registry.ownWrites).
func (r *Registry) OwnWrites() int64 { return r.ownWrites.Load() }

// Settle runs the settle functions of ids and returns their errors joined.
func (r *Registry) Settle(ids []TableID) error {
	if !r.settles.Load() {
		return nil
	}
	var errs []error
	for _, t := range r.Lookup(ids) {
		for _, fn := range t.settleFuncs() {
			if err := fn(); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// Known returns the table of id if someone registered it (an ID with schema), else nil.
func (r *Registry) Known(id TableID) *Table {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.mu.tables[id]
}

// InvalidateAll invalidates every copy of every table: the binlog follower lost track of what changed.
func (r *Registry) InvalidateAll() {
	r.mu.RLock()
	tables := make([]*Table, 0, len(r.mu.tables))
	for _, t := range r.mu.tables {
		tables = append(tables, t)
	}
	r.mu.RUnlock()
	for _, t := range tables {
		t.Invalidate()
		t.ForgetKind() // an unparsed statement may have made a table a view
	}
}

// SetKindLookup installs the lookup behind Table.Trusted (a binlog follower's information_schema query).
func (r *Registry) SetKindLookup(fn func(TableID) (trusted bool, err error)) { r.kindLookup.Store(&fn) }

// Voucher is one binlog follower's say on freshness. A group's Gate holds one; RequireVouch hands it out.
type Voucher struct{ freshUntil atomic.Int64 } // Unix nanos

// Vouch records that copies are fresh until until: the follower has applied every commit the server had made at
// some instant, and until is that instant plus max_staleness. An earlier until than one already vouched is ignored.
func (v *Voucher) Vouch(until time.Time) {
	n := until.UnixNano()
	for {
		old := v.freshUntil.Load()
		if old >= n || v.freshUntil.CompareAndSwap(old, n) {
			return
		}
	}
}

// Fresh reports whether this voucher vouches for now.
func (v *Voucher) Fresh() bool { return v != nil && time.Now().UnixNano() < v.freshUntil.Load() }

// GateMode is how a backend group keeps the copies of its tables valid, which decides whether they may be served.
type GateMode int32

const (
	// Unfollowed: nothing sees the group's direct writes (no usable binlog and no invalidate = "ttl" or "none"):
	// copies are not served, reads go to MySQL. A gate starts here, so nothing is served before its group's
	// mode is known.
	Unfollowed GateMode = iota
	// Followed: a binlog follower invalidates; copies are served while it vouches (within max_staleness).
	Followed
	// TTLBounded: invalidate = "ttl"; copies are served and expire after the group's ttl.
	TTLBounded
	// OwnWritesOnly: invalidate = "none"; copies are served and only keyway's own writes refresh them, as the
	// operator chose.
	OwnWritesOnly
)

var gateModeNames = [...]string{Unfollowed: "off", Followed: "binlog", TTLBounded: "ttl", OwnWritesOnly: "none"}

// String is the mode as /metrics, /status and warm restart name it: "binlog", "ttl", "none" or "off".
func (m GateMode) String() string { return gateModeNames[m] }

// Gate is one backend group's freshness gate: whether copies of the group's tables may be served now, and why
// not. Freshness is per group, so one group without a binlog, or one lagging follower, decides only for its own
// tables. Build it with Registry.Gate; the server sets its mode once at start (SetMode, or RequireVouch for a
// group a follower watches). A nil *Gate serves every valid copy (a registry no server configured, as in tests).
// The gate also keeps the group's table positions (NoteCommit, NoteAll, Needs, Newest; see position.go): where a
// group's GTIDs are compared, since they mean nothing to another group.
type Gate struct {
	group   string
	mode    atomic.Int32 // a GateMode
	voucher Voucher
	reason  atomic.Pointer[string] // why copies are not fresh, for an operator; "" while fresh
	pos     positions              // the group's per-table positions (NoteCommit, Needs, Newest)
}

// Group is the backend group the gate is for.
func (g *Gate) Group() string { return g.group }

// SetMode sets how the group's copies are kept valid, and the reason an operator reads when they are not fresh
// (for Unfollowed: why no follower runs, and the fix).
func (g *Gate) SetMode(m GateMode, reason string) {
	g.reason.Store(&reason)
	g.mode.Store(int32(m))
}

// Mode is the gate's mode.
func (g *Gate) Mode() GateMode { return GateMode(g.mode.Load()) }

// Serves reports whether copies of the group's tables may be served now (true for a nil gate): Vouches, and also
// for invalidate = "none", whose copies the operator chose to keep.
func (g *Gate) Serves() bool {
	return g.Vouches() || GateMode(g.mode.Load()) == OwnWritesOnly
}

// Vouches reports whether the SQL result cache may serve and fill replies of the group's tables now: its follower
// vouches for them, or they carry a ttl (true for a nil gate). Unlike Serves it is false for invalidate =
// "none": that mode keeps caching containers' copies, as the operator chose for them, while the result cache
// keeps no reply that only keyway's own writes would refresh.
func (g *Gate) Vouches() bool {
	if g == nil {
		return true
	}
	switch GateMode(g.mode.Load()) {
	case Followed:
		return g.voucher.Fresh()
	case TTLBounded:
		return true
	}
	return false
}

// Restorable reports whether a warm restart may put saved copies of the group's tables back: a follower will
// vouch for them (replaying what was committed since they were saved), or they carry their own expiry (ttl).
// Copies that nothing keeps valid are not restored, even for invalidate = "none": keyway was not running to see
// its own writes.
func (g *Gate) Restorable() bool {
	if g == nil {
		return true
	}
	m := GateMode(g.mode.Load())
	return m == Followed || m == TTLBounded
}

// GateStatus is a gate as /status, SHOW KEYWAY CACHE and the dashboard show it.
type GateStatus struct {
	Group   string `json:"group"`
	Mode    string `json:"mode"`    // GateMode.String
	Fresh   bool   `json:"fresh"`   // a follower vouches: copies reflect every commit up to max_staleness ago
	Serving bool   `json:"serving"` // copies are served (fresh, or bounded by ttl, or none chosen)
	Reason  string `json:"reason,omitempty"`
}

// Status is the gate now.
func (g *Gate) Status() GateStatus {
	m := GateMode(g.mode.Load())
	st := GateStatus{Group: g.group, Mode: m.String(), Fresh: m == Followed && g.voucher.Fresh(), Serving: g.Serves()}
	if !st.Fresh {
		if r := g.reason.Load(); r != nil {
			st.Reason = *r
		}
		if m == Followed {
			st.Reason = "the binlog follower is disconnected or further behind than max_staleness: reads go to MySQL until it catches up"
		}
	}
	return st
}

// Gate returns group's gate, creating it (Unfollowed, serving nothing) on first use.
func (r *Registry) Gate(group string) *Gate {
	r.mu.Lock()
	defer r.mu.Unlock()
	if g := r.findGate(group); g != nil {
		return g
	}
	old := r.gates.Load()
	g := &Gate{group: group}
	g.SetMode(Unfollowed, "no binlog follower has started for this group yet")
	var gs []*Gate
	if old != nil {
		gs = slices.Clone(*old)
	}
	gs = append(gs, g)
	r.gates.Store(&gs)
	return g
}

// LookupGate returns group's gate, or nil when nobody made one (a registry no server configured: nil serves).
func (r *Registry) LookupGate(group string) *Gate { return r.findGate(group) }

func (r *Registry) findGate(group string) *Gate {
	for _, g := range r.Gates() {
		if g.group == group {
			return g
		}
	}
	return nil
}

// Gates are the registry's gates, in the order they were made.
func (r *Registry) Gates() []*Gate {
	if gs := r.gates.Load(); gs != nil {
		return *gs
	}
	return nil
}

// RequireVouch makes group's gate Followed and returns its voucher: from now on the group's copies are served
// only while the voucher vouches for them. Call it before serving; until the voucher's first Vouch nothing of
// the group's is served from copies.
func (r *Registry) RequireVouch(group string) *Voucher {
	g := r.Gate(group)
	g.SetMode(Followed, "")
	return &g.voucher
}

// Vouched reports whether every group's copies may be served now (true with no gate): the registry's freshness as
// one figure (tests, a status line); a cache decides by its group's Gate.
func (r *Registry) Vouched() bool {
	for _, g := range r.Gates() {
		if !g.Serves() {
			return false
		}
	}
	return true
}
