package container

// Sharded containers (issue 42, the memcache door): a container whose table the shard map shards by the container's
// key column routes each key to the group of its shard. OpenSharded returns a router: a Container without a pool of
// its own that holds one part per shard group (a Container opened with Open on that group's pool: its own group
// committer, replicas and checks) and sends each operation to the part of its key's shard.
//
// Invariants:
//   - The map is read from the Holder once per operation (once per multi-get and per WriteRows), so a reload applies
//     to later operations and none is routed by half of one map and half of another.
//   - The key's value is the memcache key as a string, as a statement's string literal for the shard key (so the
//     SQL door and the memcache door put a key on the same shard): for hash and range_int mappings it must be an
//     integer. A key no shard holds is an error wrapping ErrNoShard, sent to no server.
//   - A multi-get is one GetMulti (one IN) per part, the parts' queries concurrent; the answer is keyed by key as
//     GetMulti's is, so the caller answers in request order.
//   - Group commit is the parts': concurrent Sets of one shard's keys join one transaction on that shard, and
//     never one with another shard's.
//   - Parts are opened at OpenSharded for every group of the table's mapping, and later, on first use, for a group
//     a reloaded map names first (or the global group, when a reloaded map no longer shards the table). They are
//     never closed before Close.
//   - What is the table's and not a row's (the key rule NormKey, AsStored, FromImage, BatchLen) is taken from a
//     part that was checked: every shard holds the same table definition. The CAS counter is the table's
//     (casCounters), shared by the parts.
//   - A sharded container has no single moment it goes live: OnLive registers nothing (a write-behind queue keeps
//     one queue per part, each keyed by its part's rule: see package writebehind).
//   - Copies of rows (get = "caching") are not the parts': the engine keeps one cache for the container and asks
//     GroupFor which group's freshness gate vouches for each key's copy (see package rowcache, Options.GateOf).

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/keywaydb/keyway/internal/shard"
	"github.com/keywaydb/keyway/internal/validity"
)

// ErrNoShard: the key cannot be routed to a shard (not an integer for a hash or range_int mapping, or in a gap
// between a range mapping's shards). The request's fault: no server is asked.
var ErrNoShard = errors.New("key has no shard")

// ShardOptions make a container route its keys by a shard map (OpenSharded).
type ShardOptions struct {
	// Holder holds the map; it must hold one when OpenSharded is called.
	Holder *shard.Holder
	// Open opens the container's part on group: the same Def on that group's pool, with that group's Options. It is
	// called by OpenSharded for each group of the table's mapping and, later, for a group a reloaded map names first.
	Open func(ctx context.Context, def Def, group string) (*Container, error)
}

// sharded is a router's state (Container.sh).
type sharded struct {
	holder *shard.Holder
	open   func(ctx context.Context, def Def, group string) (*Container, error)
	col    string // the key column, lower case: the shard key column the map must name

	mu    sync.Mutex                            // serializes opening parts
	parts atomic.Pointer[map[string]*Container] // by group; replaced whole when a part is added
	order atomic.Pointer[[]*Container]          // the parts in the order they were opened
}

// IsSharded reports whether the map in h shards def's table (so the container must be opened with OpenSharded).
func IsSharded(h *shard.Holder, def Def) bool {
	return h != nil && h.Load().Table(def.Schema, def.Table) != nil
}

