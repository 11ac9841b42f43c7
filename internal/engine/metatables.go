package engine

import (
	"github.com/keywaydb/keyway/internal/store"
)

// Meta commands on table-backed containers. The row is the truth, so each
// meta command runs as the classic command it amounts to (mg as get or gat,
// ms as set/add/replace/append/prepend/cas, md as delete, ma as incr/decr)
// and gets the same policies, single-flight fills and write-behind ordering.
// The meta flags that exist for the local cache's stampede handling (N and R
// on mg, I, E, and CAS compares where the table cannot make them atomically)
// are refused with a CLIENT_ERROR naming them, never silently ignored.

func metaUnsupported(t *Container, cmd, flags string) error {
	return clientErrorf("container %q: %s flags %s are not supported on a table (they act on the local cache); use them on keys without a table", t.Name, cmd, flags)
}

// tableMetaGet is mg on a table row: a get, or with T a gat.
func (e *Engine) tableMetaGet(t *Container, row []byte, r MetaGetRequest, res MetaGetResult) (MetaGetResult, error) {
	if r.Vivify || r.Recache || r.NewCAS != 0 {
		return res, metaUnsupported(t, "mg", "N, R and E")
	}
	var err error
	if r.SetTTL {
		sp, k := t.spaceFor(classSet, row)
		res.Item, res.Found, err = sp.getAndTouch(e, k, r.TTL)
	} else {
		res.Item, res.Found, err = e.getIn(t.spaceFor(classGet, row))
	}
	// The exptime before a touch is not read back from the table, so an mg
	// with t before T reports the new TTL, as after it.
	res.PrevExptime = res.Item.Exptime
	return res, err
}

// tableMetaSet is ms on a table row.
func (e *Engine) tableMetaSet(t *Container, row, value []byte, r MetaSetRequest) (Status, store.Item, error) {
	if r.Invalidate || r.NewCAS != 0 || r.Vivify {
		return Failed, store.Item{}, metaUnsupported(t, "ms", "I, E and N")
	}
	mode, cas := r.Mode, uint64(0)
	if r.CompareCAS {
		switch r.Mode {
		case Set, Replace:
			mode, cas = CAS, r.CAS
		case Append, Prepend:
			return Failed, store.Item{}, metaUnsupported(t, "ms", "C with append or prepend mode")
		}
		// As memcached does, add with C compares nothing.
	}
	sp, k := t.spaceFor(classSet, row)
	status, newCAS, err := e.storeIn(sp, k, mode, value, r.Flags, r.TTL, cas)
	if status != Stored {
		return status, store.Item{}, err
	}
	return status, store.Item{Value: value, Flags: r.Flags, Exptime: e.Deadline(r.TTL), CAS: newCAS}, err
}

// tableMetaDelete is md on a table row.
func (e *Engine) tableMetaDelete(t *Container, row []byte, r MetaDeleteRequest) (Status, error) {
	if r.CompareCAS || r.Invalidate {
		return Failed, metaUnsupported(t, "md", "C and I")
	}
	sp, k := t.spaceFor(classDelete, row)
	return sp.delete(e, k, 0)
}

// tableMetaArith is ma on a table row: incr or decr, creating the row with N.
func (e *Engine) tableMetaArith(t *Container, row []byte, r MetaArithRequest, res MetaArithResult) (MetaArithResult, error) {
	if r.CAS != 0 || r.NewCAS != 0 || r.SetTTL {
		res.Status = Failed
		return res, metaUnsupported(t, "ma", "C, E and T")
	}
	sp, k := t.spaceFor(classSet, row)
	v, _, status, err := sp.incrDecr(e, k, Arith{Delta: r.Delta, Decr: r.Decr, Create: r.Vivify, Initial: r.Initial, Exptime: r.VivifyTTL})
	res.Status, res.Value = status, v
	return res, err
}
