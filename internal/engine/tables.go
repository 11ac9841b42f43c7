package engine

// Containers: keys "@@name.key" (or, with a container named "default", keys
// without a prefix) are rows of a MySQL table. Each operation class follows
// the container's policy:
//
//   - cache_only: the local store only, as a key without a container.
//   - db_only:    the table every time.
//   - caching:    reads are served by the local store and filled from the table
//     on a miss (concurrent misses on one key make one query); writes go to the
//     table and then either write through (the copy becomes the row as the
//     table returns it, when keyway knows that: container.AsStored) or drop
//     the local copy.
//   - disabled:   refused.
//
// The caching policy's copies of rows, their fills and validity, are package rowcache's: each Table has one
// rowcache.Cache, and every read that may serve a copy asks its Held. While the container's group cannot vouch for
// its copies (validity.Gate.Serves: its binlog follower is behind max_staleness or disconnected, or the group has no
// usable binlog and no invalidate = "ttl" or "none"), caching reads go to the table as db_only ones do and store
// nothing. For a container on a sharded table that group is, row by row, the group of the row's shard: one lagging
// shard sends only its own rows' reads to MySQL (see shardGates).
//
// Write-behind (write = "async"): a plain set is checked against the table's
// columns, queued (see package writebehind) and cached, and acknowledged
// without waiting for the table. Until the table has it, the queue answers
// reads of the row (after the read's stamp: see package rowcache). Every
// other command on a row first waits for the row's queued
// write (Sync), because its answer depends on the row; flush_all and the SQL
// door's writes wait for the whole queue (Drain).

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/keywaydb/keyway/internal/container"
	"github.com/keywaydb/keyway/internal/rowcache"
	"github.com/keywaydb/keyway/internal/store"
	"github.com/keywaydb/keyway/internal/validity"
	"github.com/keywaydb/keyway/internal/writebehind"
)

// Table is a container as the engine serves it: the container (its table, as a key-value space), its policies, its
// write-behind queue and the cache of its rows. Build it with Engine.NewContainer; its fields are read-only after
// that.
type Table struct {
	Name     string
	Source   string // the table, "schema.table", lower-case
	C        *container.Container
	Policies container.Policies
	Behind   *writebehind.Queue // write = "async": the sets not yet in the table; nil for sync
	// Group is the backend group the table lives on ("" in tests: no gate); the dashboard labels it so.
	Group string

	rows  *rowcache.Cache // the copies of rows the local store keeps (caching); see package rowcache
	space tableSpace      // the table as a key space (keyspace.go)
}

// JournalPrefix starts every local-store key that belongs to a container ("@@name."): cached rows, cache_only
// keys and the write-behind journal. TakeJournal(JournalPrefix) finds what containers left in the journal.
const JournalPrefix = "@@"

// ContainerOptions describe a container to NewContainer.
type ContainerOptions struct {
	Container *container.Container
	Policies  container.Policies
	// WriteBehind, when set, makes the container write behind (write = "async"): its queue journals in the
	// engine's store under the container's prefix and replays what an earlier run left there. OnDrop is the
	// engine's own.
	WriteBehind *writebehind.Options
	CopyTTL     time.Duration // see rowcache.Options.CopyTTL
	// Group is the backend group the table lives on: its validity.Gate decides whether copies are served. ""
	// (tests without a server) serves every valid copy. A container on a sharded table (container.Sharded) has no
	// one group: each row's copy is served while the gate of the group that holds the row's shard vouches
	// (container.GroupFor; see rowcache.Options.GateOf), and Group is ignored.
	Group string
}

