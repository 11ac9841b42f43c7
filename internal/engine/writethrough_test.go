package engine

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/keywaydb/keyway/internal/container"
	"github.com/keywaydb/keyway/internal/store"
	"github.com/keywaydb/keyway/internal/testenv"
	"github.com/keywaydb/keyway/internal/validity"
)

// writeThroughRig is an engine with one caching container per value column of test.engine_wt, all on one table
// with flags, cas and expiry columns.
type writeThroughRig struct {
	db *sql.DB
	e  *Engine
	t  map[string]*Table // by value column
}

func newWriteThroughRig(t testing.TB, columns map[string]string) *writeThroughRig {
	t.Helper()
	db := testenv.SharedDB(t)
	create := "CREATE TABLE test.engine_wt (k VARCHAR(32) CHARACTER SET utf8mb4 PRIMARY KEY, fl INT UNSIGNED, cas BIGINT UNSIGNED, exp INT"
	for col, typ := range columns {
		create += ", " + col + " " + typ
	}
	for _, q := range []string{"DROP TABLE IF EXISTS test.engine_wt", create + ")"} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	st, err := store.Open(store.Options{MemoryLimit: 16 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	r := &writeThroughRig{db: db, e: New(st, Options{}), t: map[string]*Table{}}
	var all []*Table
	for col := range columns {
		c, err := container.Open(context.Background(), db, container.Def{Name: col, Schema: "test", Table: "engine_wt",
			KeyColumn: "k", ValueColumns: []string{col}, FlagsColumn: "fl", CASColumn: "cas", ExpiryColumn: "exp"}, container.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		tbl := r.e.NewContainer(ContainerOptions{Container: c, Policies: container.Policies{Get: container.Caching,
			Set: container.Caching, Delete: container.Caching, Flush: container.CacheOnly}})
		r.t[col] = tbl
		all = append(all, tbl)
	}
	r.e.SetContainers(all, "default")
	return r
}

// selectRow reads key's row of column col directly from MariaDB, as a fill would see it.
func (r *writeThroughRig) selectRow(t *testing.T, col, key string) store.Item {
	t.Helper()
	var it store.Item
	var v sql.RawBytes
	var exp sql.NullInt64
	rows, err := r.db.Query("SELECT "+col+", fl, cas, exp FROM test.engine_wt WHERE k = ?", key)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	if !rows.Next() {
		t.Fatalf("row %q is not in the table", key)
	}
	if err := rows.Scan(&v, &it.Flags, &it.CAS, &exp); err != nil {
		t.Fatal(err)
	}
	it.Value, it.Exptime = append([]byte{}, v...), exp.Int64
	return it
}

// validity is the validity state of tbl's table, as the engine's registry keeps it.
func (r *writeThroughRig) validity(tbl *Table) *validity.Table {
	def := tbl.C.Def()
	return r.e.validity.Table(validity.TableID{Schema: strings.ToLower(def.Schema), Name: strings.ToLower(def.Table)})
}

func sameItem(a, b store.Item) bool {
	return string(a.Value) == string(b.Value) && a.Flags == b.Flags && a.CAS == b.CAS && a.Exptime == b.Exptime
}

// TestSetWritesThroughCachingContainer: after a set on a caching container, the next get is answered by the local
// copy, and that copy is the row exactly as a SELECT returns it — value as the column keeps it, flags, CAS and
// expiry — for the column types keyway models. For those it does not (DECIMAL, text that a non-UTF-8 column
// converts), the copy is dropped and the get reads the table. The proof that a get used the copy: the row is changed
// behind keyway's back (no invalidation) before the get, and the get still answers the row keyway wrote.
func TestSetWritesThroughCachingContainer(t *testing.T) {
	r := newWriteThroughRig(t, map[string]string{
		"vtext":  "VARCHAR(20) CHARACTER SET utf8mb4",
		"vchar":  "CHAR(10) CHARACTER SET utf8mb4",
		"vbin":   "BINARY(6)",
		"vint":   "INT",
		"vlatin": "VARCHAR(20) CHARACTER SET latin1",
		"vdec":   "DECIMAL(6,2)",
	})
	cases := []struct {
		col, value, want string
		through          bool // the get is answered by the copy the set left
	}{
		{"vtext", "hello  ", "hello  ", true},      // VARCHAR keeps trailing spaces
		{"vtext", "日本語", "日本語", true},              // UTF-8 column, UTF-8 value
		{"vchar", "padded   ", "padded", true},     // CHAR drops them
		{"vbin", "ab", "ab\x00\x00\x00\x00", true}, // BINARY(6) pads with zero bytes
		{"vint", "+0042", "42", true},              // integers read back canonical
		{"vlatin", "plain ascii", "plain ascii", true},
		{"vlatin", "café", "café", false}, // converted to latin1 and back: keyway does not model it
		{"vdec", "1.5", "1.50", false},    // DECIMAL: not modelled
	}
	for i, c := range cases {
		key := fmt.Sprintf("k%d", i)
		mkey := []byte("@@" + c.col + "." + key)
		status, reply, err := r.e.StoreValue(mkey, []byte(c.value), StoreRequest{Flags: 7, TTL: 3600})
		if status != Stored || err != nil {
			t.Fatalf("%s %q: set: %v %v", c.col, c.value, status, err)
		}
		row := r.selectRow(t, c.col, key)
		if string(row.Value) != c.want {
			t.Fatalf("%s %q: the table holds %q, the case expects %q", c.col, c.value, row.Value, c.want)
		}
		if c.through && !sameItem(reply, row) {
			t.Errorf("%s %q: set replied %+v, the table's row is %+v", c.col, c.value, reply, row)
		}
		// Behind keyway's back, so no invalidation reaches the copy.
		if _, err := r.db.Exec("UPDATE test.engine_wt SET "+c.col+" = 42, cas = cas + 1 WHERE k = ?", key); err != nil {
			t.Fatal(err)
		}
		got, ok, err := r.e.Get(mkey)
		if !ok || err != nil {
			t.Fatalf("%s %q: get after set: found %v, %v", c.col, c.value, ok, err)
		}
		if c.through {
			if !sameItem(got, row) {
				t.Errorf("%s %q: get after set answered %+v, want the row as it was written %+v", c.col, c.value, got, row)
			}
		} else if sameItem(got, row) {
			t.Errorf("%s %q: get after set answered a copy keyway cannot know the table returns: %+v", c.col, c.value, got)
		}
	}

	// A value the column cannot hold is refused, and leaves neither a row nor a copy.
	if status, _, err := r.e.StoreValue([]byte("@@vchar.long"), []byte("eleven char"), StoreRequest{}); status == Stored || err == nil {
		t.Fatalf("11 characters into CHAR(10): %v %v, want refused", status, err)
	}
	if _, ok, err := r.e.Get([]byte("@@vchar.long")); ok || err != nil {
		t.Errorf("get after a refused set: found %v, %v", ok, err)
	}

	// Append and prepend leave a row keyway has not seen: the copy goes, the next get reads the table.
	if status, _, err := r.e.StoreValue([]byte("@@vtext.ap"), []byte("a"), StoreRequest{}); status != Stored || err != nil {
		t.Fatal(status, err)
	}
	if status, _, err := r.e.StoreValue([]byte("@@vtext.ap"), []byte("b"), StoreRequest{Mode: Append}); status != Stored || err != nil {
		t.Fatal(status, err)
	}
	if got, ok, _ := r.e.Get([]byte("@@vtext.ap")); !ok || !sameItem(got, r.selectRow(t, "vtext", "ap")) || string(got.Value) != "ab" {
		t.Errorf("get after append: %+v, the table has %+v", got, r.selectRow(t, "vtext", "ap"))
	}
}

// TestSetOvertakenByAnotherWriteLeavesNoCopy: a write committed after a set, whose invalidation (as the binlog
// follower delivers it) runs before the set updates its copy, must not be covered by the set's older value. The hook
// puts that write exactly in the window between the set's commit and its cache update.
func TestSetOvertakenByAnotherWriteLeavesNoCopy(t *testing.T) {
	r := newWriteThroughRig(t, map[string]string{"vtext": "VARCHAR(40) CHARACTER SET utf8mb4"})
	tbl := r.t["vtext"]
	testHookAfterTableWrite = func(c *Table, row []byte) {
		if _, err := r.db.Exec("UPDATE test.engine_wt SET vtext = 'direct, later', cas = cas + 1 WHERE k = ?", row); err != nil {
			t.Error(err)
		}
		r.validity(tbl).Wrote(tbl.C.AppendNormKey(nil, row))
	}
	defer func() { testHookAfterTableWrite = nil }()
	if status, _, err := r.e.StoreValue([]byte("@@vtext.race"), []byte("keyway, earlier"), StoreRequest{}); status != Stored || err != nil {
		t.Fatalf("set: %v %v", status, err)
	}
	testHookAfterTableWrite = nil
	got, ok, err := r.e.Get([]byte("@@vtext.race"))
	if want := r.selectRow(t, "vtext", "race"); !ok || err != nil || !sameItem(got, want) {
		t.Fatalf("get answered %+v (found %v, %v), the table holds %+v", got, ok, err, want)
	}
}

// TestHoldsRow: which binlog changes a caching container lets pass without invalidating its row (the echo of its own
// write does; anything else that leaves another row does not), for a copy, a write in flight, and a container with
// nothing of the row; and when the first answer is settled, so that the second application need not look again.
func TestHoldsRow(t *testing.T) {
	r := newWriteThroughRig(t, map[string]string{"vtext": "VARCHAR(40) CHARACTER SET utf8mb4", "vother": "VARCHAR(40)"})
	a, b := r.t["vtext"], r.t["vother"]
	vk := []byte("h")
	image := func(value string, flags int32, cas int64) validity.RowImage {
		return validity.RowImage{Columns: map[string]int{"k": 0, "fl": 1, "cas": 2, "exp": 3, "vtext": 4, "vother": 5},
			Values: []any{"h", flags, cas, int32(0), value, nil}}
	}
	holds := func(c *Table, img validity.RowImage, first bool) bool {
		h, _ := c.rows.HoldsRow(vk, img, first)
		return h
	}
	// A write in flight: the echo of exactly its row passes on its first application only, never settled (the
	// write will store its row after the follower looked).
	var inFlight []bool
	beforeSet := a.rows.Settling()
	testHookAfterTableWrite = func(c *Table, row []byte) {
		cas := int64(r.selectRow(t, "vtext", "h").CAS)
		h, settled := a.rows.HoldsRow(vk, image("mine", 7, cas), true)
		inFlight = []bool{h, settled, holds(a, image("mine", 7, cas), false), holds(a, image("other", 7, cas), true),
			a.rows.Settling() != beforeSet}
	}
	defer func() { testHookAfterTableWrite = nil }()
	if status, _, err := r.e.StoreValue([]byte("@@vtext.h"), []byte("mine"), StoreRequest{Flags: 7}); status != Stored || err != nil {
		t.Fatalf("set: %v %v", status, err)
	}
	testHookAfterTableWrite = nil
	if want := []bool{true, false, false, false, true}; !slices.Equal(inFlight, want) {
		t.Errorf("while the write is in flight, holds (its row, settled, its row again, another row; settling moved) = %v, want %v", inFlight, want)
	}

	// The copy it left: the row as written passes; another value, other flags or another CAS do not.
	cas := int64(r.selectRow(t, "vtext", "h").CAS)
	for _, c := range []struct {
		img  validity.RowImage
		want bool
	}{
		{image("mine", 7, cas), true},
		{image("mine ", 7, cas), false},
		{image("mine", 8, cas), false},
		{image("mine", 7, cas+1), false},
	} {
		if got := holds(a, c.img, false); got != c.want {
			t.Errorf("copy %q: holds(%v) = %v, want %v", "mine", c.img.Values, got, c.want)
		}
	}
	// Settled: the copy holds with nothing in flight; not while a read may store an older copy, nor on the second
	// application, nor when the copy does not hold.
	settled := func(c *Table, img validity.RowImage, first bool) []bool {
		h, s := c.rows.HoldsRow(vk, img, first)
		return []bool{h, s}
	}
	if got := settled(a, image("mine", 7, cas), true); !slices.Equal(got, []bool{true, true}) {
		t.Errorf("the copy's own row, nothing in flight: (holds, settled) = %v, want both", got)
	}
	if got := settled(a, image("mine", 7, cas), false); !slices.Equal(got, []bool{true, false}) {
		t.Errorf("the copy's own row, second application: (holds, settled) = %v, want [true false]", got)
	}
	if got := settled(a, image("other", 7, cas), true); !slices.Equal(got, []bool{false, false}) {
		t.Errorf("another row: (holds, settled) = %v, want neither", got)
	}
	// The follower asks this for every row it sees change: the image's decoding costs the value's copy alone.
	img := image("mine", 7, cas)
	if n := testing.AllocsPerRun(100, func() { a.C.FromImage(img.Value) }); n > 1 {
		t.Errorf("decoding a one-column row image allocated %.0f times, want at most 1 (its value)", n)
	}
	before := a.rows.Settling()
	a.rows.BeginFill()
	if a.rows.Settling() == before {
		t.Error("a read that may fill a copy does not move settling")
	}
	if got := settled(a, image("mine", 7, cas), true); !slices.Equal(got, []bool{true, false}) {
		t.Errorf("the copy's own row with a read in flight: (holds, settled) = %v, want [true false]", got)
	}
	a.rows.EndFill()
	// The other container on the table has no copy of the row: nothing to drop, unless a read may store one.
	if got := settled(b, image("mine", 7, cas), true); !slices.Equal(got, []bool{true, true}) {
		t.Errorf("a container with no copy of the row and nothing in flight: (holds, settled) = %v, want both", got)
	}
	b.rows.BeginFill()
	if holds(b, image("mine", 7, cas), true) {
		t.Error("a container with a read in flight lets a change pass: the read's older stamp would store the old row")
	}
	b.rows.EndFill()
	// Once invalidated, the copy does not hold, and a container whose copies a ttl bounds never does.
	r.validity(a).Wrote(vk)
	if !holds(a, image("mine", 7, cas), true) {
		t.Error("an invalid copy with nothing in flight: want it to pass (nothing to drop)")
	}
	a.rows.CopyTTL = time.Minute
	if holds(a, image("mine", 7, cas), true) {
		t.Error("a container with CopyTTL lets a change pass")
	}
}

// TestDBOnlyWriteDropsTheCopy: on a container whose gets keep copies but whose sets and deletes go to the table
// alone (db_only), a set, an incr, a touch and a delete through keyway each drop the row's copy, so the next get
// reads what the write left, not the copy from before it (no binlog follower here to invalidate it later).
func TestDBOnlyWriteDropsTheCopy(t *testing.T) {
	r := newWriteThroughRig(t, map[string]string{"v": "VARCHAR(20)"})
	c := r.t["v"]
	c.Policies.Set, c.Policies.Delete = container.DBOnly, container.DBOnly // before the container serves anything
	key := []byte("@@v.k")
	get := func(want string, found bool) {
		t.Helper()
		it, ok, err := r.e.Get(key)
		if err != nil || ok != found || string(it.Value) != want {
			t.Fatalf("get: %q %v %v, want %q %v", it.Value, ok, err, want, found)
		}
	}
	if st, _, err := r.e.StoreValue(key, []byte("1"), StoreRequest{Mode: Set}); err != nil || st != Stored {
		t.Fatalf("set: %v %v", st, err)
	}
	get("1", true) // fills the copy
	if r.toldOnGet(t, string(key)) {
		t.Fatal("no copy after a get that read the row")
	}
	if st, _, err := r.e.StoreValue(key, []byte("2"), StoreRequest{Mode: Set}); err != nil || st != Stored {
		t.Fatalf("set: %v %v", st, err)
	}
	get("2", true)
	if res, err := r.e.IncrDecr(key, Arith{Delta: 5}); err != nil || res.Status != Stored {
		t.Fatalf("incr: %+v %v", res, err)
	}
	get("7", true)
	if st, err := r.e.Delete(key, DeleteRequest{}); err != nil || st != Deleted {
		t.Fatalf("delete: %v %v", st, err)
	}
	get("", false)
}
