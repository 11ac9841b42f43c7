package main

// The consistency promise for caching containers, end to end: writes made
// directly in MariaDB reach readers of keyway's memcache door through the
// binlog follower within max_staleness, writes through keyway are read back
// at once, and no read ever returns a value nobody wrote.

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bradfitz/gomemcache/memcache"

	"github.com/keywaydb/keyway/internal/testenv"
)

// maxStaleness is keyway's default [cache] max_staleness.
const maxStaleness = time.Second

// TestDirectWriteReachesCachingContainer: a row cached by keyway and then
// changed directly in MariaDB is never served stale once max_staleness has
// passed since the commit, in autocommit and in a transaction; a rolled-back
// change is never seen.
func TestDirectWriteReachesCachingContainer(t *testing.T) {
	kw, db, admin, _ := startCachingWithAdmin(t)
	mc := memcache.New(kw.Addr)
	get := setAndCache(t, kw, mc, "@@aaa.k", "v1")
	if _, err := db.Exec("UPDATE test.demo_test SET c2 = 'v2' WHERE c1 = 'k'"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(maxStaleness + 100*time.Millisecond)
	get("v2")
	get("v2")

	tx, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec("UPDATE test.demo_test SET c2 = 'never' WHERE c1 = 'k'"); err != nil {
		t.Fatal(err)
	}
	get("v2")
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(maxStaleness + 100*time.Millisecond)
	get("v2")

	// DDL: the table's copies go.
	if _, err := db.Exec("TRUNCATE TABLE test.demo_test"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(maxStaleness + 100*time.Millisecond)
	if it, err := mc.Get("@@aaa.k"); err != memcache.ErrCacheMiss {
		t.Fatalf("after TRUNCATE: %v %v, want a miss", it, err)
	}
	st := binlogStatus(t, admin)
	if st.State != "following" || st.Commits == 0 {
		t.Fatalf("binlog status %+v", st)
	}
	resp, err := http.Get("http://" + admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`keyway_binlog_following{group="main"} 1`, `keyway_binlog_commits_total{group="main"}`, "keyway_cache_fresh 1", "keyway_sql_cache_hits_total"} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

// setAndCache sets key to v through mc, reads it twice (so a caching container holds it) and returns a get
// that fails the test unless key reads as want.
func setAndCache(t *testing.T, kw *testenv.Process, mc *memcache.Client, key, v string) func(want string) {
	t.Helper()
	get := func(want string) {
		t.Helper()
		it, err := mc.Get(key)
		if err != nil || string(it.Value) != want {
			t.Fatalf("memcache get %s = %v %v, want %q\nkeyway:\n%s", key, it, err, want, kw.Output())
		}
	}
	if err := mc.Set(&memcache.Item{Key: key, Value: []byte(v)}); err != nil {
		t.Fatal(err)
	}
	get(v)
	get(v) // now served from the local store
	return get
}

// followerStatus is the part of /status's binlog entry the tests read.
type followerStatus struct {
	State   string `json:"state"`
	Fresh   bool   `json:"fresh"`
	Commits uint64 `json:"commits"`
	Keys    uint64 `json:"key_invalidations"`
}

// startCachingWithAdmin is startContainers("caching") with the admin listener on; it returns its address and the
// SQL door's.
func startCachingWithAdmin(t *testing.T) (*testenv.Process, *sql.DB, string, string) {
	t.Helper()
	_, db, sqlAddr, path := setupContainers(t, "caching", "")
	admin := freeAddr(t)
	kw := startKeywaySQL(t, sqlAddr, "--config", path, "--admin-listen", admin)
	return kw, db, admin, sqlAddr
}

func binlogStatus(t *testing.T, admin string) followerStatus {
	t.Helper()
	resp, err := http.Get("http://" + admin + "/status")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var st struct {
		Binlog []followerStatus `json:"binlog"`
	}
	if err := json.Unmarshal(body, &st); err != nil || len(st.Binlog) != 1 {
		t.Fatalf("/status binlog: %v %s", err, body)
	}
	return st.Binlog[0]
}

// commit is a direct write ("direct-<seq>") and when it committed.
type commit struct {
	seq int
	at  time.Time
}

// mustSee is the newest of commits (in commit order) made max_staleness before began: a read that began then
// returns it or a later value. 0: none is that old.
func mustSee(commits []commit, began time.Time) int {
	must := 0
	for _, c := range commits {
		if c.at.Add(maxStaleness).Before(began) {
			must = c.seq
		}
	}
	return must
}

// directSeq is the seq of a "direct-<seq>" value, 0 for any other.
func directSeq(v string) int {
	s, ok := strings.CutPrefix(v, "direct-")
	if !ok {
		return 0
	}
	n, _ := strconv.Atoi(s)
	return n
}

// TestConsistencyUnderLoad is the core promise under concurrency: writers go
// directly to MariaDB and through the memcache door, readers read through the
// memcache door. Each value is "writer-seq"; a value read must have been
// written (no phantoms), a writer through keyway reads its own write back at
// once, and a read that starts max_staleness after a direct commit never
// returns a value older than that commit.
func TestConsistencyUnderLoad(t *testing.T) {
	kw, db := startContainers(t, "caching")
	const keys = 4
	var mu sync.Mutex
	direct := map[string][]commit{} // per key, the direct writes in commit order
	written := map[string]bool{}    // every value ever written, either way
	for k := range keys {
		key := "c" + strconv.Itoa(k)
		v := "init-0"
		if _, err := db.Exec("INSERT INTO test.demo_test (c1, c2) VALUES (?, ?)", key, v); err != nil {
			t.Fatal(err)
		}
		written[v] = true
	}
	stop := time.Now().Add(6 * time.Second)
	var wg sync.WaitGroup
	errs := make(chan string, 100)
	fail := func(format string, args ...any) {
		select {
		case errs <- fmt.Sprintf(format, args...):
		default:
		}
	}
	// A direct writer.
	wg.Add(1)
	go func() {
		defer wg.Done()
		for seq := 1; time.Now().Before(stop); seq++ {
			key := "c" + strconv.Itoa(seq%keys)
			v := "direct-" + strconv.Itoa(seq)
			mu.Lock()
			written[v] = true
			mu.Unlock()
			if _, err := db.Exec("UPDATE test.demo_test SET c2 = ? WHERE c1 = ?", v, key); err != nil {
				fail("direct write: %v", err)
				return
			}
			mu.Lock()
			direct[key] = append(direct[key], commit{seq, time.Now()})
			mu.Unlock()
			time.Sleep(3 * time.Millisecond)
		}
	}()
	// A writer through keyway, which reads its own writes back (its own key).
	wg.Add(1)
	go func() {
		defer wg.Done()
		mc := memcache.New(kw.Addr)
		mc.Timeout = 10 * time.Second
		for seq := 1; time.Now().Before(stop); seq++ {
			v := "kw-" + strconv.Itoa(seq)
			mu.Lock()
			written[v] = true
			mu.Unlock()
			if err := mc.Set(&memcache.Item{Key: "@@aaa.own", Value: []byte(v)}); err != nil {
				fail("set through keyway: %v", err)
				return
			}
			if it, err := mc.Get("@@aaa.own"); err != nil || string(it.Value) != v {
				fail("read-your-writes: wrote %q, read %v %v", v, it, err)
				return
			}
		}
	}()
	// Readers through keyway.
	var reads, checked int
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			mc := memcache.New(kw.Addr)
			mc.Timeout = 10 * time.Second
			for n := 0; time.Now().Before(stop); n++ {
				key := "c" + strconv.Itoa(n%keys)
				began := time.Now()
				it, err := mc.Get("@@aaa." + key)
				if err != nil {
					fail("read %s: %v", key, err)
					return
				}
				v := string(it.Value)
				mu.Lock()
				reads++
				if !written[v] {
					fail("phantom value %q for %s", v, key)
				}
				// The newest direct write committed max_staleness before this read began must be seen, or a later one.
				if must := mustSee(direct[key], began); must > 0 {
					checked++
					if directSeq(v) < must {
						fail("stale read of %s: %q, but direct-%d committed over max_staleness before the read", key, v, must)
					}
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	if checked == 0 {
		t.Fatalf("no read was old enough to check (%d reads)", reads)
	}
	t.Logf("%d reads, %d checked against a direct write older than max_staleness", reads, checked)
}

// TestTwoKeywaysStayCoherent: two keyways in front of one MariaDB, each with a caching container on the same
// table. A write through one is seen through the other within max_staleness: the other's binlog follower
// invalidates its copy.
func TestTwoKeywaysStayCoherent(t *testing.T) {
	_, _, sqlAddr, path := setupContainers(t, "caching", "")
	a := startKeywaySQL(t, sqlAddr, "--config", path)
	otherSQL := freeAddr(t)
	b := startKeywaySQL(t, otherSQL, "--config", path, "--sql-listen", otherSQL)
	ma, mb := memcache.New(a.Addr), memcache.New(b.Addr)
	if err := ma.Set(&memcache.Item{Key: "@@aaa.shared", Value: []byte("1")}); err != nil {
		t.Fatal(err)
	}
	getB := setAndCache(t, b, mb, "@@aaa.shared", "1") // b holds "1" now (its own set, then cached reads)
	if err := ma.Set(&memcache.Item{Key: "@@aaa.shared", Value: []byte("2")}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(maxStaleness + 100*time.Millisecond)
	getB("2")
}
