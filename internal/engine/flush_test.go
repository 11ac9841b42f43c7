package engine

import (
	"errors"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/cockroachdb/pebble/vfs"
	"github.com/cockroachdb/pebble/vfs/errorfs"
	"github.com/keywaydb/keyway/internal/store"
)

func engineSet(t *testing.T, e *Engine, key string) {
	t.Helper()
	if st, _, err := e.StoreValue([]byte(key), []byte("v"), StoreRequest{}); err != nil || st != Stored {
		t.Fatalf("set %s: %v %v", key, st, err)
	}
}

func engineHas(t *testing.T, e *Engine, key string) bool {
	t.Helper()
	_, ok, err := e.Get([]byte(key))
	if err != nil {
		t.Fatal(err)
	}
	return ok
}

// TestFlushAllDelayedReplaced: two delayed flush_alls leave one deadline, the
// second's, on the engine's clock; the first's passes without effect.
// (A timer per flush_all once fired on the wall clock and could outlive its replacement.)
func TestFlushAllDelayedReplaced(t *testing.T) {
	e, now := newMetaEngine(t)
	t0 := now.Load()
	engineSet(t, e, "a")
	if err := e.FlushAll(100); err != nil {
		t.Fatal(err)
	}
	if err := e.FlushAll(10); err != nil {
		t.Fatal(err)
	}
	now.Store(t0 + 9)
	if !engineHas(t, e, "a") {
		t.Fatal("flushed before the deadline")
	}
	now.Store(t0 + 10)
	if engineHas(t, e, "a") {
		t.Fatal("a still there at the second flush_all's deadline")
	}
	engineSet(t, e, "b")
	now.Store(t0 + 100)
	if !engineHas(t, e, "b") {
		t.Fatal("the replaced flush_all fired at its old deadline")
	}
	// An absolute deadline (over 30 days) works the same way.
	if err := e.FlushAll(t0 + 200); err != nil {
		t.Fatal(err)
	}
	now.Store(t0 + 200)
	if engineHas(t, e, "b") {
		t.Fatal("b still there at the absolute deadline")
	}
}

// TestFlushAllDelayedTakesItemsSetBeforeDeadline is memcached's rule: an item
// set after "flush_all 10" but before its deadline is gone at the deadline;
// one set at the deadline stays.
func TestFlushAllDelayedTakesItemsSetBeforeDeadline(t *testing.T) {
	e, now := newMetaEngine(t)
	t0 := now.Load()
	if err := e.FlushAll(10); err != nil {
		t.Fatal(err)
	}
	now.Store(t0 + 5)
	engineSet(t, e, "between")
	if !engineHas(t, e, "between") {
		t.Fatal("item set before the deadline missing before it")
	}
	now.Store(t0 + 10)
	if engineHas(t, e, "between") {
		t.Fatal("item set between flush_all and its deadline survived it")
	}
	engineSet(t, e, "after")
	if !engineHas(t, e, "after") {
		t.Fatal("item set at the deadline is gone")
	}
}

// TestFlushAllDelayedRefusedOnFailedDisk: on a failed disk a delayed
// flush_all is refused (an error, nothing flushed), as an immediate one is.
func TestFlushAllDelayedRefusedOnFailedDisk(t *testing.T) {
	var full atomic.Bool
	fs := errorfs.Wrap(vfs.Default, errorfs.InjectorFunc(func(op errorfs.Op, path string) error {
		if full.Load() && (op == errorfs.OpFileWrite || op == errorfs.OpFileSync) && strings.HasSuffix(path, ".log") {
			return syscall.ENOSPC
		}
		return nil
	}))
	now := new(atomic.Int64)
	now.Store(testEpoch)
	st, err := store.Open(store.Options{MemoryLimit: 16 << 20, DataDir: t.TempDir(), Durability: store.DurabilitySync, FS: fs, Now: now.Load})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	e := New(st, Options{})
	engineSet(t, e, "kept")
	full.Store(true)
	if _, _, err := e.StoreValue([]byte("x"), []byte("v"), StoreRequest{}); !errors.Is(err, store.ErrPersist) {
		t.Fatalf("set on a full disk: %v, want ErrPersist", err)
	}
	if err := e.FlushAll(10); !errors.Is(err, store.ErrPersist) {
		t.Fatalf("delayed flush_all on a failed disk: %v, want ErrPersist", err)
	}
	now.Add(10)
	if !engineHas(t, e, "kept") {
		t.Fatal("refused delayed flush_all flushed anyway")
	}
}