// NewContainer binds a container to the engine with its policies (and, for write-behind, starts its queue). Pass the
// tables to SetContainers before serving.
func (e *Engine) NewContainer(o ContainerOptions) *Table {
	def := o.Container.Def()
	id := validity.TableID{Schema: strings.ToLower(def.Schema), Name: strings.ToLower(def.Table)}
	t := &Table{Name: def.Name, Source: id.String(), C: o.Container, Policies: o.Policies, Group: o.Group}
	var gate *validity.Gate
	var gateOf func([]byte) (*validity.Gate, bool)
	switch {
	case o.Container.Sharded():
		gateOf = e.shardGates(o.Container)
	case o.Group != "":
		gate = e.validity.Gate(o.Group)
	}
	t.rows = rowcache.New(rowcache.Options{Container: o.Container, Store: e.st, Prefix: string(prefix(t, 0)),
		Validity: e.validity.Table(id), Gate: gate, GateOf: gateOf, Caching: o.Policies.Get == container.Caching,
		CopyTTL: o.CopyTTL})
	t.space = tableSpace{t}
	if o.WriteBehind != nil {
		wo := *o.WriteBehind
		wo.OnDrop = func(row []byte) { e.DroppedWrite(t, row) }
		t.Behind = writebehind.New(o.Container, e.st, JournalPrefix+t.Name+".", wo)
		t.rows.SetQueue(t.Behind)
		// Statements through the SQL door that name the table see, and act after, every set the queue
		// acknowledged.
		e.validity.OnSettle(id, t.Behind.Drain)
	}
	return t
}

// shardGates is rowcache.Options.GateOf for a container on a sharded table: the gate of the group that holds row's
// shard under the map now (a gate no follower set up serves nothing: validity.Registry.Gate). No copy is kept of a
// row no shard holds, nor of one whose key the key column's collation folds (case, trailing spaces) into a key the
// map puts on another group: the shard map routes the key as written, so the two are different rows, while their
// copies would share one store key.
func (e *Engine) shardGates(c *container.Container) func([]byte) (*validity.Gate, bool) {
	return func(row []byte) (*validity.Gate, bool) {
		g, err := c.GroupFor(row)
		if err != nil {
			return nil, false
		}
		var buf [128]byte
		if norm := c.AppendNormKey(buf[:0], row); !bytes.Equal(norm, row) {
			if ng, err := c.GroupFor(norm); err != nil || ng != g {
				return nil, false
			}
		}
		if gate := e.validity.LookupGate(g); gate != nil {
			return gate, true
		}
		return e.validity.Gate(g), true
	}
}

// tableTimeout bounds one operation on a table.
const tableTimeout = 10 * time.Second

// ErrNoContainer means a key names a container that is not configured.
var ErrNoContainer = errors.New("no such container")

// SetContainers binds containers by name; call before serving. Keys without "@@" go to the container named
// defaultName ("" or a name not among tables: the local store).
func (e *Engine) SetContainers(tables []*Table, defaultName string) {
	e.tables = make(map[string]*Table, len(tables))
	for _, t := range tables {
		t.space = tableSpace{t}
		e.tables[t.Name] = t
	}
	e.defaultTable = e.tables[defaultName]
}

// HasContainers reports whether any container is configured.
func (e *Engine) HasContainers() bool { return len(e.tables) > 0 }

// route finds the container of key and the row key within it. It returns a
// nil table for a key the local store serves alone.
func (e *Engine) route(key []byte) (*Table, []byte, error) {
	if len(e.tables) == 0 {
		return nil, key, nil
	}
	if name, row, ok := splitContainer(key); ok {
		t := e.tables[string(name)]
		if t == nil {
			return nil, nil, fmt.Errorf("%w %q (configure it in [[containers]])", ErrNoContainer, name)
		}
		return t, row, nil
	}
	return e.defaultTable, key, nil
}

// splitContainer splits "@@name.row" into name and row; ok is false for a key that names no container.
func splitContainer(key []byte) (name, row []byte, ok bool) {
	if len(key) > 2 && key[0] == '@' && key[1] == '@' {
		for i := 2; i < len(key); i++ {
			if key[i] == '.' {
				return key[2:i], key[i+1:], true
			}
		}
	}
	return nil, nil, false
}

