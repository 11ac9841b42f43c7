package engine

import (
	"strconv"

	"github.com/keywaydb/keyway/internal/container"
	"github.com/keywaydb/keyway/internal/store"
)

// Key spaces: every memcache key lives in exactly one key space for each
// class of operation, and each command resolves its key once (Engine.space)
// and then runs in that space. Nothing else branches on where a key lives.
//
//   - localSpace is the local store: keys without a container (or all keys,
//     with no containers configured), and the keys of a container whose policy
//     for the operation class is cache_only, under the container's prefix
//     "@@name." so containers stay apart. The store item is the truth.
//   - tableSpace is a container's table: the policy, the container, the cached
//     copy of each row in the local store (caching) and the write-behind queue
//     (write = "async"). The row is the truth; see tables.go for the rules
//     (single-flight fills, the generation check, write-behind ordering).
//
// A later sharded table is a third implementation: the shard is found from
// the key inside the space, not by the engine.
//
// Invariants:
//   - The class decides the space: get for reads, set for storage commands,
//     touch, gat and incr/decr, delete for delete, and meta for the meta
//     commands, which stay local only when a container's get, set and delete
//     policies are all cache_only. A table space running a meta command runs
//     it as the classic command it amounts to, resolved again under that
//     command's class (so mixed policies behave as the classic commands do).
//   - The k a space gets is its own key: the store key for localSpace (the
//     prefix already applied), the row key for tableSpace.
//   - Spaces are long-lived values (localSpace{} or a pointer held by its
//     Container), so resolving a key allocates nothing beyond the local key's prefix.
//   - Counters counted before the space is known (cmd_get, cmd_set,
//     cmd_touch) are the engine's; hits and misses are counted where the old
//     single-path code counted them, so stats are unchanged.
type keySpace interface {
	get(e *Engine, k []byte) (store.Item, bool, error)
	// getMany answers keys[i] for each i in idx into items and found (a
	// multi-get's share in this space), with as few round trips as it can.
	getMany(e *Engine, idx []int, keys [][]byte, items []store.Item, found []bool) error
	getAndTouch(e *Engine, k []byte, exptime int64) (store.Item, bool, error)
	store(e *Engine, mode Mode, k, value []byte, flags uint32, deadline int64, cas uint64) (Status, uint64, error)
	delete(e *Engine, k []byte, cas uint64) (Status, error)
	touch(e *Engine, k []byte, exptime int64) (store.Item, Status, error)
	incrDecr(e *Engine, k []byte, a Arith) (uint64, uint64, Status, error)
	metaGet(e *Engine, k []byte, r MetaGetRequest, res MetaGetResult) (MetaGetResult, error)
	metaSet(e *Engine, k, value []byte, r MetaSetRequest) (Status, store.Item, error)
	metaDelete(e *Engine, k []byte, r MetaDeleteRequest) (Status, error)
	metaArith(e *Engine, k []byte, r MetaArithRequest, res MetaArithResult) (MetaArithResult, error)
	// localKey is the local store key of what this space keeps of k: the
	// item itself, or a row's cached copy (me shows it; a refused set drops it).
	localKey(k []byte) []byte
}

// opClass is the class of operation whose policy picks the key space.
type opClass uint8

const (
	classGet    opClass = iota // get, gets, multi-get
	classSet                   // storage commands, touch, gat, incr/decr
	classDelete                // delete
	classMeta                  // mg, ms, md, ma, me
)

// space resolves key for an operation of class: its key space and the key
// within it. The error names a missing container.
func (e *Engine) space(key []byte, class opClass) (keySpace, []byte, error) {
	t, row, err := e.route(key)
	switch {
	case err != nil:
		return nil, nil, err
	case t == nil:
		return localSpace{}, key, nil
	}
	sp, k := t.spaceFor(class, row)
	return sp, k, nil
}

