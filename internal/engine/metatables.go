package engine

// Meta commands on table-backed containers. The row is the truth, so each
// meta command runs as the classic command it amounts to (mg as get or gat,
// ms, md and ma share the classic commands' requests and routines; see
// tableSpace in keyspace.go) and gets the same policies, single-flight fills
// and write-behind ordering.
// The meta flags that exist for the local cache's stampede handling (N and R
// on mg, I, E, and CAS compares where the table cannot make them atomically)
// are refused with a CLIENT_ERROR naming them, never silently ignored.

// tableUnsupported refuses what on a table row: what acts on the local
// cache, or compares where the table cannot do it atomically.
func tableUnsupported(t *Table, what string) error {
	return clientErrorf("container %q: %s are not supported on a table (they act on the local cache, or compare where the table cannot); use them on keys without a table", t.Name, what)
}

// tableMetaGet is mg on a table row: a get, or with T a gat.
func (e *Engine) tableMetaGet(t *Table, row []byte, r MetaGetRequest, res MetaGetResult) (MetaGetResult, error) {
	if r.Vivify || r.Recache || r.NewCAS != 0 {
		return res, tableUnsupported(t, "mg flags N, R and E")
	}
	var err error
	if r.SetTTL {
		sp, k := t.spaceFor(classSet, row)
		res.Item, res.Found, err = sp.getAndTouch(e, k, r.TTL)
	} else {
		sp, k := t.spaceFor(classGet, row)
		res.Item, res.Found, err = e.getIn(r.Tally, sp, k, r.Waiter, nil)
	}
	// The exptime before a touch is not read back from the table, so an mg
	// with t before T reports the new TTL, as after it.
	res.PrevExptime = res.Item.Exptime
	return res, err
}