// SwitchTo is the container a key of the InnoDB plugin's form "@@name" (no ".row") switches a connection to, or nil
// when key is not of that form or names no configured container. The plugin answers such a get with the container's
// table (PluginTableName) and from then on sends the connection's keys without "@@" to that container; the door keeps
// that choice per connection and passes keys through InContainer.
func (e *Engine) SwitchTo(key []byte) *Table {
	if len(key) < 3 || key[0] != '@' || key[1] != '@' || bytes.IndexByte(key, '.') >= 0 {
		return nil
	}
	return e.tables[string(key[2:])]
}

// InContainer is key as sent on a connection switched to t (see SwitchTo): a key that names no container is t's
// row ("@@name.key"), as the plugin routes it; a key that names one, and every key when t is nil, is unchanged.
func InContainer(t *Table, key []byte) []byte {
	if t == nil {
		return key
	}
	if _, _, ok := splitContainer(key); ok {
		return key
	}
	return prefixed(t, key)
}

// PluginTableName is the value the InnoDB plugin answers "get @@name" with: the container's "schema/table".
func (t *Table) PluginTableName() string {
	def := t.C.Def()
	return def.Schema + "/" + def.Table
}

// storeKey is the local store's key for a key of a container whose policy
// keeps it in the local store alone (cache_only): the container's prefix
// keeps containers apart, and the key is exact, as memcached's are.
func storeKey(t *Table, row []byte) []byte {
	return prefixed(t, row)
}

func prefixed(t *Table, row []byte) []byte {
	return append(prefix(t, len(row)), row...)
}

// appendPrefixed appends prefixed's key to dst.
func appendPrefixed(dst []byte, t *Table, row []byte) []byte {
	return append(append(append(append(dst, JournalPrefix...), t.Name...), '.'), row...)
}

// prefix is "@@name." with room for n more bytes.
func prefix(t *Table, n int) []byte {
	return appendPrefixed(make([]byte, 0, len(t.Name)+3+n), t, nil)
}

func disabled(t *Table, op string) error {
	return clientErrorf("container %q: %s is disabled by its policy", t.Name, op)
}

// tableGet reads a row for a get under the container's get policy, telling w (when not nil) before it waits on
// MySQL: everything but a held copy's answer (or a refusal) may.
func (e *Engine) tableGet(t *Table, row []byte, w Waiter) (store.Item, bool, error) {
	switch t.Policies.Get {
	case container.Disabled:
		return store.Item{}, false, disabled(t, "get")
	case container.Caching:
		it, look := t.rows.Held(row, rowcache.Serve)
		if look == rowcache.Hit {
			return it, true, nil
		}
		tell(w)
		if look == rowcache.Miss {
			return t.rows.Fill(row)
		}
		e.counters.CacheBypasses.Add(1)
	default:
		tell(w)
	}
	if it, ok, waiting, err := e.queued(t, row); err != nil || waiting {
		return it, ok, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), tableTimeout)
	defer cancel()
	it, ok, err := t.C.Get(ctx, row)
	return rowcache.FromRow(it), ok, err
}

// queued answers a read of row from the write-behind queue: waiting reports
// that a write is queued, ok that it is a live item.
func (e *Engine) queued(t *Table, row []byte) (it store.Item, ok, waiting bool, err error) {
	if t.Behind == nil {
		return store.Item{}, false, false, nil
	}
	r, waiting, err := t.Behind.Get(row)
	if err != nil || !waiting {
		return store.Item{}, false, false, err
	}
	if rowcache.Expired(r.Exptime, e.st.Now()) {
		return store.Item{}, false, true, nil
	}
	return rowcache.FromRow(r), true, true, nil
}

// writeBehind acknowledges a plain set on an async container once it is
// checked against the table's columns, queued (journaled) and cached; the
// queue writes it to the table later.
func (e *Engine) writeBehind(t *Table, row []byte, item container.Item) (Status, uint64, error) {
	if err := t.C.Check(row, item); err != nil {
		return Failed, 0, err
	}
	item.CAS = t.C.AssignCAS(item)
	if err := t.rows.WriteBehind(row, item, t.Policies.Get == container.Caching); err != nil {
		return Failed, 0, err
	}
	return Stored, item.CAS, nil
}

