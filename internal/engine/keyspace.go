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
//     copy of each row in the local store (caching: package rowcache, with its
//     fills and stamps) and the write-behind queue (write = "async"). The row
//     is the truth; see tables.go for the policies and write-behind ordering.
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
//     Table), so resolving a key allocates nothing beyond the local key's prefix.
//   - Counters counted before the space is known (cmd_get, cmd_set,
//     cmd_touch) are the engine's; each space counts its hits and misses as
//     memcached counts them for that command.
type keySpace interface {
	// get reads k, telling w (when not nil) before it waits on MySQL. A value from the local store is copied to
	// memory dst gives when dst is not nil (see Engine.GetTalliedInto).
	get(e *Engine, k []byte, w Waiter, dst store.ValueBuf) (store.Item, bool, error)
	// getMany answers keys[j] into items[idx[j]] and found[idx[j]] (a
	// multi-get's share in this space), with as few round trips as it can,
	// telling w (when not nil) once before it waits on MySQL.
	getMany(e *Engine, idx []int, keys [][]byte, items []store.Item, found []bool, w Waiter) error
	getAndTouch(e *Engine, k []byte, exptime int64) (store.Item, bool, error)
	store(e *Engine, k, value []byte, r StoreRequest) (Status, store.Item, error)
	delete(e *Engine, k []byte, r DeleteRequest) (Status, error)
	touch(e *Engine, k []byte, exptime int64) (store.Item, Status, error)
	incrDecr(e *Engine, k []byte, a Arith, res ArithResult) (ArithResult, error)
	metaGet(e *Engine, k []byte, r MetaGetRequest, res MetaGetResult) (MetaGetResult, error)
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
func (t *Table) spaceFor(class opClass, row []byte) (keySpace, []byte) {
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

func (localSpace) get(e *Engine, k []byte, _ Waiter, dst store.ValueBuf) (store.Item, bool, error) {
	it, ok := e.st.GetInto(k, dst)
	return it, ok, nil
}

func (localSpace) getMany(e *Engine, idx []int, keys [][]byte, items []store.Item, found []bool, _ Waiter) error {
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

// store is memcached's do_store_item: one routine for the classic storage
// commands and ms, in one store.Update.
func (localSpace) store(e *Engine, key, value []byte, r StoreRequest) (Status, store.Item, error) {
	deadline := e.Deadline(r.TTL)
	status := Stored
	it, err := e.st.Update(key, func(cur *store.Item) (store.Action, store.Item) {
		next := store.Item{Value: value, Flags: r.Flags, Exptime: deadline, CAS: r.NewCAS}
		if cur == nil {
			switch r.Mode {
			case CAS:
				status = NotFound
			case Replace:
				status = NotStored
			case Append, Prepend:
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
		switch r.Mode {
		case CAS:
			switch {
			case r.CAS == cur.CAS:
			case r.StaleOK && r.CAS != 0 && r.CAS < cur.CAS:
				// An older writer may still store, but its value stays
				// stale, keeps the TTL and any win already handed out.
				next.Exptime, next.Stale, next.WinSent = cur.Exptime, true, cur.WinSent
			default:
				status = Exists
			}
		case Add:
			status = NotStored
		case Append, Prepend:
			switch {
			case r.CAS != 0 && r.CAS != cur.CAS:
				status = Exists
			case int64(len(cur.Value)+len(value)) > e.maxItemSize:
				// As memcached, which cannot allocate the joined item.
				status = NotStored
			default:
				// append and prepend keep the item's flags and expiry.
				next = store.Item{Value: joinValues(r.Mode, cur.Value, value), Flags: cur.Flags, Exptime: cur.Exptime, CAS: r.NewCAS}
			}
		}
		if status != Stored {
			return store.Keep, store.Item{}
		}
		return store.Replace, next
	})
	if err != nil {
		return storeErrorStatus(err), store.Item{}, err
	}
	if status != Stored {
		return status, store.Item{}, nil
	}
	return status, it, nil
}

// delete is delete and md: remove the item, or with r.Invalidate mark it
// stale under a new CAS id so the next reader wins the right to recache it.
func (localSpace) delete(e *Engine, key []byte, r DeleteRequest) (Status, error) {
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
		cur.Stale, cur.WinSent, cur.CAS = true, false, r.NewCAS
		return store.Save, store.Item{}
	})
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

// incrDecr is memcached's do_add_delta for incr, decr and ma, creating the
// item on a miss when asked. As memcached, an empty value is not a number
// whatever its CAS id.
func (localSpace) incrDecr(e *Engine, key []byte, a Arith, res ArithResult) (ArithResult, error) {
	ttl := e.Deadline(a.TTL)
	it, err := e.st.Update(key, func(cur *store.Item) (store.Action, store.Item) {
		if cur == nil {
			if !a.Create {
				res.Status = NotFound
				return store.Keep, store.Item{}
			}
			res.Created, res.Value = true, a.Initial
			next := store.Item{Value: strconv.AppendUint(nil, a.Initial, 10), Exptime: e.Deadline(a.CreateTTL), CAS: a.NewCAS}
			if a.SetTTL {
				next.Exptime = ttl
			}
			return store.Replace, next
		}
		res.PrevExptime = cur.Exptime
		if len(cur.Value) > 0 && a.CAS != 0 && cur.CAS != a.CAS {
			res.Status = Exists
			return store.Keep, store.Item{}
		}
		v, n, ok := addDelta(cur.Value, a.Delta, a.Decr)
		if !ok {
			res.Status = NonNumeric
			return store.Keep, store.Item{}
		}
		res.Value = n
		next := store.Item{Value: v, Flags: cur.Flags, Exptime: cur.Exptime, CAS: a.NewCAS}
		if a.SetTTL {
			next.Exptime = ttl
		}
		return store.Replace, next
	})
	if err != nil {
		res.Status = storeErrorStatus(err)
		return res, err
	}
	res.Item = it
	return res, nil
}

// tableSpace is a container's table as a key space; its keys are row keys.
// It lives in its Table (Table.space), so resolving to it allocates nothing.
type tableSpace struct{ t *Table }

func (s *tableSpace) localKey(row []byte) []byte { return s.t.rows.Key(row) }

func (s *tableSpace) get(e *Engine, row []byte, w Waiter, _ store.ValueBuf) (store.Item, bool, error) {
	return e.tableGet(s.t, row, w)
}

func (s *tableSpace) getMany(e *Engine, idx []int, rows [][]byte, items []store.Item, found []bool, w Waiter) error {
	return e.tableGetMany(s.t, idx, rows, items, found, w)
}

// getAndTouch is a touch on the table, then a get of the row.
func (s *tableSpace) getAndTouch(e *Engine, row []byte, exptime int64) (store.Item, bool, error) {
	if _, status, err := e.touchIn(s, row, exptime); err != nil || status != Touched {
		return store.Item{}, false, err
	}
	return e.tableGet(s.t, row, nil) // a gat steps away before it runs (MayWait)
}

func (s *tableSpace) store(e *Engine, row, value []byte, r StoreRequest) (Status, store.Item, error) {
	if what := r.metaOnly(); what != "" {
		return Failed, store.Item{}, tableUnsupported(s.t, what)
	}
	// A meta command resolved here; its set policy may still keep it local.
	if sp, k := s.t.spaceFor(classSet, row); sp != keySpace(s) {
		return sp.store(e, k, value, r)
	}
	return e.tableStore(s.t, row, value, r)
}

func (s *tableSpace) delete(e *Engine, row []byte, r DeleteRequest) (Status, error) {
	if r.CompareCAS || r.Invalidate {
		return Failed, tableUnsupported(s.t, "deletes with a cas and md flags C and I")
	}
	if sp, k := s.t.spaceFor(classDelete, row); sp != keySpace(s) {
		return sp.delete(e, k, r)
	}
	return e.tableDelete(s.t, row)
}

func (s *tableSpace) touch(e *Engine, row []byte, exptime int64) (store.Item, Status, error) {
	return e.tableTouch(s.t, row, exptime)
}

func (s *tableSpace) incrDecr(e *Engine, row []byte, a Arith, res ArithResult) (ArithResult, error) {
	if what := a.metaOnly(); what != "" {
		res.Status = Failed
		return res, tableUnsupported(s.t, what)
	}
	if sp, k := s.t.spaceFor(classSet, row); sp != keySpace(s) {
		return sp.incrDecr(e, k, a, res)
	}
	return e.tableIncrDecr(s.t, row, a, res)
}

func (s *tableSpace) metaGet(e *Engine, row []byte, r MetaGetRequest, res MetaGetResult) (MetaGetResult, error) {
	return e.tableMetaGet(s.t, row, r, res)
}