// spaceFor is the key space of row under t's policy for class.
func (t *Container) spaceFor(class opClass, row []byte) (keySpace, []byte) {
	var local bool
	switch class {
	case classGet:
		local = t.Policies.Get == container.CacheOnly
	case classSet:
		local = t.Policies.Set == container.CacheOnly
	case classDelete:
		local = t.Policies.Delete == container.CacheOnly
	case classMeta:
		local = t.Policies.Get == container.CacheOnly && t.Policies.Set == container.CacheOnly && t.Policies.Delete == container.CacheOnly
	}
	if local {
		return localSpace{}, storeKey(t, row)
	}
	return &t.space, row
}

// refuseTooLarge is the engine's one check of the item size limit: it reports
// whether n bytes are too many and, if so, counts the refused set and, as
// memcached does, drops key's old value for a plain set so no stale copy
// outlives a write the client attempted. sp is nil when the key resolves to
// no space (a missing container); then nothing is dropped.
func (e *Engine) refuseTooLarge(sp keySpace, k []byte, mode Mode, n int64) bool {
	if n <= e.maxItemSize {
		return false
	}
	e.counters.CmdSet.Add(1)
	if mode == Set && sp != nil {
		e.st.Update(sp.localKey(k), func(*store.Item) (store.Action, store.Item) { return store.Remove, store.Item{} })
	}
	return true
}

// localSpace is the local store; its keys are store keys.
type localSpace struct{}

func (localSpace) localKey(k []byte) []byte { return k }

func (localSpace) get(e *Engine, k []byte) (store.Item, bool, error) {
	it, ok := e.st.Get(k)
	return it, ok, nil
}

func (localSpace) getMany(e *Engine, idx []int, keys [][]byte, items []store.Item, found []bool) error {
	for j, i := range idx {
		items[i], found[i] = e.st.Get(keys[j])
	}
	return nil
}

func (localSpace) getAndTouch(e *Engine, key []byte, exptime int64) (store.Item, bool, error) {
	e.counters.CmdGet.Add(1)
	e.counters.CmdTouch.Add(1)
	deadline := e.Deadline(exptime)
	found := false
	it, err := e.st.Update(key, func(cur *store.Item) (store.Action, store.Item) {
		if cur == nil {
			return store.Keep, store.Item{}
		}
		found = true
		cur.Exptime = deadline
		cur.Fetched = true
		cur.LastAccess = e.st.Now()
		return store.Save, store.Item{}
	})
	if found {
		e.counters.GetHits.Add(1)
		e.counters.TouchHits.Add(1)
	} else {
		e.counters.GetMisses.Add(1)
		e.counters.TouchMisses.Add(1)
	}
	return it, found, err
}

func (localSpace) store(e *Engine, mode Mode, key, value []byte, flags uint32, deadline int64, cas uint64) (Status, uint64, error) {
	status := Stored
	it, err := e.st.Update(key, func(cur *store.Item) (store.Action, store.Item) {
		if mode == CAS || cas != 0 {
			switch {
			case cur == nil:
				status = NotFound
				return store.Keep, store.Item{}
			case cur.CAS != cas:
				status = Exists
				return store.Keep, store.Item{}
			}
		}
		switch mode {
		case Add:
			if cur != nil {
				status = NotStored
				return store.Keep, store.Item{}
			}
		case Replace:
			if cur == nil {
				status = NotStored
				return store.Keep, store.Item{}
			}
		case Append, Prepend:
			if cur == nil {
				status = NotStored
				return store.Keep, store.Item{}
			}
			if int64(len(cur.Value)+len(value)) > e.maxItemSize {
				status = TooLarge
				return store.Keep, store.Item{}
			}
			// append and prepend keep the item's flags and expiry.
			return store.Replace, store.Item{Value: joinValues(mode, cur.Value, value), Flags: cur.Flags, Exptime: cur.Exptime}
		}
		return store.Replace, store.Item{Value: value, Flags: flags, Exptime: deadline}
	})
	if err != nil {
		return storeErrorStatus(err), 0, err
	}
	return status, it.CAS, nil
}

func (localSpace) delete(e *Engine, key []byte, cas uint64) (Status, error) {
	status := Deleted
	_, err := e.st.Update(key, func(cur *store.Item) (store.Action, store.Item) {
		switch {
		case cur == nil:
			status = NotFound
			return store.Keep, store.Item{}
		case cas != 0 && cur.CAS != cas:
			status = Exists
			return store.Keep, store.Item{}
		}
		return store.Remove, store.Item{}
	})
	e.countDelete(status)
	if err != nil {
		return Failed, err
	}
	return status, nil
}

