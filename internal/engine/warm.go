package engine

// Warm restart of caching containers' copies (package warm keeps the snapshot): SaveCopies lists the copies that
// are valid now, RestoreCopy puts one back as a fill would, under a stamp taken before the binlog followers
// replay from the checkpoint saved with it (see package rowcache). A copy is restored only into a container of the
// same name and the same definition (table, columns, separator): the copy's value is the definition's rendering of
// the row.

import (
	"fmt"
	"strings"

	"github.com/keywaydb/keyway/internal/container"
	"github.com/keywaydb/keyway/internal/store"
)

// SavedCopy is one cached row of a caching container.
type SavedCopy struct {
	Container string
	Key       string // the local store's key ("@@name." and the normalized row key)
	Item      store.Item
}

// ContainerShape identifies what a container's copies look like: a copy saved under one shape is restored only
// into a container of the same shape.
func (t *Table) ContainerShape() string { return fmt.Sprintf("%#v", t.C.Def()) }

// SaveCopies calls fn with every valid copy of a caching container's row whose group could restore it
// (validity.Gate.Restorable). Take the binlog checkpoints that will vouch for them before calling it.
func (e *Engine) SaveCopies(fn func(SavedCopy)) {
	if len(e.tables) == 0 {
		return
	}
	e.st.Walk(func(key string, it store.Item) bool {
		if !it.Ephemeral || !strings.HasPrefix(key, JournalPrefix) {
			return true
		}
		name, _, ok := strings.Cut(key[len(JournalPrefix):], ".")
		if t := e.tables[name]; ok && t != nil && t.rows.Saveable(key, it) {
			fn(SavedCopy{Container: name, Key: key, Item: it})
		}
		return true
	})
}

// CopyStamp is the stamp a copy of container name must be restored under (the table's stamp now), or false when
// no caching container has that name. Until CopiesRestored, the container counts as filling (see
// rowcache.Cache.HoldsRow): the copies it will restore carry this stamp, so a change the followers replay meanwhile
// must invalidate its key even though no copy is there yet.
func (e *Engine) CopyStamp(name string) (uint64, bool) {
	t := e.tables[name]
	if t == nil || t.Policies.Get != container.Caching {
		return 0, false
	}
	e.restoreMu.Lock()
	e.restoring = append(e.restoring, t)
	e.restoreMu.Unlock()
	return t.rows.BeginFill(), true
}

// CopiesRestored ends what CopyStamp began: call it once the restore is over, whether it restored anything or not.
func (e *Engine) CopiesRestored() {
	e.restoreMu.Lock()
	defer e.restoreMu.Unlock()
	for _, t := range e.restoring {
		t.rows.EndFill()
	}
	e.restoring = nil
}

// RestoreCopy stores a saved copy, stamped at stamp (CopyStamp, taken before the binlog followers started), unless
// its row was invalidated since or its group's gate will not vouch for it (validity.Gate.Restorable: no follower
// and no ttl). It reports whether the copy was stored.
func (e *Engine) RestoreCopy(c SavedCopy, stamp uint64) bool {
	t := e.tables[c.Container]
	return t != nil && t.rows.Restore(c.Key, c.Item, stamp)
}
