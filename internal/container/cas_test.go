package container

import (
	"fmt"
	"sync"
	"testing"
)

// openDemo opens a container named name on the existing demo table table.
func openDemo(t *testing.T, name, table string) *Container {
	t.Helper()
	c, err := Open(ctx, openDB(t), Def{Name: name, Schema: "test", Table: table, KeyColumn: "c1", ValueColumns: []string{"c2"},
		FlagsColumn: "c3", CASColumn: "c4", ExpiryColumn: "c5"}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestCASCounterPerTable: containers on different tables count CAS values
// independently. A table whose max(cas) is 500 hands out 501 next, however
// far another table's counter went (with one process-wide counter it handed
// out 1000011: the other table's max(cas) and writes raised it).
func TestCASCounterPerTable(t *testing.T) {
	db := openDB(t)
	for _, tb := range []string{"cas_low", "cas_high"} {
		exec(t, db, "DROP TABLE IF EXISTS test."+tb)
		exec(t, db, "CREATE TABLE test."+tb+" (c1 VARCHAR(32) PRIMARY KEY, c2 VARCHAR(64), c3 INT UNSIGNED, c4 BIGINT UNSIGNED, c5 INT UNSIGNED)")
	}
	exec(t, db, "INSERT INTO test.cas_low VALUES ('seed', 'v', 0, 500, 0)")
	exec(t, db, "INSERT INTO test.cas_high VALUES ('seed', 'v', 0, 1000000, 0)")
	high := openDemo(t, "high", "cas_high")
	low := openDemo(t, "low", "cas_low")
	for i := 0; i < 10; i++ {
		if _, err := high.Set(ctx, []byte(fmt.Sprint("h", i)), Item{Value: []byte("v")}); err != nil {
			t.Fatal(err)
		}
	}
	cas, err := low.Set(ctx, []byte("k"), Item{Value: []byte("v")})
	if err != nil {
		t.Fatal(err)
	}
	if cas != 501 {
		t.Fatalf("first CAS on a table whose max(cas) is 500: %d, want 501 (its counter is its own)", cas)
	}
	cas, err = high.Set(ctx, []byte("k"), Item{Value: []byte("v")})
	if err != nil {
		t.Fatal(err)
	}
	if cas != 1000011 {
		t.Fatalf("11th CAS on a table whose max(cas) is 1000000: %d, want 1000011 (another table's writes do not raise it)", cas)
	}
}

// TestCASSharedTableNeverRepeats: two containers on one table share its
// counter, so concurrent writes of the same rows through both never get the
// same CAS (with a counter per container both would start at max(cas)+1 and
// collide).
func TestCASSharedTableNeverRepeats(t *testing.T) {
	db := openDB(t)
	exec(t, db, "DROP TABLE IF EXISTS test.cas_shared")
	exec(t, db, "CREATE TABLE test.cas_shared (c1 VARCHAR(32) PRIMARY KEY, c2 VARCHAR(64), c3 INT UNSIGNED, c4 BIGINT UNSIGNED, c5 INT UNSIGNED)")
	exec(t, db, "INSERT INTO test.cas_shared VALUES ('seed', 'v', 0, 7000, 0)")
	a := openDemo(t, "a", "cas_shared")
	b := openDemo(t, "b", "cas_shared")
	var mu sync.Mutex
	seen := map[uint64]string{}
	var wg sync.WaitGroup
	for _, c := range []*Container{a, b, a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 50; i++ {
				key := fmt.Sprint("k", i%10) // both containers write the same rows
				cas, err := c.Set(ctx, []byte(key), Item{Value: []byte("v")})
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				if prev, dup := seen[cas]; dup {
					t.Errorf("CAS %d handed out twice: %s and %s via %s", cas, prev, key, c.Def().Name)
				}
				seen[cas] = key + " via " + c.Def().Name
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	for cas := range seen {
		if cas <= 7000 {
			t.Errorf("CAS %d not above the table's max(cas) 7000", cas)
		}
	}
}