// OpenSharded opens a container on a table the map in so.Holder shards: a router with one part per group of the
// table's mapping (so.Open). The shard key column must be the container's key column, else it fails naming both.
// A part whose group cannot be reached opens not checked, as Open does: the keys of that shard answer the part's
// *NotCheckedError until it is checked, the other shards' keys serve.
func OpenSharded(ctx context.Context, def Def, o Options, so ShardOptions) (*Container, error) {
	if o.Logger == nil {
		return nil, errors.New("container.OpenSharded: Options.Logger is required")
	}
	if def.Separator == "" {
		def.Separator = "|"
	}
	if def.Schema == "" || def.Table == "" || def.KeyColumn == "" || len(def.ValueColumns) == 0 {
		return nil, failf(def, "schema, table, key column and at least one value column are required")
	}
	if so.Holder == nil || so.Holder.Load() == nil || so.Open == nil {
		return nil, failf(def, "no shard map to route by")
	}
	m := so.Holder.Load()
	t := m.Table(def.Schema, def.Table)
	if t == nil {
		return nil, failf(def, "the shard map (version %d) does not shard the table: open it with Open", m.Version)
	}
	sh := &sharded{holder: so.Holder, open: so.Open, col: strings.ToLower(def.KeyColumn)}
	if t.Column != sh.col {
		return nil, failf(def, "the shard map shards table %s by column %q (mapping %s), not by the container's key column %q: a memcache key must name its row's shard; use the shard key column as the key column, or a table the map does not shard",
			t, t.Column, t.Mapping.Name, def.KeyColumn)
	}
	c := &Container{def: def, opt: o, sep: def.Separator, sh: sh,
		table: quoteIdent(def.Schema) + "." + quoteIdent(def.Table),
		cas:   casCounterFor(def.Schema, def.Table),
		ids:   [1]validity.TableID{{Schema: strings.ToLower(def.Schema), Name: strings.ToLower(def.Table)}},
	}
	if def.CASColumn != "" {
		c.qCAS = quoteIdent(def.CASColumn)
	}
	empty := map[string]*Container{}
	sh.parts.Store(&empty)
	sh.order.Store(&[]*Container{})
	for _, g := range t.Mapping.Groups() {
		if _, err := sh.openPart(ctx, def, g); err != nil {
			c.Close()
			return nil, err
		}
	}
	return c, nil
}

// openPart returns the part on group, opening it when there is none.
func (sh *sharded) openPart(ctx context.Context, def Def, group string) (*Container, error) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	cur := *sh.parts.Load()
	if p := cur[group]; p != nil {
		return p, nil
	}
	p, err := sh.open(ctx, def, group)
	if err != nil {
		return nil, fmt.Errorf("container %q, shard group %q: %w", def.Name, group, err)
	}
	next := make(map[string]*Container, len(cur)+1)
	for g, q := range cur {
		next[g] = q
	}
	next[group] = p
	order := append(append([]*Container(nil), *sh.order.Load()...), p)
	sh.parts.Store(&next)
	sh.order.Store(&order)
	return p, nil
}

// Sharded reports whether c routes its keys by a shard map (OpenSharded).
func (c *Container) Sharded() bool { return c.sh != nil }

// Parts returns a sharded container's parts (one per shard group opened so far, in the order they were opened), nil
// for a container that is not sharded. The slice is the container's: do not change it.
func (c *Container) Parts() []*Container {
	if c.sh == nil {
		return nil
	}
	return *c.sh.order.Load()
}

// ShardMapVersion is the version of the shard map a sharded container routes by now (0 when not sharded).
func (c *Container) ShardMapVersion() uint64 {
	if c.sh == nil {
		return 0
	}
	return c.sh.holder.Load().Version
}

// PartFor returns the part that holds key under the current map: c itself when c is not sharded. A key no shard
// holds is an error wrapping ErrNoShard (and the map's *shard.NoShardError, which says why). ctx bounds opening the
// part of a group the map names for the first time.
func (c *Container) PartFor(ctx context.Context, key []byte) (*Container, error) {
	if c.sh == nil {
		return c, nil
	}
	return c.partFor(ctx, c.sh.holder.Load(), key)
}

// GroupFor returns the backend group that holds key under the current map (the group of its shard, or the global
// group when the map no longer shards the table), without opening a part: a caching container asks it for the
// freshness gate of each key's copy. A key no shard holds is an error wrapping ErrNoShard, as PartFor's. It is ""
// for a container that is not sharded.
func (c *Container) GroupFor(key []byte) (string, error) {
	if c.sh == nil {
		return "", nil
	}
	return c.groupFor(c.sh.holder.Load(), key)
}

// groupFor is GroupFor under map m.
func (c *Container) groupFor(m *shard.Map, key []byte) (string, error) {
	t := m.Table(c.def.Schema, c.def.Table)
	if t == nil {
		return m.Global, nil
	}
	if t.Column != c.sh.col {
		return "", c.errorf("%w: shard map version %d shards table %s by column %q, not by the key column %q",
			ErrNoShard, m.Version, t, t.Column, c.def.KeyColumn)
	}
	s, err := t.ShardOf(key, true)
	if err != nil {
		return "", c.errorf("%w: %w", ErrNoShard, err)
	}
	return s.Group, nil
}

