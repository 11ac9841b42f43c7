package engine

import (
	"github.com/keywaydb/keyway/internal/container"
	"github.com/keywaydb/keyway/internal/rowcache"
)

// Access is what a command does with its key, as far as MayWait needs to know.
type Access uint8

const (
	AccessRead  Access = iota // get, gets, one key of a multi-get, a binary get
	AccessSet                 // a plain set: no cas, no meta flags
	AccessOther               // any other command on the key (meta commands included)
)

// MayWait reports whether a command that does a on key may wait for something other than its client and the local
// store: a container's table (MySQL), its group commit, a read of the row another command has in flight, the
// write-behind queue's room. The memcache door's event loops hand such a command to a goroutine of its own, so one
// connection's round trip to MySQL does not hold up the loop's other connections.
//
// False is a guess about the moment of the call, made cheaply: for a read, a valid local copy of the row, which an
// eviction or an invalidation may take away before the read runs (the read then goes to the table on the loop: right,
// only slower for the loop's other connections); for a set on a write = "async" container, room to spare in its
// queue (Queue.Roomy: while the table is down or behind, sets stop being answered on a loop long before one would
// wait for room). True errs on the side of waiting: the command may well be answered at once.
func (e *Engine) MayWait(key []byte, a Access) bool {
	t, row, err := e.route(key)
	if err != nil || t == nil {
		return false // no container: the local store answers, or the door answers the error
	}
	switch a {
	case AccessRead:
		if t.Policies.Get == container.CacheOnly {
			return false
		}
		if t.Policies.Get != container.Caching {
			return true
		}
		_, found := t.rows.Held(row, rowcache.Peek)
		return found != rowcache.Hit
	case AccessSet:
		switch {
		case t.Policies.Set == container.CacheOnly:
			return false
		case t.Behind != nil && t.Policies.Set != container.Disabled:
			// Queued and journaled (see writeBehind): a set waits only for room, which a roomy queue has.
			return !t.Behind.Roomy()
		}
		return true
	}
	p := t.Policies
	return p.Get != container.CacheOnly || p.Set != container.CacheOnly || p.Delete != container.CacheOnly
}