// DroppedWrite is told by a write-behind queue that the table refused a
// queued write of row: the cached copy goes, so the table stays the truth.
func (e *Engine) DroppedWrite(t *Table, row []byte) {
	t.rows.Drop(row)
}

// tableWrite runs a write under policy (the container's set or delete
// policy): on the table, then, for caching, it settles the local copy. A
// write that knows the row it left (write returns it, as the table returns it:
// see container.AsStored) writes through: the copy becomes that row, so the
// next get is a hit. Any other write, or one that failed, drops the copy.
// Keys whose policy is cache_only never get here (see Table.spaceFor).
func (e *Engine) tableWrite(t *Table, row []byte, policy container.Policy, op string, write func(ctx context.Context) (*container.Item, error)) error {
	if policy == container.Disabled {
		return disabled(t, op)
	}
	if t.Behind != nil {
		// The answer depends on the row: let its queued write land first.
		if err := t.Behind.Sync(row); err != nil {
			return err
		}
	}
	// The stamp before the write: WroteThrough checks that nothing else
	// invalidated the row since (see validity.Table.WroteThrough).
	since := t.rows.Stamp()
	ctx, cancel := context.WithTimeout(context.Background(), tableTimeout)
	defer cancel()
	written, err := write(ctx)
	if testHookAfterTableWrite != nil {
		testHookAfterTableWrite(t, row)
	}
	// A container that keeps copies for gets must not keep one older than this write, whatever the write's own
	// policy: a db_only set or delete is read back through the copy too (keyway's promise: an acknowledged write
	// is visible to every later read through it).
	if policy == container.Caching || t.Policies.Get == container.Caching {
		if err == nil && written != nil && policy == container.Caching && t.Policies.Get == container.Caching {
			t.rows.WroteThrough(row, since, rowcache.FromRow(*written))
			return nil
		}
		// Invalidate even after an error: the write may have committed.
		t.rows.Drop(row)
	}
	return err
}

// testHookAfterTableWrite, when set by a test, runs between a table write's commit and its cache update: the window
// in which another writer's commit and invalidation can overtake it.
var testHookAfterTableWrite func(t *Table, row []byte)

// statusOf maps a container status to the engine's.
func statusOf(s container.Status) Status {
	switch s {
	case container.Stored:
		return Stored
	case container.NotStored:
		return NotStored
	case container.Exists:
		return Exists
	case container.NotFound:
		return NotFound
	case container.Deleted:
		return Deleted
	case container.Touched:
		return Touched
	case container.NonNumeric:
		return NonNumeric
	}
	return Failed
}

// tableStore runs a storage command on a table (a set policy other than
// cache_only). The returned item is the row as the table now returns it when
// keyway knows that (see container.AsStored), else what was sent: the row is
// not read back.
func (e *Engine) tableStore(t *Table, row, value []byte, r StoreRequest) (status Status, it store.Item, err error) {
	item := container.Item{Value: value, Flags: r.Flags, Exptime: e.Deadline(r.TTL)}
	var newCAS uint64
	var stored *container.Item
	if t.Behind != nil && r.Mode == Set && t.Policies.Set != container.Disabled {
		status, newCAS, err = e.writeBehind(t, row, item)
	} else {
		if t.Policies.Set == container.Caching && t.Policies.Get == container.Caching && r.Mode != Append && r.Mode != Prepend {
			// The binlog may echo this write before it returns: say what row it leaves (see rowcache's HoldsRow). Its
			// CAS is known here only without a cas column (a hash, never 0); with one, the committer assigns it (0).
			if want, ok := t.C.AsStored(item, 0); ok {
				defer t.rows.StartWrite(row, want)()
			}
		}
		err = e.tableWrite(t, row, t.Policies.Set, "set", func(ctx context.Context) (*container.Item, error) {
			var s container.Status
			var werr error
			switch r.Mode {
			case CAS:
				newCAS, s, werr = t.C.CompareAndSwap(ctx, row, item, r.CAS)
			case Set:
				newCAS, werr = t.C.Set(ctx, row, item)
				s = container.Stored
			case Add:
				newCAS, s, werr = t.C.Add(ctx, row, item)
			case Replace:
				newCAS, s, werr = t.C.Replace(ctx, row, item)
			case Append:
				newCAS, s, werr = t.C.Append(ctx, row, item)
			case Prepend:
				newCAS, s, werr = t.C.Prepend(ctx, row, item)
			}
			status = statusOf(s)
			if werr != nil || s != container.Stored || r.Mode == Append || r.Mode == Prepend {
				return nil, werr // an append's row is not known without reading it
			}
			if as, ok := t.C.AsStored(item, newCAS); ok {
				stored = &as
			}
			return stored, nil
		})
	}
	if err != nil || status != Stored {
		if err != nil {
			status = Failed
		}
		return status, store.Item{}, err
	}
	if stored != nil {
		return status, rowcache.FromRow(*stored), nil
	}
	return status, rowcache.FromRow(container.Item{Value: value, Flags: item.Flags, Exptime: item.Exptime, CAS: newCAS}), nil
}

