package engine

import "github.com/keywaydb/keyway/internal/store"

// The local store as the doors see it: its counters and clock for stats, a walk of its items for memcached's
// crawler commands, and its memory limit (cache_memlimit). Doors reach the store only through these.

// StoreStats are the local store's counters and limit.
func (e *Engine) StoreStats() store.Stats { return e.st.Stats() }

// ClassStats are the local store's items by size class (memcached's slab classes).
func (e *Engine) ClassStats() [store.NumClasses]store.ClassStats { return e.st.ClassStats() }

// Persistent reports whether the local store keeps its items on disk.
func (e *Engine) Persistent() bool { return e.st.Persistent() }

// WaitsForDisk reports whether a write to the local store waits for the disk (durability sync).
func (e *Engine) WaitsForDisk() bool { return e.st.WaitsForDisk() }

// Now is the engine's clock, Unix seconds: the one exptimes and last accesses are read against.
func (e *Engine) Now() int64 { return e.st.Now() }

// WalkItems calls fn with every live item of the local store (cached rows' copies included) until fn returns
// false, one shard at a time, for memcached's crawler commands (lru_crawler metadump, stats cachedump); fn may
// block (see store.Store.Walk).
func (e *Engine) WalkItems(fn func(key string, it store.Item) bool) { e.st.Walk(fn) }

// SetMemoryLimit changes the local store's memory limit at once (cache_memlimit); a lower one evicts what no longer
// fits.
func (e *Engine) SetMemoryLimit(bytes int64) error { return e.st.SetLimit(bytes) }
