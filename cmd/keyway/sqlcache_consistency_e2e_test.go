package main

import (
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/bradfitz/gomemcache/memcache"
)

// TestSQLCacheConsistencyUnderLoad is the consistency promise for the SQL result cache, under concurrency: a writer
// goes directly to MariaDB, another through the SQL door and a third through the memcache door (on a container's
// table); readers read through the SQL door, text and prepared. No value read was never written (no phantoms),
// each writer through keyway reads its own write back at once through the SQL door, and a read that starts
// max_staleness after a direct commit never returns a value older than that commit.
func TestSQLCacheConsistencyUnderLoad(t *testing.T) {
	kw, direct, admin, sqlAddr := startCachingWithAdmin(t)
	const keys = 4
	if _, err := direct.Exec("CREATE TABLE test.ck (id INT PRIMARY KEY, v VARCHAR(40))"); err != nil {
		t.Fatal(err)
	}
	l := newLedger[int]("init", "own-0")
	for k := range keys {
		if _, err := direct.Exec("INSERT INTO test.ck VALUES (?, 'init')", k); err != nil {
			t.Fatal(err)
		}
	}
	for _, q := range []string{"INSERT INTO test.ck VALUES (100, 'own-0')", "INSERT INTO test.demo_test (c1, c2) VALUES ('own', 'own-0')"} {
		if _, err := direct.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	waitCacheFresh(t, kw, admin)
	stop := time.Now().Add(6 * time.Second)
	var wg sync.WaitGroup
	wg.Add(3)
	go func() { // directly to MariaDB
		defer wg.Done()
		for seq := 1; time.Now().Before(stop); seq++ {
			k, v := seq%keys, "direct-"+strconv.Itoa(seq)
			l.wrote(v)
			if _, err := direct.Exec("UPDATE test.ck SET v = ? WHERE id = ?", v, k); err != nil {
				l.fail("direct write: %v", err)
				return
			}
			l.committed(k, seq)
			time.Sleep(3 * time.Millisecond)
		}
	}()
	go func() { // through the SQL door, reading its own writes back
		defer wg.Done()
		through := sqlThrough(t, sqlAddr)
		for seq := 1; time.Now().Before(stop); seq++ {
			v := "sql-" + strconv.Itoa(seq)
			l.wrote(v)
			if _, err := through.Exec("UPDATE ck SET v = ? WHERE id = 100", v); err != nil {
				l.fail("write through the SQL door: %v", err)
				return
			}
			var got string
			if err := through.QueryRow("SELECT v FROM ck WHERE id = 100").Scan(&got); err != nil || got != v {
				l.fail("read-your-writes through the SQL door: wrote %q, read %q %v", v, got, err)
				return
			}
		}
	}()
	go func() { // through the memcache door, read back through the SQL door
		defer wg.Done()
		mc := memcache.New(kw.Addr)
		mc.Timeout = 10 * time.Second
		through := sqlThrough(t, sqlAddr)
		for seq := 1; time.Now().Before(stop); seq++ {
			v := "mc-" + strconv.Itoa(seq)
			l.wrote(v)
			if err := mc.Set(&memcache.Item{Key: "@@aaa.own", Value: []byte(v)}); err != nil {
				l.fail("set through the memcache door: %v", err)
				return
			}
			var got string
			if err := through.QueryRow("SELECT c2 FROM demo_test WHERE c1 = ?", "own").Scan(&got); err != nil || got != v {
				l.fail("read-your-writes across doors: set %q, the SQL door read %q %v", v, got, err)
				return
			}
		}
	}()
	for r := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			through := sqlThrough(t, sqlAddr)
			for n := 0; time.Now().Before(stop); n++ {
				k := n % keys
				began := time.Now()
				var v string
				var err error
				if (n+r)%2 == 0 {
					err = through.QueryRow("SELECT v FROM ck WHERE id = " + strconv.Itoa(k)).Scan(&v)
				} else {
					err = through.QueryRow("SELECT v FROM ck WHERE id = ?", k).Scan(&v)
				}
				if err != nil {
					l.fail("read %d: %v", k, err)
					return
				}
				l.read(k, v, began)
			}
		}()
	}
	wg.Wait()
	l.report(t)
	if st := cacheStats(t, admin); st.Hits == 0 {
		t.Fatalf("no read was answered from the cache: %+v", st)
	}
}
