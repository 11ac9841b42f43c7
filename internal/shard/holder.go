package shard

import (
	"fmt"
	"sync"
	"sync/atomic"
)

// Holder holds the current Map. Load is one atomic load, for every statement and key; Store swaps in a whole new
// Map, so a reader sees the old map or the new one, never a mix. A statement keeps the *Map it loaded for as long
// as it runs (and a transaction the shard it started on): a swap changes only what later lookups see.
type Holder struct {
	cur atomic.Pointer[Map]
	mu  sync.Mutex // serializes Store
}

// Load returns the current map (nil before the first Store).
func (h *Holder) Load() *Map { return h.cur.Load() }

// Store makes m the current map, under these rules about versions, and reports whether it swapped:
//   - A map equal to the current one (Map.Equal) changes nothing: the current map and its version stay, whatever
//     m.Version says, unless m.Version is higher (an operator bumped map_version alone): then m is stored.
//   - m.Version == 0 (a map from the config, which has no version of its own) is stored as version current+1 (1 for
//     the first map). m itself is not changed: a copy carries the version.
//   - Otherwise m.Version must exceed the current version; a different map with a version not above it is an
//     error, and the current map stays (a table map edited without bumping map_version, or a late reload of an
//     older map).
func (h *Holder) Store(m *Map) (swapped bool, err error) {
	if m == nil {
		return false, fmt.Errorf("shard: Holder.Store(nil)")
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	cur := h.cur.Load()
	switch {
	case cur == nil:
	case m.Version == 0:
		if m.Equal(cur) {
			return false, nil
		}
	case m.Version <= cur.Version:
		if m.Equal(cur) {
			return false, nil
		}
		return false, fmt.Errorf("shard map version %d changes the map of version %d without a higher version: bump map_version with the change", m.Version, cur.Version)
	}
	if m.Version == 0 {
		c := *m
		c.Version = 1
		if cur != nil {
			c.Version = cur.Version + 1
		}
		m = &c
	}
	h.cur.Store(m)
	return true, nil
}
