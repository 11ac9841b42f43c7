package container

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/keywaydb/keyway/internal/testenv"
)

func TestMain(m *testing.M) { os.Exit(testenv.RunWithSharedMariaDB(m)) }

var ctx = context.Background()

func openDB(t testing.TB) *sql.DB {
	t.Helper()
	db := testenv.SharedDB(t)
	db.SetMaxOpenConns(16)
	return db
}

func exec(t testing.TB, db *sql.DB, q string, args ...any) {
	t.Helper()
	if _, err := db.Exec(q, args...); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

// demo creates the plugin's demo table under name and opens a container on it.
func demo(t testing.TB, db *sql.DB, name string) *Container {
	t.Helper()
	exec(t, db, "DROP TABLE IF EXISTS test."+name)
	exec(t, db, "CREATE TABLE test."+name+" (c1 VARCHAR(32) PRIMARY KEY, c2 VARCHAR(1024), c3 INT UNSIGNED, c4 BIGINT UNSIGNED, c5 INT UNSIGNED)")
	c, err := Open(ctx, db, Def{Name: "aaa", Schema: "test", Table: name, KeyColumn: "c1", ValueColumns: []string{"c2"},
		FlagsColumn: "c3", CASColumn: "c4", ExpiryColumn: "c5"}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

type row struct {
	v          string
	flags, exp int64
	cas        uint64
	found      bool
}

func readDemo(t *testing.T, db *sql.DB, table, key string) row {
	t.Helper()
	var r row
	var v sql.NullString
	var flags, exp sql.NullInt64
	var cas sql.Null[uint64]
	err := db.QueryRow("SELECT c2, c3, c4, c5 FROM test."+table+" WHERE c1 = ?", key).Scan(&v, &flags, &cas, &exp)
	if errors.Is(err, sql.ErrNoRows) {
		return r
	}
	if err != nil {
		t.Fatal(err)
	}
	return row{v: v.String, flags: flags.Int64, exp: exp.Int64, cas: cas.V, found: true}
}

func must[T any](t *testing.T) func(T, error) T {
	return func(v T, err error) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

func wantStatus(t *testing.T, what string, got, want Status, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if got != want {
		t.Fatalf("%s: status %v, want %v", what, got, want)
	}
}

func TestDemoOperations(t *testing.T) {
	db := openDB(t)
	c := demo(t, db, "demo_test")
	k := []byte("AA")

	cas1 := must[uint64](t)(c.Set(ctx, k, Item{Value: []byte("HELLO, HELLO"), Flags: 7}))
	if r := readDemo(t, db, "demo_test", "AA"); r != (row{v: "HELLO, HELLO", flags: 7, cas: cas1, found: true}) {
		t.Fatalf("row after set: %+v (cas %d)", r, cas1)
	}
	it, ok, err := c.Get(ctx, k)
	if err != nil || !ok || string(it.Value) != "HELLO, HELLO" || it.Flags != 7 || it.CAS != cas1 {
		t.Fatalf("get: %+v %v %v", it, ok, err)
	}
	if _, ok, _ := c.Get(ctx, []byte("nope")); ok {
		t.Fatal("get of a missing key hit")
	}

	// add
	_, st, err := c.Add(ctx, k, Item{Value: []byte("x")})
	wantStatus(t, "add existing", st, NotStored, err)
	_, st, err = c.Add(ctx, []byte("BB"), Item{Value: []byte("bee"), Flags: 1})
	wantStatus(t, "add new", st, Stored, err)
	if r := readDemo(t, db, "demo_test", "BB"); r.v != "bee" || r.flags != 1 {
		t.Fatalf("row after add: %+v", r)
	}

	// replace
	_, st, err = c.Replace(ctx, []byte("CC"), Item{Value: []byte("x")})
	wantStatus(t, "replace missing", st, NotStored, err)
	if readDemo(t, db, "demo_test", "CC").found {
		t.Fatal("replace of a missing key made a row")
	}
	_, st, err = c.Replace(ctx, []byte("BB"), Item{Value: []byte("bee2"), Flags: 2})
	wantStatus(t, "replace existing", st, Stored, err)
	if r := readDemo(t, db, "demo_test", "BB"); r.v != "bee2" || r.flags != 2 {
		t.Fatalf("row after replace: %+v", r)
	}

	// append / prepend
	_, st, err = c.Append(ctx, []byte("BB"), Item{Value: []byte(">")})
	wantStatus(t, "append", st, Stored, err)
	_, st, err = c.Prepend(ctx, []byte("BB"), Item{Value: []byte("<")})
	wantStatus(t, "prepend", st, Stored, err)
	if r := readDemo(t, db, "demo_test", "BB"); r.v != "<bee2>" || r.flags != 2 {
		t.Fatalf("row after append/prepend: %+v", r)
	}
	_, st, err = c.Append(ctx, []byte("CC"), Item{Value: []byte(">")})
	wantStatus(t, "append missing", st, NotStored, err)

	// cas
	it, _, _ = c.Get(ctx, []byte("BB"))
	newCAS, st, err := c.CompareAndSwap(ctx, []byte("BB"), Item{Value: []byte("swapped")}, it.CAS)
	wantStatus(t, "cas fresh", st, Stored, err)
	if r := readDemo(t, db, "demo_test", "BB"); r.v != "swapped" || r.cas != newCAS || newCAS <= it.CAS {
		t.Fatalf("row after cas: %+v, cas %d (old %d)", r, newCAS, it.CAS)
	}
	_, st, err = c.CompareAndSwap(ctx, []byte("BB"), Item{Value: []byte("stale")}, it.CAS)
	wantStatus(t, "cas stale", st, Exists, err)
	if r := readDemo(t, db, "demo_test", "BB"); r.v != "swapped" {
		t.Fatalf("stale cas wrote: %+v", r)
	}
	_, st, err = c.CompareAndSwap(ctx, []byte("CC"), Item{Value: []byte("x")}, 1)
	wantStatus(t, "cas missing", st, NotFound, err)

	// incr / decr
	must[uint64](t)(c.Set(ctx, []byte("n"), Item{Value: []byte("10"), Flags: 3}))
	n, st, err := c.IncrDecr(ctx, []byte("n"), 5, false)
	wantStatus(t, "incr", st, Stored, err)
	if r := readDemo(t, db, "demo_test", "n"); n != 15 || r.v != "15" || r.flags != 3 {
		t.Fatalf("incr: %d, row %+v", n, r)
	}
	n, st, err = c.IncrDecr(ctx, []byte("n"), 100, true)
	wantStatus(t, "decr", st, Stored, err)
	if r := readDemo(t, db, "demo_test", "n"); n != 0 || r.v != "0" {
		t.Fatalf("decr below 0: %d, row %+v", n, r)
	}
	must[uint64](t)(c.Set(ctx, []byte("n"), Item{Value: []byte("18446744073709551615")}))
	n, st, err = c.IncrDecr(ctx, []byte("n"), 2, false)
	wantStatus(t, "incr wrap", st, Stored, err)
	if r := readDemo(t, db, "demo_test", "n"); n != 1 || r.v != "1" {
		t.Fatalf("incr wrap: %d, row %+v", n, r)
	}
	_, st, err = c.IncrDecr(ctx, []byte("AA"), 1, false)
	wantStatus(t, "incr non-numeric", st, NonNumeric, err)
	_, st, err = c.IncrDecr(ctx, []byte("CC"), 1, false)
	wantStatus(t, "incr missing", st, NotFound, err)

	// touch
	exp := time.Now().Add(time.Hour).Unix()
	st, err = c.Touch(ctx, []byte("AA"), exp)
	wantStatus(t, "touch", st, Touched, err)
	if r := readDemo(t, db, "demo_test", "AA"); r.exp != exp {
		t.Fatalf("row after touch: %+v", r)
	}
	st, err = c.Touch(ctx, []byte("AA"), exp) // same value again: still touched
	wantStatus(t, "touch again", st, Touched, err)
	st, err = c.Touch(ctx, []byte("CC"), exp)
	wantStatus(t, "touch missing", st, NotFound, err)

	// get multi: one IN list, missing keys absent
	got := must[map[string]Item](t)(c.GetMulti(ctx, [][]byte{[]byte("AA"), []byte("BB"), []byte("CC"), []byte("AA")}))
	if len(got) != 2 || string(got["AA"].Value) != "HELLO, HELLO" || string(got["BB"].Value) != "swapped" {
		t.Fatalf("getmulti: %v", got)
	}

	// delete
	st, err = c.Delete(ctx, []byte("BB"))
	wantStatus(t, "delete", st, Deleted, err)
	if readDemo(t, db, "demo_test", "BB").found {
		t.Fatal("row survived delete")
	}
	st, err = c.Delete(ctx, []byte("BB"))
	wantStatus(t, "delete missing", st, NotFound, err)

	// truncate
	if err := c.Truncate(ctx); err != nil {
		t.Fatal(err)
	}
	var count int
	must[int](t)(0, db.QueryRow("SELECT COUNT(*) FROM test.demo_test").Scan(&count))
	if count != 0 {
		t.Fatalf("%d rows after truncate", count)
	}
}

func TestExpiry(t *testing.T) {
	db := openDB(t)
	c := demo(t, db, "demo_expiry")
	past := time.Now().Add(-time.Minute).Unix()
	must[uint64](t)(c.Set(ctx, []byte("old"), Item{Value: []byte("v"), Exptime: past}))
	if r := readDemo(t, db, "demo_expiry", "old"); !r.found || r.exp != past {
		t.Fatalf("expired set not written: %+v", r)
	}
	if _, ok, err := c.Get(ctx, []byte("old")); ok || err != nil {
		t.Fatalf("expired row hit: %v %v", ok, err)
	}
	if got, _ := c.GetMulti(ctx, [][]byte{[]byte("old")}); len(got) != 0 {
		t.Fatalf("expired row in getmulti: %v", got)
	}
	for _, op := range []struct {
		name string
		f    func() (Status, error)
		want Status
	}{
		{"replace", func() (Status, error) {
			_, s, e := c.Replace(ctx, []byte("old"), Item{Value: []byte("x")})
			return s, e
		}, NotStored},
		{"append", func() (Status, error) { _, s, e := c.Append(ctx, []byte("old"), Item{Value: []byte("x")}); return s, e }, NotStored},
		{"cas", func() (Status, error) { _, s, e := c.CompareAndSwap(ctx, []byte("old"), Item{}, 1); return s, e }, NotFound},
		{"incr", func() (Status, error) { _, s, e := c.IncrDecr(ctx, []byte("old"), 1, false); return s, e }, NotFound},
		{"touch", func() (Status, error) { return c.Touch(ctx, []byte("old"), 0) }, NotFound},
	} {
		st, err := op.f()
		wantStatus(t, op.name+" on expired", st, op.want, err)
	}
	// add over an expired row stores
	_, st, err := c.Add(ctx, []byte("old"), Item{Value: []byte("fresh")})
	wantStatus(t, "add over expired", st, Stored, err)
	if r := readDemo(t, db, "demo_expiry", "old"); r.v != "fresh" || r.exp != 0 {
		t.Fatalf("row after add over expired: %+v", r)
	}
	// a future expiry is a hit, then a miss once passed
	soon := time.Now().Unix() + 2
	must[uint64](t)(c.Set(ctx, []byte("soon"), Item{Value: []byte("v"), Exptime: soon}))
	if _, ok, _ := c.Get(ctx, []byte("soon")); !ok {
		t.Fatal("unexpired row missed")
	}
	time.Sleep(time.Until(time.Unix(soon, 0)) + 50*time.Millisecond)
	if _, ok, _ := c.Get(ctx, []byte("soon")); ok {
		t.Fatal("row hit after its exptime")
	}
	st, err = c.Delete(ctx, []byte("soon"))
	wantStatus(t, "delete expired", st, NotFound, err)
	if readDemo(t, db, "demo_expiry", "soon").found {
		t.Fatal("delete left the expired row")
	}
}

func TestTwoValueColumns(t *testing.T) {
	db := openDB(t)
	exec(t, db, "DROP TABLE IF EXISTS test.two")
	exec(t, db, "CREATE TABLE test.two (k VARBINARY(64) NOT NULL, a VARCHAR(16), b TEXT, f INT UNSIGNED, UNIQUE KEY (k))")
	c, err := Open(ctx, db, Def{Name: "two", Schema: "test", Table: "two", KeyColumn: "k", ValueColumns: []string{"a", "b"},
		Separator: ",", FlagsColumn: "f"}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	read := func(k string) (string, string) {
		t.Helper()
		var a, b string
		must[int](t)(0, db.QueryRow("SELECT a, b FROM test.two WHERE k = ?", k).Scan(&a, &b))
		return a, b
	}
	cas := must[uint64](t)(c.Set(ctx, []byte("k1"), Item{Value: []byte("x,y|z"), Flags: 9}))
	if a, b := read("k1"); a != "x" || b != "y|z" {
		t.Fatalf("split: %q %q", a, b)
	}
	if cas != hashCAS([]byte("x,y|z"), 9) {
		t.Fatalf("cas %d is not the value hash", cas)
	}
	must[uint64](t)(c.Set(ctx, []byte("k2"), Item{Value: []byte("only")}))
	if a, b := read("k2"); a != "only" || b != "" {
		t.Fatalf("fill: %q %q", a, b)
	}
	it, ok, err := c.Get(ctx, []byte("k2"))
	if err != nil || !ok || string(it.Value) != "only," {
		t.Fatalf("get joined: %q %v %v", it.Value, ok, err)
	}
	if _, err := c.Set(ctx, []byte("k3"), Item{Value: []byte("1,2,3")}); !errors.Is(err, ErrTooManyValues) || !strings.Contains(err.Error(), `"two"`) {
		t.Fatalf("too many parts: %v", err)
	}
	// cas without a cas column: hash of value and flags, checked in a transaction
	it, _, _ = c.Get(ctx, []byte("k1"))
	if it.CAS != cas {
		t.Fatalf("get cas %d, set cas %d", it.CAS, cas)
	}
	_, st, err := c.CompareAndSwap(ctx, []byte("k1"), Item{Value: []byte("p,q")}, cas+1)
	wantStatus(t, "cas stale", st, Exists, err)
	_, st, err = c.CompareAndSwap(ctx, []byte("k1"), Item{Value: []byte("p,q")}, cas)
	wantStatus(t, "cas fresh", st, Stored, err)
	if a, b := read("k1"); a != "p" || b != "q" {
		t.Fatalf("after cas: %q %q", a, b)
	}
	_, st, err = c.Append(ctx, []byte("k1"), Item{Value: []byte("!")})
	wantStatus(t, "append", st, Stored, err)
	_, st, err = c.Prepend(ctx, []byte("k1"), Item{Value: []byte("@")})
	wantStatus(t, "prepend", st, Stored, err)
	if a, b := read("k1"); a != "@p" || b != "q!" {
		t.Fatalf("after append/prepend: %q %q", a, b)
	}
	_, st, err = c.Replace(ctx, []byte("k1"), Item{Value: []byte("@p,q!")}) // same content: still stored
	wantStatus(t, "replace same", st, Stored, err)
	_, st, err = c.Add(ctx, []byte("k1"), Item{Value: []byte("n")})
	wantStatus(t, "add existing", st, NotStored, err)
	must[uint64](t)(c.Set(ctx, []byte("n"), Item{Value: []byte("41")}))
	n, st, err := c.IncrDecr(ctx, []byte("n"), 1, false)
	wantStatus(t, "incr joined value", st, NonNumeric, err) // "41," is not a number
	_ = n
	got := must[map[string]Item](t)(c.GetMulti(ctx, [][]byte{[]byte("k1"), []byte("k2"), []byte("zz")}))
	if len(got) != 2 || string(got["k1"].Value) != "@p,q!" {
		t.Fatalf("getmulti: %v", got)
	}
	st, err = c.Delete(ctx, []byte("k2"))
	wantStatus(t, "delete", st, Deleted, err)
	st, err = c.Touch(ctx, []byte("k1"), 5) // no expiry column: existence only
	wantStatus(t, "touch", st, Touched, err)
}

func TestTooLong(t *testing.T) {
	db := openDB(t)
	c := demo(t, db, "demo_long")
	long := []byte(strings.Repeat("v", 1025))
	// Checked before any SQL, against the column's length from information_schema.
	_, err := c.Set(ctx, []byte("k"), Item{Value: long})
	if !errors.Is(err, ErrValueTooLong) || !strings.Contains(err.Error(), `"aaa"`) || !strings.Contains(err.Error(), "c2 holds 1024 characters") {
		t.Fatalf("set too long: %v", err)
	}
	if err := c.Check([]byte("k"), Item{Value: long}); !errors.Is(err, ErrValueTooLong) {
		t.Fatalf("check too long: %v", err)
	}

	if readDemo(t, db, "demo_long", "k").found {
		t.Fatal("too-long value written")
	}
	if _, _, err := c.Add(ctx, []byte("k"), Item{Value: long}); !errors.Is(err, ErrValueTooLong) {
		t.Fatalf("add too long: %v", err)
	}
	must[uint64](t)(c.Set(ctx, []byte("k"), Item{Value: long[:1024]}))
	if _, _, err := c.Append(ctx, []byte("k"), Item{Value: []byte("x")}); !errors.Is(err, ErrValueTooLong) {
		t.Fatalf("append too long: %v", err)
	}
	longKey := []byte(strings.Repeat("k", 33))
	if _, err := c.Set(ctx, longKey, Item{Value: []byte("v")}); !errors.Is(err, ErrKeyTooLong) {
		t.Fatalf("set long key: %v", err)
	}
	if _, _, err := c.Get(ctx, longKey); !errors.Is(err, ErrKeyTooLong) {
		t.Fatalf("get long key: %v", err)
	}
	if _, err := c.Set(ctx, []byte(strings.Repeat("é", 32)), Item{Value: []byte("v")}); err != nil {
		t.Fatalf("32 two-byte characters fit VARCHAR(32): %v", err)
	}

	// In a group-committed batch, one value the server refuses fails only its
	// own Set. keyway's own length check is switched off to reach the server.
	c.valCols[0].maxChars, c.valCols[0].maxOctets = 0, 0
	var me *mysql.MySQLError
	if _, err := c.Set(ctx, []byte("k"), Item{Value: long}); !errors.Is(err, ErrValueTooLong) || !errors.As(err, &me) {
		t.Fatalf("set too long, refused by the server: %v", err)
	}
	var wg sync.WaitGroup
	errs := make([]error, 16)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v := []byte("ok")
			if i == 7 {
				v = long
			}
			_, errs[i] = c.Set(ctx, fmt.Appendf(nil, "b%d", i), Item{Value: v})
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if i == 7 {
			if !errors.Is(err, ErrValueTooLong) {
				t.Errorf("set %d: %v, want too long", i, err)
			}
		} else if err != nil || !readDemo(t, db, "demo_long", fmt.Sprintf("b%d", i)).found {
			t.Errorf("set %d beside a bad one: %v", i, err)
		}
	}
}

func TestGroupCommit(t *testing.T) {
	db := openDB(t)
	c := demo(t, db, "demo_group")
	const workers, per = 64, 50
	var wg sync.WaitGroup
	var mu sync.Mutex
	acked := map[string]uint64{}
	var failures []error
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < per; i++ {
				k := fmt.Sprintf("w%d-%d", w, i)
				cas, err := c.Set(ctx, []byte(k), Item{Value: []byte("v" + k), Flags: uint32(i)})
				mu.Lock()
				if err != nil {
					failures = append(failures, err)
				} else {
					acked[k] = cas
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(failures) > 0 {
		t.Fatalf("%d sets failed, first: %v", len(failures), failures[0])
	}
	rows, err := db.Query("SELECT c1, c2, c4 FROM test.demo_group")
	if err != nil {
		t.Fatal(err)
	}
	inTable := map[string]bool{}
	for rows.Next() {
		var k, v string
		var cas uint64
		if err := rows.Scan(&k, &v, &cas); err != nil {
			t.Fatal(err)
		}
		if v != "v"+k || acked[k] != cas {
			t.Errorf("row %s: value %q cas %d, acked cas %d", k, v, cas, acked[k])
		}
		inTable[k] = true
	}
	rows.Close()
	for k := range acked {
		if !inTable[k] {
			t.Errorf("acknowledged key %s has no row", k)
		}
	}
	s := c.Stats()
	t.Logf("%d sets in %d transactions (%.1f per transaction)", len(acked), s.Batches, float64(s.BatchedSets)/float64(s.Batches))
	if len(acked) != workers*per || s.BatchedSets != workers*per {
		t.Fatalf("acked %d, batched %d, want %d", len(acked), s.BatchedSets, workers*per)
	}
	if s.Batches*4 > workers*per {
		t.Fatalf("%d transactions for %d sets: not grouped", s.Batches, workers*per)
	}
}

func TestSameKeyInBatchLastWins(t *testing.T) {
	db := openDB(t)
	exec(t, db, "DROP TABLE IF EXISTS test.demo_same")
	exec(t, db, "CREATE TABLE test.demo_same (c1 VARCHAR(32) PRIMARY KEY, c2 VARCHAR(1024), c3 INT UNSIGNED, c4 BIGINT UNSIGNED, c5 INT UNSIGNED)")
	// A long wait makes every queued Set join one batch.
	c, err := Open(ctx, db, Def{Name: "same", Schema: "test", Table: "demo_same", KeyColumn: "c1", ValueColumns: []string{"c2"},
		CASColumn: "c4"}, Options{MaxBatch: 3, MaxWait: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var wg sync.WaitGroup
	for i, v := range []string{"first", "second"} {
		wg.Add(1)
		go func() { defer wg.Done(); must[uint64](t)(c.Set(ctx, []byte("K"), Item{Value: []byte(v)})) }()
		time.Sleep(100 * time.Millisecond * time.Duration(i+1))
	}
	wg.Add(1)
	go func() { defer wg.Done(); must[uint64](t)(c.Set(ctx, []byte("other"), Item{Value: []byte("o")})) }()
	wg.Wait()
	if s := c.Stats(); s.Batches != 1 || s.BatchedSets != 2 {
		t.Fatalf("stats %+v, want one batch of two rows", s)
	}
	if r := readDemo(t, db, "demo_same", "K"); r.v != "second" {
		t.Fatalf("K = %+v, want the last set", r)
	}
}

func TestCloseFlushesAndRefuses(t *testing.T) {
	db := openDB(t)
	c := demo(t, db, "demo_close")
	var wg sync.WaitGroup
	errs := make([]error, 20)
	for i := range errs {
		wg.Add(1)
		go func() { defer wg.Done(); _, errs[i] = c.Set(ctx, fmt.Appendf(nil, "k%d", i), Item{Value: []byte("v")}) }()
	}
	time.Sleep(time.Millisecond)
	c.Close()
	wg.Wait()
	for i, err := range errs {
		found := readDemo(t, db, "demo_close", fmt.Sprintf("k%d", i)).found
		if err == nil && !found {
			t.Errorf("k%d acknowledged but missing", i)
		}
		if err != nil && !errors.Is(err, ErrClosed) {
			t.Errorf("k%d: %v", i, err)
		}
	}
	if _, err := c.Set(ctx, []byte("late"), Item{}); !errors.Is(err, ErrClosed) {
		t.Fatalf("set after close: %v", err)
	}
}

func TestOpenMismatch(t *testing.T) {
	db := openDB(t)
	exec(t, db, "DROP TABLE IF EXISTS test.bad")
	exec(t, db, "CREATE TABLE test.bad (id INT PRIMARY KEY, k VARCHAR(32), kp VARCHAR(32), v TEXT, d DATETIME, i INT, "+
		"ku VARCHAR(32), UNIQUE KEY (ku), KEY (k), UNIQUE KEY (kp(8)))")
	good := Def{Name: "bad", Schema: "test", Table: "bad", KeyColumn: "ku", ValueColumns: []string{"v"}}
	if c, err := Open(ctx, db, good, Options{}); err != nil {
		t.Fatalf("good def: %v", err)
	} else {
		c.Close()
	}
	for _, tc := range []struct {
		name   string
		mutate func(*Def)
		want   string
	}{
		{"no table", func(d *Def) { d.Table = "nosuch" }, "does not exist"},
		{"no key column", func(d *Def) { d.KeyColumn = "nokey" }, `"nokey" does not exist`},
		{"key not unique", func(d *Def) { d.KeyColumn = "k" }, `"k" is neither`},
		{"key prefix index", func(d *Def) { d.KeyColumn = "kp" }, `"kp" is neither`},
		{"int key", func(d *Def) { d.KeyColumn = "id" }, `key column "id" is int`},
		{"no value column", func(d *Def) { d.ValueColumns = []string{"v", "w"} }, `value column "w" does not exist`},
		{"datetime value", func(d *Def) { d.ValueColumns = []string{"d"} }, `value column "d" is datetime`},
		{"text flags", func(d *Def) { d.FlagsColumn = "v" }, `flags column "v" is text`},
		{"int cas", func(d *Def) { d.CASColumn = "i" }, `cas column "i"`},
		{"text expiry", func(d *Def) { d.ExpiryColumn = "v" }, `expiry column "v" is text`},
		{"missing flags", func(d *Def) { d.FlagsColumn = "nf" }, `flags column "nf" does not exist`},
	} {
		d := good
		tc.mutate(&d)
		_, err := Open(ctx, db, d, Options{})
		if err == nil || !strings.Contains(err.Error(), `container "bad"`) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
}

func TestCASSeededFromTable(t *testing.T) {
	db := openDB(t)
	exec(t, db, "DROP TABLE IF EXISTS test.demo_seed")
	exec(t, db, "CREATE TABLE test.demo_seed (c1 VARCHAR(32) PRIMARY KEY, c2 VARCHAR(1024), c3 INT UNSIGNED, c4 BIGINT UNSIGNED, c5 INT UNSIGNED)")
	const high = uint64(1) << 60
	exec(t, db, "INSERT INTO test.demo_seed VALUES ('x', 'y', 0, ?, 0)", high)
	c, err := Open(ctx, db, Def{Name: "seed", Schema: "test", Table: "demo_seed", KeyColumn: "c1", ValueColumns: []string{"c2"},
		CASColumn: "c4"}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cas := must[uint64](t)(c.Set(ctx, []byte("z"), Item{Value: []byte("v")}))
	if cas <= high {
		t.Fatalf("cas %d not above the table's max %d", cas, high)
	}
}

// TestValueTypeChecks: values that do not fit their column's type are refused
// before any SQL, each error naming the column.
func TestValueTypeChecks(t *testing.T) {
	db := openDB(t)
	exec(t, db, "DROP TABLE IF EXISTS test.typed")
	exec(t, db, "CREATE TABLE test.typed (k VARBINARY(8) PRIMARY KEY, name VARCHAR(4) CHARACTER SET utf8mb4, n TINYINT, u SMALLINT UNSIGNED, f INT)")
	c, err := Open(ctx, db, Def{Name: "typed", Schema: "test", Table: "typed", KeyColumn: "k",
		ValueColumns: []string{"name", "n", "u"}, FlagsColumn: "f"}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, tc := range []struct {
		key, value string
		flags      uint32
		want       error
		column     string
	}{
		{"a", "héé!|-128|65535", 0, nil, ""},
		{"a", "héééé|1|1", 0, ErrValueTooLong, "name"},
		{"a", "\xff|1|1", 0, ErrValueType, "name"},
		{"a", "x|128|1", 0, ErrValueType, "n"},
		{"a", "x|one|1", 0, ErrValueType, "n"},
		{"a", "x|1|-1", 0, ErrValueType, "u"},
		{"a", "x|1|65536", 0, ErrValueType, "u"},
		{"a", "x|1|1", 1 << 31, ErrValueType, "f"},
		{"a", "x|1|1|extra", 0, ErrTooManyValues, ""},
		{"123456789", "x|1|1", 0, ErrKeyTooLong, "k"},
	} {
		err := c.Check([]byte(tc.key), Item{Value: []byte(tc.value), Flags: tc.flags})
		if !errors.Is(err, tc.want) || tc.want != nil && !strings.Contains(err.Error(), tc.column) {
			t.Errorf("check %q=%q flags %d: %v, want %v naming %q", tc.key, tc.value, tc.flags, err, tc.want, tc.column)
		}
		if tc.want == nil {
			if _, err := c.Set(ctx, []byte(tc.key), Item{Value: []byte(tc.value), Flags: tc.flags}); err != nil {
				t.Errorf("set %q: %v", tc.value, err)
			}
		}
	}
}

// TestAppendNormKeyMatchesNormKey: the byte-slice form agrees with NormKey.
func TestAppendNormKeyMatchesNormKey(t *testing.T) {
	for _, c := range []*Container{{}, {keyFold: true}, {keyPad: true}, {keyFold: true, keyPad: true}} {
		for _, k := range []string{"", "abc", "ABC  ", "MiXeD", "  lead", "Ünïcode É ", "k\x00K"} {
			if got, want := string(c.AppendNormKey([]byte("pre."), []byte(k))), "pre."+c.NormKey(k); got != want {
				t.Errorf("fold %v pad %v: AppendNormKey(%q) = %q, want %q", c.keyFold, c.keyPad, k, got, want)
			}
		}
	}
}
