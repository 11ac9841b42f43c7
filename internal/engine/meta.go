package engine

import (
	"strconv"
	"sync/atomic"

	"github.com/keywaydb/keyway/internal/store"
)

// Meta protocol semantics: memcached 1.6's mg, ms, md, ma and me. The door
// parses flags and encodes replies; what the flags do to an item happens here,
// each command in one store.Update so it is atomic per key.
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
	it, err := e.st.Update(key, func(cur *store.Item) (store.Action, store.Item) {
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
	})
	if res.Created {
		res.Item = it
		res.Item.Fetched, res.Item.LastAccess = false, res.Now
	}
	if r.SetTTL {
		e.counters.CmdTouch.Add(1)
		count(res.Found, &e.counters.TouchHits, &e.counters.TouchMisses)
	} else {
		// As memcached, a vivified miss counts as a hit.
		e.counters.CmdGet.Add(1)
		count(res.Found, &e.counters.GetHits, &e.counters.GetMisses)
	}
	return res, err
}

// MetaSetRequest describes an ms.
type MetaSetRequest struct {
	Mode       Mode   // M: Set (default), Add, Replace, Append or Prepend
	Flags      uint32 // F: client flags
	TTL        int64  // T: memcached exptime; 0 never expires
	CompareCAS bool   // C given: Set and Replace become a cas
	CAS        uint64 // C: the CAS id to compare
	NewCAS     uint64 // E: CAS id for the stored item; 0 assigns one
	Invalidate bool   // I: a cas with an older CAS id stores the value as stale
	Vivify     bool   // N: Append and Prepend store on a miss
	VivifyTTL  int64  // the exptime of an item Vivify creates
}

// MetaSet stores value for ms. It returns Stored, NotStored, Exists or
// NotFound, and on Stored the new item. As memcached does, a C with Add, or
// with Append and Prepend on a miss, compares nothing, and C0 never matches.
func (e *Engine) MetaSet(key, value []byte, r MetaSetRequest) (Status, store.Item, error) {
	sp, k, err := e.space(key, classMeta)
	if err != nil {
		return Failed, store.Item{}, err
	}
	return sp.metaSet(e, k, value, r)
}

func (sp localSpace) metaSet(e *Engine, key, value []byte, r MetaSetRequest) (Status, store.Item, error) {
	// As memcached's ms does, a value too large drops the old one whatever the mode.
	if e.refuseTooLarge(sp, key, Set, int64(len(value))) {
		return TooLarge, store.Item{}, nil
	}
	e.counters.CmdSet.Add(1)
	casMode := r.CompareCAS && (r.Mode == Set || r.Mode == Replace)
	deadline := e.Deadline(r.TTL)
	status := Stored
	it, err := e.st.Update(key, func(cur *store.Item) (store.Action, store.Item) {
		next := store.Item{Value: value, Flags: r.Flags, Exptime: deadline, CAS: r.NewCAS}
		if cur == nil {
			switch {
			case casMode:
				status = NotFound
			case r.Mode == Replace:
				status = NotStored
			case r.Mode == Append || r.Mode == Prepend:
				if !r.Vivify {
					status = NotStored
				}
				next.Exptime = e.Deadline(r.VivifyTTL)
			}
			if status != Stored {
				return store.Keep, store.Item{}
			}
			return store.Replace, next
		}
		switch {
		case casMode:
			switch {
			case r.CAS != 0 && r.CAS == cur.CAS:
			case r.Invalidate && r.CAS != 0 && r.CAS < cur.CAS:
				// An older writer may still store, but its value stays
				// stale, keeps the TTL and any win already handed out.
				next.Exptime, next.Stale, next.WinSent = cur.Exptime, true, cur.WinSent
			default:
				status = Exists
			}
		case r.Mode == Add:
			status = NotStored
		case r.Mode == Append || r.Mode == Prepend:
			switch {
			case r.CompareCAS && r.CAS != 0 && r.CAS != cur.CAS:
				status = Exists
			case int64(len(cur.Value)+len(value)) > e.maxItemSize:
				status = NotStored
			default:
				next = store.Item{Value: joinValues(r.Mode, cur.Value, value), Flags: cur.Flags, Exptime: cur.Exptime, CAS: r.NewCAS}
			}
		}
		if status != Stored {
			return store.Keep, store.Item{}
		}
		return store.Replace, next
	})
	if casMode {
		e.countCAS(status)
	}
	if err != nil {
		return storeErrorStatus(err), store.Item{}, err
	}
	if status != Stored {
		return status, store.Item{}, nil
	}
	return status, it, nil
}

// MetaDeleteRequest describes an md.
type MetaDeleteRequest struct {
	CompareCAS bool   // C given: delete only the version with CAS (C0 never matches)
	CAS        uint64 // C
	Invalidate bool   // I: mark the item stale (and give it a new CAS id) instead of removing it
	SetTTL     bool   // T, with I: give the stale item a new exptime
	TTL        int64
	NewCAS     uint64 // E, with I: the CAS id of the stale item; 0 assigns one
}

