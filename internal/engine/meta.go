package engine

import (
	"sync/atomic"

	"github.com/keywaydb/keyway/internal/store"
)

// Meta protocol semantics: memcached 1.6's mg, ms, md, ma and me. The door
// parses flags and encodes replies; what the flags do to an item happens here,
// each command in one store.Update so it is atomic per key. mg is its own
// routine (the win tokens); ms, md and ma share the classic commands'.
//
// Stampede protection uses volatile fields of store.Item:
//   - Stale: the item was invalidated (md with I, or ms with I and an older
//     CAS) and is served only until someone recaches it.
//   - WinSent: a client was told it won the right to recache (W); later
//     readers are told a token is out (Z).
//   - Fetched, LastAccess: what mg's h and l report.
//
// Any ordinary store replaces the item and so clears all of them. mg changes
// the volatile fields in place without a Save: they are never persisted.
//
// Request exptimes (T, N, R) are memcached wire values, turned into deadlines
// with Deadline like every other exptime.

// MetaGetRequest is what an mg asks beyond reading the item.
type MetaGetRequest struct {
	NoUpdate bool // u: leave Fetched and LastAccess as they are

	SetTTL bool  // T: give the item a new exptime
	TTL    int64 // its memcached exptime

	Vivify    bool  // N: on a miss create an empty item, and this client wins
	VivifyTTL int64 // the created item's exptime

	Recache    bool  // R: win when the item expires sooner than RecacheTTL
	RecacheTTL int64 // a memcached exptime

	NewCAS uint64 // E: CAS id for an item this request creates; 0 assigns one

	// Tally, when not nil, counts a get (no T) instead of the engine's
	// counters (see Tally); the caller publishes it.
	Tally *Tally
	// Waiter, when not nil, is told before a get (no T) waits on MySQL (see Waiter).
	Waiter Waiter
	// Into, when not nil, gives the memory a local item's value is copied to (see GetTalliedInto).
	Into store.ValueBuf
}

// MetaGetResult is the item an mg found or created, and what to tell the client.
type MetaGetResult struct {
	// Item is the item after the command, except that Fetched and
	// LastAccess are as they were before this access (mg h and l).
	Item        store.Item
	Found       bool  // false is a miss (EN)
	Created     bool  // the item was vivified by this request
	PrevExptime int64 // the exptime before this request changed it; 0 when created
	Won         bool  // W: this client should recache the item
	TokenSent   bool  // Z: a W had already been handed out for this item
	Now         int64 // the engine's clock when the command ran, Unix seconds
}

// MetaGet reads key for mg, applying T, N and R, and decides who recaches: the
// creator of a vivified item, the first reader of a stale item, or the first
// reader under R.
func (e *Engine) MetaGet(key []byte, r MetaGetRequest) (MetaGetResult, error) {
	res := MetaGetResult{Now: e.st.Now()}
	sp, k, err := e.space(key, classMeta)
	if err != nil {
		return res, err
	}
	return sp.metaGet(e, k, r, res)
}

func (localSpace) metaGet(e *Engine, key []byte, r MetaGetRequest, res MetaGetResult) (MetaGetResult, error) {
	ttl, vivify, recache := e.Deadline(r.TTL), e.Deadline(r.VivifyTTL), e.Deadline(r.RecacheTTL)
	it, err := e.st.UpdateInto(key, func(cur *store.Item) (store.Action, store.Item) {
		if cur == nil {
			if !r.Vivify {
				return store.Keep, store.Item{}
			}
			res.Found, res.Created, res.Won = true, true, true
			next := store.Item{Value: []byte{}, Exptime: vivify, CAS: r.NewCAS, WinSent: true, Fetched: !r.NoUpdate}
			if r.SetTTL {
				next.Exptime = ttl
			}
			return store.Replace, next
		}
		res.Found = true
		res.PrevExptime = cur.Exptime
		res.TokenSent = cur.WinSent
		if !cur.WinSent && (cur.Stale || r.Recache && cur.Exptime != 0 && cur.Exptime < recache) {
			res.Won = true
		}
		action := store.Keep
		if r.SetTTL {
			cur.Exptime = ttl
			action = store.Save
		}
		res.Item = *cur
		if res.Won {
			cur.WinSent = true
		}
		if !r.NoUpdate {
			cur.Fetched = true
			cur.LastAccess = res.Now
		}
		return action, store.Item{}
	}, r.Into)
	if res.Created {
		res.Item = it
		res.Item.Fetched, res.Item.LastAccess = false, res.Now
	} else if res.Found {
		// fn's copy of the item has the store's own bytes for a value, valid only under its lock; the value is
		// unchanged, and it is Update's copy.
		res.Item.Value = it.Value
	}
	if r.SetTTL {
		e.counters.CmdTouch.Add(1)
		count(res.Found, &e.counters.TouchHits, &e.counters.TouchMisses)
	} else {
		// As memcached, a vivified miss counts as a hit.
		e.countGet(r.Tally, res.Found)
	}
	return res, err
}

// ms, md and ma are the classic commands' requests (StoreRequest,
// DeleteRequest, Arith) run by the same routines, as memcached runs them:
// see MetaSet, MetaDelete and MetaArith in engine.go.

// MetaDebug returns key's item for me without marking it used, the bytes it
// is charged against the memory limit, and the engine's clock.
func (e *Engine) MetaDebug(key []byte) (it store.Item, size, now int64, ok bool) {
	now = e.st.Now()
	sp, k, err := e.space(key, classMeta)
	if err != nil {
		return it, 0, now, false
	}
	key = sp.localKey(k) // a table row: its local copy, if any
	it, ok = e.st.Peek(key)
	return it, store.Size(len(key), len(it.Value)), now, ok
}

// count adds one to yes or to no.
func count(cond bool, yes, no *atomic.Int64) {
	if cond {
		yes.Add(1)
	} else {
		no.Add(1)
	}
}