// tableIncrDecr runs incr/decr on a table; a.Create (binary and meta) adds the
// row with a.Initial when it is missing.
func (e *Engine) tableIncrDecr(t *Table, row []byte, a Arith, res ArithResult) (ArithResult, error) {
	res.Status = Failed
	err := e.tableWrite(t, row, t.Policies.Set, "incr/decr", func(ctx context.Context) (*container.Item, error) {
		for attempt := 0; attempt < 2; attempt++ {
			v, s, err := t.C.IncrDecr(ctx, row, a.Delta, a.Decr)
			if err != nil || s != container.NotFound || !a.Create {
				res.Value, res.Status = v, statusOf(s)
				return nil, err
			}
			_, s, err = t.C.Add(ctx, row, container.Item{Value: strconv.AppendUint(nil, a.Initial, 10), Exptime: e.Deadline(a.CreateTTL)})
			if err != nil || s == container.Stored {
				res.Value, res.Status, res.Created = a.Initial, statusOf(s), s == container.Stored
				return nil, err
			}
			// Someone added it meanwhile: incr that.
		}
		return nil, nil
	})
	if err != nil {
		res.Status = Failed
	}
	return res, err
}

// tableDelete deletes a row under the container's delete policy.
func (e *Engine) tableDelete(t *Table, row []byte) (Status, error) {
	status := Deleted
	err := e.tableWrite(t, row, t.Policies.Delete, "delete", func(ctx context.Context) (*container.Item, error) {
		s, err := t.C.Delete(ctx, row)
		status = statusOf(s)
		return nil, err
	})
	if err != nil {
		return Failed, err
	}
	return status, nil
}

// tableTouch sets a row's expiry under the container's set policy. The
// returned item is empty: the row is not read back.
func (e *Engine) tableTouch(t *Table, row []byte, exptime int64) (store.Item, Status, error) {
	status := Failed
	err := e.tableWrite(t, row, t.Policies.Set, "touch", func(ctx context.Context) (*container.Item, error) {
		s, err := t.C.Touch(ctx, row, e.Deadline(exptime))
		status = statusOf(s)
		return nil, err
	})
	count(status == Touched, &e.counters.TouchHits, &e.counters.TouchMisses)
	if err != nil {
		return store.Item{}, Failed, err
	}
	return store.Item{}, status, nil
}

// GetMulti looks up keys in order, as a multi-key get: each key space
// answers its share at once, so the local store answers what it can and the
// rows each container still needs are read with one query per container
// (WHERE key IN (…)). The error is the first a key or a space met; the other
// keys are answered regardless.
func (e *Engine) GetMulti(keys [][]byte) ([]store.Item, []bool, error) {
	return e.GetMultiTallied(nil, keys, nil)
}