// MetaDelete removes or invalidates key for md. It returns Deleted (for
// either), NotFound or Exists.
func (e *Engine) MetaDelete(key []byte, r MetaDeleteRequest) (Status, error) {
	sp, k, err := e.space(key, classMeta)
	if err != nil {
		return Failed, err
	}
	return sp.metaDelete(e, k, r)
}

func (localSpace) metaDelete(e *Engine, key []byte, r MetaDeleteRequest) (Status, error) {
	ttl := e.Deadline(r.TTL)
	status := Deleted
	_, err := e.st.Update(key, func(cur *store.Item) (store.Action, store.Item) {
		switch {
		case cur == nil:
			status = NotFound
			return store.Keep, store.Item{}
		case r.CompareCAS && cur.CAS != r.CAS:
			status = Exists
			return store.Keep, store.Item{}
		case !r.Invalidate:
			return store.Remove, store.Item{}
		}
		if r.SetTTL {
			cur.Exptime = ttl
		}
		// A new version: the next reader wins the right to recache it.
		cur.Stale, cur.WinSent, cur.CAS = true, false, r.NewCAS
		return store.Save, store.Item{}
	})
	switch {
	case status == Deleted && !r.Invalidate:
		e.counters.DeleteHits.Add(1)
	case status != Deleted:
		e.counters.DeleteMisses.Add(1)
	}
	if err != nil {
		return Failed, err
	}
	return status, nil
}

// MetaArithRequest describes an ma.
type MetaArithRequest struct {
	Decr      bool   // M: decrement instead of increment
	Delta     uint64 // D: the door defaults it to 1
	Initial   uint64 // J: value of an item Vivify creates
	Vivify    bool   // N: create the item on a miss
	VivifyTTL int64
	SetTTL    bool // T: give the item a new exptime on success
	TTL       int64
	CAS       uint64 // C: when non-zero, must match the item's CAS id
	NewCAS    uint64 // E: CAS id of the changed item; 0 assigns one
}

// MetaArithResult is the outcome of an ma.
type MetaArithResult struct {
	Status      Status // Stored, NotFound, Exists, NonNumeric, NoMemory or Failed
	Value       uint64 // the new number (the initial one when created)
	Item        store.Item
	Created     bool
	PrevExptime int64 // the exptime before this request changed it; 0 when created
	Now         int64 // the engine's clock when the command ran, Unix seconds
}

// MetaArith increments or decrements key for ma, as incr/decr do, with
// memcached's meta additions: create on a miss, compare and set CAS ids, and
// set the TTL.
func (e *Engine) MetaArith(key []byte, r MetaArithRequest) (MetaArithResult, error) {
	res := MetaArithResult{Status: Stored, Now: e.st.Now()}
	sp, k, err := e.space(key, classMeta)
	if err != nil {
		res.Status = Failed
		return res, err
	}
	return sp.metaArith(e, k, r, res)
}

func (localSpace) metaArith(e *Engine, key []byte, r MetaArithRequest, res MetaArithResult) (MetaArithResult, error) {
	ttl := e.Deadline(r.TTL)
	it, err := e.st.Update(key, func(cur *store.Item) (store.Action, store.Item) {
		if cur == nil {
			if !r.Vivify {
				res.Status = NotFound
				return store.Keep, store.Item{}
			}
			res.Created, res.Value = true, r.Initial
			next := store.Item{Value: strconv.AppendUint(nil, r.Initial, 10), Exptime: e.Deadline(r.VivifyTTL), CAS: r.NewCAS}
			if r.SetTTL {
				next.Exptime = ttl
			}
			return store.Replace, next
		}
		res.PrevExptime = cur.Exptime
		if len(cur.Value) > 0 && r.CAS != 0 && cur.CAS != r.CAS {
			res.Status = Exists
			return store.Keep, store.Item{}
		}
		v, n, ok := addDelta(cur.Value, r.Delta, r.Decr)
		if !ok {
			res.Status = NonNumeric
			return store.Keep, store.Item{}
		}
		res.Value = n
		next := store.Item{Value: v, Flags: cur.Flags, Exptime: cur.Exptime, CAS: r.NewCAS}
		if r.SetTTL {
			next.Exptime = ttl
		}
		return store.Replace, next
	})
	switch {
	case res.Created:
	case res.Status == Stored:
		count(!r.Decr, &e.counters.IncrHits, &e.counters.DecrHits)
	case res.Status == NotFound:
		count(!r.Decr, &e.counters.IncrMisses, &e.counters.DecrMisses)
	}
	if err != nil {
		res.Status = storeErrorStatus(err)
		return res, err
	}
	res.Item = it
	return res, nil
}

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
