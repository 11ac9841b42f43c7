package engine

import (
	"context"
	"testing"

	"github.com/keywaydb/keyway/internal/container"
	"github.com/keywaydb/keyway/internal/writebehind"
)

// TestMayWait: a command may wait (for the table) unless the local store answers it: keys of no container, a read
// of a row whose valid copy is held, a plain set on a write = "async" container (queued); a read without a copy, a
// set that writes the table, and any other command on a table may.
func TestMayWait(t *testing.T) {
	r := newWriteThroughRig(t, map[string]string{"v": "VARCHAR(20)"})
	c, err := container.Open(context.Background(), r.db, container.Def{Name: "async", Schema: "test", Table: "engine_wt",
		KeyColumn: "k", ValueColumns: []string{"v"}, FlagsColumn: "fl", CASColumn: "cas", ExpiryColumn: "exp"}, container.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	async := r.e.NewContainer(ContainerOptions{Container: c, WriteBehind: &writebehind.Options{},
		Policies: container.Policies{Get: container.Caching, Set: container.Caching, Delete: container.Caching, Flush: container.CacheOnly}})
	t.Cleanup(func() { async.Behind.Close() })
	r.e.SetContainers([]*Container{r.t["v"], async}, "")

	check := func(key string, a Access, want bool) {
		t.Helper()
		if got := r.e.MayWait([]byte(key), a); got != want {
			t.Errorf("MayWait(%q, %d) = %v, want %v", key, a, got, want)
		}
	}
	for _, a := range []Access{AccessRead, AccessSet, AccessOther} {
		check("plain", a, false)
		check("@@missing.k", a, false) // answered at once: no such container
		check("@@v.k", a, true)        // no copy held; a set or delete writes the table
	}
	check("@@async.k", AccessSet, false)
	check("@@async.k", AccessOther, true)

	if st, _, err := r.e.StoreValue([]byte("@@v.k"), []byte("x"), StoreRequest{Mode: Set}); err != nil || st != Stored {
		t.Fatalf("set: %v %v", st, err)
	}
	check("@@v.k", AccessRead, false) // the set wrote its copy through
	check("@@v.K", AccessRead, false) // the same row, as the key column compares keys
	check("@@v.k", AccessSet, true)
	r.e.DroppedWrite(r.t["v"], []byte("k")) // drops the copy, as a refused write does
	check("@@v.k", AccessRead, true)
}
