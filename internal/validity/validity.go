// Package validity is the one place that decides whether a cached copy of table data may still be served. It owns
// three things, and imports none of the packages that use them (engine, sqlproxy, and next the SQL result cache
// and the binlog follower import it):
//
//   - Table identity. A table is a TableID, schema and name in lower case. The SQL naming rule lives here alone:
//     an unqualified name means that table in the statement's default database, and with no default database it
//     matches the table of that name in every schema (the statement would fail on the server, but keyway errs
//     on the side of invalidating). Resolve applies the rule; callers keep its result per (digest, default
//     database), so no statement pays for string folding.
//   - Generations. Each Table has an epoch, bumped when every cached copy of the table must go at once (a write
//     whose rows are not known), and a generation per key where the key is known: keys hash onto a fixed set of
//     slots, and a write of a key bumps its slot (two keys sharing a slot only cost each other a discarded
//     fill, never a stale one). The rule every cache follows: read the key's Gen and the Epoch before asking the
//     backend, and store what came back only if both are unchanged, checked under the lock that also guards the
//     cache entry, so an invalidation can never slip between the check and the store. A cached copy carries the
//     epoch it was filled in and is valid only while that is still the table's Epoch.
//   - Settling. A component that acknowledges writes before they reach the table (a write-behind queue)
//     registers a settle function; Settle runs them before a statement that names the table, so the statement
//     sees, and acts after, every write keyway acknowledged.
//
// Invariants: Gen and Epoch only grow; a Table, once created, is never replaced, so a *Table may be kept (on a
// plan, on a container) for the registry's life.
package validity

import (
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
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

// keySlots is how many per-key generations a table keeps: enough that concurrent fills of different keys
// rarely share one, small enough (8 KiB) to keep for every table.
const keySlots = 1024

// Table is the validity state of one table.
type Table struct {
	id    TableID
	epoch atomic.Uint64
	// slots are the per-key generations, indexed by a hash of the key as the table compares keys.
	slots [keySlots]atomic.Uint64

	settleMu sync.Mutex
	settle   []func() error
}

// ID is the table's identity.
func (t *Table) ID() TableID { return t.id }

// Gen is the generation of key (as the table's key column compares keys: normalized by the caller): read it
// before a fill's query, compare it before storing the fill.
func (t *Table) Gen(key []byte) uint64 { return t.slots[slot(key)].Load() }

// Epoch is the table's epoch: a cached copy is valid only while it carries the current epoch.
func (t *Table) Epoch() uint64 { return t.epoch.Load() }

// Wrote records a write of key whose cached copy the writer removes itself: fills of key that started before
// it are not stored. It returns key's new generation.
func (t *Table) Wrote(key []byte) uint64 { return t.slots[slot(key)].Add(1) }

// Invalidate records a write whose rows are not known: every cached copy of the table is invalid, and fills in
// flight are not stored (they compare the epoch too).
func (t *Table) Invalidate() { t.epoch.Add(1) }

// slot is key's generation slot: FNV-1a, inlined so a fill allocates nothing.
func slot(key []byte) int {
	h := uint32(2166136261)
	for _, b := range key {
		h = (h ^ uint32(b)) * 16777619
	}
	return int(h % keySlots)
}

// OnSettle registers fn to run before any statement that names the table: it returns once every write its owner
// acknowledged is in the table (or the reason why not).
func (t *Table) OnSettle(fn func() error) {
	t.settleMu.Lock()
	t.settle = append(t.settle, fn)
	t.settleMu.Unlock()
}

func (t *Table) settleFuncs() []func() error {
	t.settleMu.Lock()
	defer t.settleMu.Unlock()
	return t.settle
}

// Registry holds every table's validity state. The zero Registry is not usable; use NewRegistry.
type Registry struct {
	mu struct {
		sync.RWMutex
		tables map[TableID]*Table
		byName map[string][]*Table // the tables of each name, in every schema
	}
	settles atomic.Bool // some table has a settle function: Settle has work to do
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	r := &Registry{}
	r.mu.tables = make(map[TableID]*Table)
	r.mu.byName = make(map[string][]*Table)
	return r
}

// Table returns the state of table id (which must name its schema), creating it on first use. Epochs start at
// 1: copies left from a previous run (epoch 0) are never valid.
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
		t = &Table{id: id}
		t.epoch.Store(1)
		r.mu.tables[id] = t
		r.mu.byName[id.Name] = append(r.mu.byName[id.Name], t)
	}
	return t
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

// Invalidate records writes of unknown rows to ids: see Table.Invalidate.
func (r *Registry) Invalidate(ids []TableID) {
	for _, t := range r.Lookup(ids) {
		t.Invalidate()
	}
}

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
