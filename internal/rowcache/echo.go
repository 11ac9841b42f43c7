package rowcache

import (
	"bytes"
	"sync"

	"github.com/keywaydb/keyway/internal/container"
	"github.com/keywaydb/keyway/internal/store"
	"github.com/keywaydb/keyway/internal/validity"
)

// HoldsRow reports whether this cache can let a change of the row keyed vk (a validity key: the normalized row key),
// imaged by img, pass without invalidating the key (it is validity.KeyWatch.Holds):
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
// A copy whose life CopyTTL bounds carries an expiry the row does not have, so such a cache never lets a change
// pass. The table's other caches are judged by their own watches.
func (c *Cache) HoldsRow(vk []byte, img validity.RowImage, first bool) (holds, settled bool) {
	if c.CopyTTL > 0 || !c.caching {
		return false, false
	}
	row, known := c.c.FromImage(img.Value) // known: keyway can tell what a read of the row returns
	// The follower asks this for every row it sees written: the store key is built on the stack when it fits.
	var buf [128]byte
	cur, found := c.st.Peek(append(append(buf[:0], c.prefix...), vk...))
	valid := found && c.v.KeyValid(vk, cur.Tag)
	if known && valid && sameRow(cur, row, true) {
		return true, first && c.filling.Load() == 0 && !c.writing.any(vk)
	}
	switch c.writing.leaves(vk, row, known) {
	case leavesRow:
		return first, false
	case leavesOther:
		return false, false
	}
	holds = !valid && c.filling.Load() == 0
	return holds, holds && first
}

// Settling is the count HoldsRow's settled answers rely on (validity.KeyWatch.Settling).
func (c *Cache) Settling() uint64 { return c.settling.Load() }

// BeginFill counts a read (or a warm restart's restore) that may store a copy under a stamp taken from now on, and
// returns the stamp now: in filling until EndFill, and in settling (see HoldsRow). filling first: the follower reads
// settling before it looks at filling, so a start it does not find in filling has moved settling.
func (c *Cache) BeginFill() (stamp uint64) {
	c.filling.Add(1)
	c.settling.Add(1)
	return c.v.Stamp()
}

// EndFill ends what BeginFill began, once the copy is stored or refused.
func (c *Cache) EndFill() { c.filling.Add(-1) }

// StartWrite counts a write of row that will store the row it leaves (want, as a read would return it; CAS 0 when
// the committer assigns it): in writing until done (see ownWrites.begin), and in settling (see HoldsRow). writing
// first, for the reason BeginFill counts filling first. Call it before the write is sent: the binlog may echo the
// write before it returns.
func (c *Cache) StartWrite(row []byte, want container.Item) (done func()) {
	done = c.writing.begin(c.c.AppendNormKey(nil, row), want)
	c.settling.Add(1)
	return done
}

// sameRow reports whether a copy is the row a read returns; withCAS says whether to compare CAS too.
func sameRow(copy store.Item, row container.Item, withCAS bool) bool {
	return bytes.Equal(copy.Value, row.Value) && copy.Flags == row.Flags && copy.Exptime == row.Exptime &&
		(!withCAS || copy.CAS == row.CAS)
}

// ownWrites are a cache's writes of rows that are on their way to the table and not yet settled in the local
// copy, by validity key, with the row each leaves (see HoldsRow).
type ownWrites struct {
	mu sync.Mutex
	m  map[string]*ownWrite
}

type ownWrite struct {
	row container.Item // its CAS is 0 when not known yet (see StartWrite)
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
	case known && o.n == 1 && sameRow(FromRow(o.row), row, o.row.CAS != 0):
		return leavesRow
	}
	return leavesOther
}
