package engine

import (
	"context"
	"database/sql"
	"testing"

	"github.com/keywaydb/keyway/internal/container"
	"github.com/keywaydb/keyway/internal/store"
	"github.com/keywaydb/keyway/internal/testenv"
)

// openTestContainer creates test.<table> (k, v) and a container name over it.
func openTestContainer(t *testing.T, name, table string) *container.Container {
	t.Helper()
	live := testenv.SharedDB(t)
	for _, q := range []string{"DROP TABLE IF EXISTS test." + table,
		"CREATE TABLE test." + table + " (k VARCHAR(32) PRIMARY KEY, v VARCHAR(64))"} {
		if _, err := live.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	db, err := sql.Open("mysql", testenv.SharedMariaDB(t).AppDSN)
	if err != nil {
		t.Fatal(err)
	}
	c, err := container.Open(context.Background(), db, container.Def{Name: name, Schema: "test", Table: table,
		KeyColumn: "k", ValueColumns: []string{"v"}}, container.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); db.Close() })
	return c
}

func rowValue(t *testing.T, table, k string) (string, bool) {
	t.Helper()
	var v string
	err := testenv.SharedDB(t).QueryRow("SELECT v FROM test."+table+" WHERE k = ?", k).Scan(&v)
	if err == sql.ErrNoRows {
		return "", false
	}
	if err != nil {
		t.Fatal(err)
	}
	return v, true
}

// TestRefusedSetDropsTheKeysOwnCopy: a set refused as too large drops the
// old value where the key lives. For a cache_only container named default
// that is "@@default.k", not the bare key (the refusal once dropped the bare
// key, leaving the old value to be served).
func TestRefusedSetDropsTheKeysOwnCopy(t *testing.T) {
	c := openTestContainer(t, "default", "engine_ks_default")
	st, err := store.Open(store.Options{MemoryLimit: 16 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	e := New(st, Options{MaxItemSize: 16})
	all := container.Policies{Get: container.CacheOnly, Set: container.CacheOnly, Delete: container.CacheOnly, Flush: container.CacheOnly}
	e.SetContainers([]*Table{e.NewContainer(ContainerOptions{Container: c, Policies: all})}, "default")
	for _, refuse := range []func(){
		func() { e.RefuseTooLarge(Set, []byte("k")) },
		func() {
			if status, _, _ := e.StoreValue([]byte("k"), make([]byte, 17), StoreRequest{}); status != TooLarge {
				t.Fatalf("oversized set: %v", status)
			}
		},
		func() {
			if status, _, _ := e.MetaSet([]byte("k"), make([]byte, 17), StoreRequest{}); status != TooLarge {
				t.Fatalf("oversized ms: %v", status)
			}
		},
	} {
		engineSet(t, e, "k")
		refuse()
		if engineHas(t, e, "k") {
			t.Fatal("the old value survived a set refused as too large")
		}
	}
	if _, ok := rowValue(t, "engine_ks_default", "k"); ok {
		t.Fatal("a cache_only container wrote its table")
	}
}

// TestKeySpacesFollowPolicies: each operation class goes to the space its
// policy names: a caching container's sets and deletes reach the table and
// its reads are cached; a cache_only container and plain keys stay in the
// store; a multi-get over all of them answers each from its own space.
func TestKeySpacesFollowPolicies(t *testing.T) {
	rows := openTestContainer(t, "rows", "engine_ks_rows")
	local := openTestContainer(t, "loc", "engine_ks_loc")
	st, err := store.Open(store.Options{MemoryLimit: 16 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	e := New(st, Options{})
	caching := container.Policies{Get: container.Caching, Set: container.Caching, Delete: container.Caching, Flush: container.CacheOnly}
	cacheOnly := container.Policies{Get: container.CacheOnly, Set: container.CacheOnly, Delete: container.CacheOnly, Flush: container.CacheOnly}
	e.SetContainers([]*Table{e.NewContainer(ContainerOptions{Container: rows, Policies: caching}), e.NewContainer(ContainerOptions{Container: local, Policies: cacheOnly})}, "default")

	engineSet(t, e, "@@rows.a")
	engineSet(t, e, "@@loc.a")
	if _, ok := rowValue(t, "engine_ks_rows", "a"); !ok {
		t.Fatal("a caching container's set did not reach its table")
	}
	if _, ok := rowValue(t, "engine_ks_loc", "a"); ok {
		t.Fatal("a cache_only container's set reached its table")
	}
	if !engineHas(t, e, "@@rows.a") || !engineHas(t, e, "@@loc.a") {
		t.Fatal("set keys not readable")
	}
	if _, _, _, ok := e.MetaDebug([]byte("@@rows.a")); !ok {
		t.Fatal("a read of a caching row left no cached copy")
	}
	if _, err := testenv.SharedDB(t).Exec("INSERT INTO test.engine_ks_rows VALUES ('b', 'from-sql')"); err != nil {
		t.Fatal(err)
	}
	items, found, err := e.GetMulti([][]byte{[]byte("@@rows.b"), []byte("@@loc.a"), []byte("@@rows.a"), []byte("@@loc.b"), []byte("@@nope.x")})
	if err == nil {
		t.Fatal("multi-get with a missing container: no error")
	}
	if !found[0] || string(items[0].Value) != "from-sql" || !found[1] || !found[2] || found[3] || found[4] {
		t.Fatalf("multi-get: found %v", found)
	}
	if status, err := e.Delete([]byte("@@rows.a"), DeleteRequest{}); status != Deleted || err != nil {
		t.Fatalf("delete of a row: %v %v", status, err)
	}
	if _, ok := rowValue(t, "engine_ks_rows", "a"); ok {
		t.Fatal("delete did not reach the table")
	}
	if engineHas(t, e, "@@rows.a") {
		t.Fatal("deleted row still served from its cached copy")
	}
	// A meta command on a table row runs as the classic command; on a
	// cache_only container it has the full local semantics (N vivifies).
	if _, err := e.MetaGet([]byte("@@rows.z"), MetaGetRequest{Vivify: true}); KindOf(err) != ClientFault {
		t.Fatalf("mg N on a table row: %v, want a client error", err)
	}
	if res, err := e.MetaGet([]byte("@@loc.z"), MetaGetRequest{Vivify: true}); err != nil || !res.Created {
		t.Fatalf("mg N on a cache_only container: %+v %v", res, err)
	}
}
