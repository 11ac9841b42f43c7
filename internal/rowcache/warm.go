package rowcache

// Warm restart (package warm keeps the snapshot): Saveable says which copies are worth saving, and Restore puts one
// back as a fill would, under a stamp taken (BeginFill) before the binlog followers replay from the checkpoint
// saved with it.

import (
	"strings"

	"github.com/keywaydb/keyway/internal/store"
)

// Saveable reports whether the copy stored under key (the store's key: the prefix and the normalized row key) is a
// valid copy that the row's group could restore (validity.Gate.Restorable).
func (c *Cache) Saveable(key string, it store.Item) bool {
	return c.caching && it.Ephemeral && strings.HasPrefix(key, c.prefix) && c.restorable(key) &&
		c.v.KeyValid([]byte(key[len(c.prefix):]), it.Tag)
}

// restorable reports whether the group of the row stored under key (which has the prefix) could restore its copy:
// the container's group, or the group of the row's shard (Options.GateOf; the stored key is the normalized row
// key, which a shard map routes as the row key).
func (c *Cache) restorable(key string) bool {
	if c.gateOf == nil {
		return c.gate.Restorable()
	}
	g, ok := c.gateOf([]byte(key[len(c.prefix):]))
	return ok && g.Restorable()
}

// Restore stores a saved copy under key, stamped at stamp (BeginFill's, taken before the binlog followers started),
// unless its row was invalidated since or its group's gate will not vouch for it (validity.Gate.Restorable: no
// follower and no ttl). It reports whether the copy was stored.
func (c *Cache) Restore(key string, it store.Item, stamp uint64) bool {
	if !c.caching || !strings.HasPrefix(key, c.prefix) || !c.restorable(key) {
		return false
	}
	if c.queue != nil && c.queue.Stats().Pending > 0 {
		// Writes acknowledged before a crash are still queued (replayed from the journal) and copies are not
		// checked against the queue: a restored copy could hide one.
		return false
	}
	it.LastAccess, it.Fetched, it.Stale, it.WinSent = 0, false, false, false
	return c.storeCopy([]byte(key), it, stamp)
}
