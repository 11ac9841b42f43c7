package engine

import "github.com/keywaydb/keyway/internal/container"

// Access is what a command does with its key, as far as MayWait needs to know.
type Access uint8

const (
	AccessSet   Access = iota // a plain set: no cas, no meta flags
	AccessOther               // any other command on the key (meta commands included; gets tell a Waiter instead)
)

// MayWait reports whether a command that does a on key may wait for something other than its client and the local
// store: a container's table (MySQL), its group commit, the write-behind queue's room. The memcache door's event
// loops hand such a command to a goroutine of its own, so one connection's round trip to MySQL does not hold up the
// loop's other connections.
//
// Reads do not ask: they tell a Waiter when they are about to wait (GetTallied), having looked their copy up once.
//
// False is a guess about the moment of the call, made cheaply: for a set on a write = "async" container, room to
// spare in its queue (Queue.Roomy: while the table is down or behind, sets stop being answered on a loop long before
// one would wait for room). True errs on the side of waiting: the command may well be answered at once.
func (e *Engine) MayWait(key []byte, a Access) bool {
	t, _, err := e.route(key)
	if err != nil || t == nil {
		return false // no container: the local store answers, or the door answers the error
	}
	switch a {
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

// A Waiter is told before a read waits on more than the local store (a container's table, its queue: MySQL), so a
// caller that must not wait there steps aside first: the memcache door's connection on an event loop. A read that
// needs MySQL tells it before it waits, perhaps more than once (a multi-get, once per container that needs its
// table): the calls after the first must change nothing. A read answered from the local store (a valid held copy,
// a key of no container) never tells it, so its key is routed and its copy looked up once, whether it waits or not.
type Waiter interface{ WillWait() }

// tell tells w, if there is one, that the read will wait.
func tell(w Waiter) {
	if w != nil {
		w.WillWait()
	}
}