// partFor is PartFor under map m.
func (c *Container) partFor(ctx context.Context, m *shard.Map, key []byte) (*Container, error) {
	group, err := c.groupFor(m, key)
	if err != nil {
		return nil, err
	}
	if p := (*c.sh.parts.Load())[group]; p != nil {
		return p, nil
	}
	return c.sh.openPart(ctx, c.def, group)
}

// checkedPart is a part whose table was checked, or nil: what is the table's and not a row's comes from it.
func (c *Container) checkedPart() *Container {
	for _, p := range *c.sh.order.Load() {
		if p.checked.Load() {
			return p
		}
	}
	return nil
}

// shardedGetMulti is GetMulti of a sharded container: one GetMulti per part holding some of keys, concurrently.
func (c *Container) shardedGetMulti(ctx context.Context, keys [][]byte) (map[string]Item, error) {
	m := c.sh.holder.Load()
	type share struct {
		p    *Container
		keys [][]byte
		out  map[string]Item
		err  error
	}
	var shares []*share
next:
	for _, k := range keys {
		p, err := c.partFor(ctx, m, k)
		if err != nil {
			return nil, err
		}
		for _, s := range shares {
			if s.p == p {
				s.keys = append(s.keys, k)
				continue next
			}
		}
		shares = append(shares, &share{p: p, keys: [][]byte{k}})
	}
	switch len(shares) {
	case 0:
		return map[string]Item{}, nil
	case 1:
		return shares[0].p.GetMulti(ctx, shares[0].keys)
	}
	var wg sync.WaitGroup
	for _, s := range shares[1:] {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.out, s.err = s.p.GetMulti(ctx, s.keys)
		}()
	}
	s0 := shares[0]
	s0.out, s0.err = s0.p.GetMulti(ctx, s0.keys)
	wg.Wait()
	out := s0.out
	for _, s := range shares {
		if s.err != nil {
			return nil, s.err
		}
		if s != s0 {
			for k, it := range s.out {
				out[k] = it
			}
		}
	}
	return out, nil
}

// shardedWriteRows is WriteRows (or WriteDistinctRows) of a sharded container: each part writes its rows,
// concurrently; a row no shard holds fails alone (ErrNoShard, which Refused reports).
func (c *Container) shardedWriteRows(ctx context.Context, rows []Row, distinct bool) []error {
	errs := make([]error, len(rows))
	m := c.sh.holder.Load()
	type share struct {
		p    *Container
		idx  []int
		rows []Row
	}
	var shares []*share
next:
	for i, r := range rows {
		p, err := c.partFor(ctx, m, r.Key)
		if err != nil {
			errs[i] = err
			continue
		}
		for _, s := range shares {
			if s.p == p {
				s.idx, s.rows = append(s.idx, i), append(s.rows, r)
				continue next
			}
		}
		shares = append(shares, &share{p: p, idx: []int{i}, rows: []Row{r}})
	}
	var wg sync.WaitGroup
	for _, s := range shares {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j, err := range s.p.writeRows(ctx, s.rows, distinct) {
				errs[s.idx[j]] = err
			}
		}()
	}
	wg.Wait()
	return errs
}

// shardedNotChecked is NotChecked of a sharded container: nil once every part is checked, else the first
// unchecked part's error.
func (c *Container) shardedNotChecked() error {
	for _, p := range *c.sh.order.Load() {
		if err := p.notLive(); err != nil {
			return err
		}
	}
	return nil
}

// shardedStats sums the parts' counters.
func (c *Container) shardedStats() Stats {
	var st Stats
	for _, p := range *c.sh.order.Load() {
		ps := p.Stats()
		st.Batches += ps.Batches
		st.BatchedSets += ps.BatchedSets
	}
	return st
}

// shardedTruncate truncates the table on every shard group (each part once).
func (c *Container) shardedTruncate(ctx context.Context) error {
	var errs []error
	for _, p := range *c.sh.order.Load() {
		if err := p.Truncate(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// shardedClose closes every part.
func (c *Container) shardedClose() error {
	c.sh.mu.Lock() // no part opens after this
	defer c.sh.mu.Unlock()
	var errs []error
	for _, p := range *c.sh.order.Load() {
		if err := p.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	c.sh.open = func(context.Context, Def, string) (*Container, error) { return nil, ErrClosed }
	return errors.Join(errs...)
}