// GetMultiTallied is GetMulti counted in t (see Tally). If any key's answer needs MySQL, w (when not nil) is told
// before the engine waits for it (see Waiter). Each key is routed, and a held copy looked up, once.
func (e *Engine) GetMultiTallied(t *Tally, keys [][]byte, w Waiter) ([]store.Item, []bool, error) {
	items := make([]store.Item, len(keys))
	found := make([]bool, len(keys))
	var firstErr error
	if !e.HasContainers() {
		for i, key := range keys {
			items[i], found[i] = e.st.Get(key)
		}
	} else {
		// Group the keys by space, in order of first appearance; there are few spaces.
		type share struct {
			sp  keySpace
			idx []int
			k   [][]byte
		}
		var shares []share
	next:
		for i, key := range keys {
			sp, k, err := e.space(key, classGet)
			if err != nil {
				if firstErr == nil {
					firstErr = err
				}
				continue
			}
			for j := range shares {
				if shares[j].sp == sp {
					shares[j].idx, shares[j].k = append(shares[j].idx, i), append(shares[j].k, k)
					continue next
				}
			}
			shares = append(shares, share{sp: sp, idx: []int{i}, k: [][]byte{k}})
		}
		for _, sh := range shares {
			if err := sh.sp.getMany(e, sh.idx, sh.k, items, found, w); err != nil && firstErr == nil {
				firstErr = err
			}
		}
	}
	var hits int64
	for _, f := range found {
		if f {
			hits++
		}
	}
	e.countGets(t, int64(len(keys)), hits)
	return items, found, firstErr
}

// tableGetMany answers a multi-get's rows of t (rows[j] into items[idx[j]]):
// valid copies first, then queued writes, then one query for the rest, telling w (when not nil) before that query.
func (e *Engine) tableGetMany(t *Table, idx []int, rows [][]byte, items []store.Item, found []bool, w Waiter) error {
	switch t.Policies.Get {
	case container.Disabled:
		return disabled(t, "get")
	case container.Caching:
		n, use := 0, rowcache.Serve
		for j, row := range rows {
			it, look := t.rows.Held(row, use)
			if look == rowcache.Bypass {
				if !t.rows.PerRowGates() { // the first row: the one gate is closed for all of them
					e.counters.CacheBypasses.Add(int64(len(rows)))
					n = len(rows)
					break
				}
				// A sharded table: this row's shard's group does not vouch; the other rows' groups may.
				e.counters.CacheBypasses.Add(1)
				idx[n], rows[n] = idx[j], row
				n++
				continue
			}
			use = rowcache.Vouched
			if look == rowcache.Hit {
				items[idx[j]], found[idx[j]] = it, true
				continue
			}
			idx[n], rows[n] = idx[j], row
			n++
		}
		idx, rows = idx[:n], rows[:n]
	}
	if len(rows) == 0 {
		return nil
	}
	tell(w)
	return t.rows.ReadMany(idx, rows, items, found, t.Policies.Get == container.Caching)
}

// ContainerStatus is a container's state for /status.
type ContainerStatus struct {
	Table string `json:"table"`
	// Checked: the container checked its table and serves; false while it waits for its backend (see
	// container.Open), when its keys answer SERVER_ERROR.
	Checked     bool               `json:"checked"`
	Get         container.Policy   `json:"get"`
	Set         container.Policy   `json:"set"`
	Delete      container.Policy   `json:"delete"`
	Flush       container.Policy   `json:"flush"`
	Write       string             `json:"write"` // "sync" or "async"
	GroupCommit container.Stats    `json:"group_commit"`
	WriteBehind *writebehind.Stats `json:"write_behind,omitempty"`
}

// Status returns a snapshot of the container's policies and write counters.
func (t *Table) Status() ContainerStatus {
	st := ContainerStatus{Table: t.Source, Checked: t.C.Checked(), Get: t.Policies.Get, Set: t.Policies.Set, Delete: t.Policies.Delete,
		Flush: t.Policies.Flush, Write: "sync", GroupCommit: t.C.Stats()}
	if t.Behind != nil {
		wb := t.Behind.Stats()
		st.Write, st.WriteBehind = "async", &wb
	}
	return st
}