func (localSpace) touch(e *Engine, key []byte, exptime int64) (store.Item, Status, error) {
	it, found, err := e.st.Touch(key, e.Deadline(exptime))
	count(found, &e.counters.TouchHits, &e.counters.TouchMisses)
	switch {
	case err != nil:
		return it, Failed, err
	case !found:
		return it, NotFound, nil
	}
	return it, Touched, nil
}

func (localSpace) incrDecr(e *Engine, key []byte, a Arith) (uint64, uint64, Status, error) {
	var result uint64
	status := Stored
	it, err := e.st.Update(key, func(cur *store.Item) (store.Action, store.Item) {
		if cur == nil {
			if !a.Create {
				status = NotFound
				return store.Keep, store.Item{}
			}
			result = a.Initial
			return store.Replace, store.Item{Value: strconv.AppendUint(nil, a.Initial, 10), Exptime: e.Deadline(a.Exptime)}
		}
		if a.CAS != 0 && cur.CAS != a.CAS {
			status = Exists
			return store.Keep, store.Item{}
		}
		v, n, ok := addDelta(cur.Value, a.Delta, a.Decr)
		if !ok {
			status = NonNumeric
			return store.Keep, store.Item{}
		}
		result = n
		return store.Replace, store.Item{Value: v, Flags: cur.Flags, Exptime: cur.Exptime}
	})
	e.countArith(a.Decr, status == Stored)
	if err != nil {
		return 0, 0, storeErrorStatus(err), err
	}
	return result, it.CAS, status, nil
}

// tableSpace is a container's table as a key space; its keys are row keys.
// It lives in its Container (Container.space), so resolving to it allocates nothing.
type tableSpace struct{ t *Container }

func (s *tableSpace) localKey(row []byte) []byte { return rowKey(s.t, row) }

func (s *tableSpace) get(e *Engine, row []byte) (store.Item, bool, error) {
	return e.tableGet(s.t, row)
}

func (s *tableSpace) getMany(e *Engine, idx []int, rows [][]byte, items []store.Item, found []bool) error {
	return e.tableGetMany(s.t, idx, rows, items, found)
}

// getAndTouch is a touch on the table, then a get of the row.
func (s *tableSpace) getAndTouch(e *Engine, row []byte, exptime int64) (store.Item, bool, error) {
	if _, status, err := e.touchIn(s, row, exptime); err != nil || status != Touched {
		return store.Item{}, false, err
	}
	return e.tableGet(s.t, row)
}

func (s *tableSpace) store(e *Engine, mode Mode, row, value []byte, flags uint32, deadline int64, cas uint64) (Status, uint64, error) {
	return e.tableStore(s.t, mode, row, value, flags, deadline, cas)
}

func (s *tableSpace) delete(e *Engine, row []byte, cas uint64) (Status, error) {
	return e.tableDelete(s.t, row, cas)
}

func (s *tableSpace) touch(e *Engine, row []byte, exptime int64) (store.Item, Status, error) {
	return e.tableTouch(s.t, row, exptime)
}

func (s *tableSpace) incrDecr(e *Engine, row []byte, a Arith) (uint64, uint64, Status, error) {
	return e.tableIncrDecr(s.t, row, a)
}

func (s *tableSpace) metaGet(e *Engine, row []byte, r MetaGetRequest, res MetaGetResult) (MetaGetResult, error) {
	return e.tableMetaGet(s.t, row, r, res)
}

func (s *tableSpace) metaSet(e *Engine, row, value []byte, r MetaSetRequest) (Status, store.Item, error) {
	return e.tableMetaSet(s.t, row, value, r)
}

func (s *tableSpace) metaDelete(e *Engine, row []byte, r MetaDeleteRequest) (Status, error) {
	return e.tableMetaDelete(s.t, row, r)
}

func (s *tableSpace) metaArith(e *Engine, row []byte, r MetaArithRequest, res MetaArithResult) (MetaArithResult, error) {
	return e.tableMetaArith(s.t, row, r, res)
}
