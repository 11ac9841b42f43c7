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
	for _, want := range []string{`keyway_binlog_following{group="main"} 1`, `keyway_binlog_commits_total{group="main"}`, `keyway_cache_fresh{group="main",mode="binlog"} 1`, "keyway_sql_cache_hits_total"} {
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
	Reconn  uint64 `json:"reconnects"`
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
	var st struct {
		Binlog []followerStatus `json:"binlog"`
	}
	if body := adminStatus(t, admin, &st); len(st.Binlog) != 1 {
		t.Fatalf("/status binlog: %s", body)
	}
	return st.Binlog[0]
}

// adminStatus reads /status on the admin listener into v and returns its body.
func adminStatus(t *testing.T, admin string, v any) []byte {
	t.Helper()
	resp, err := http.Get("http://" + admin + "/status")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(body, v); err != nil {
		t.Fatalf("/status: %v %s", err, body)
	}
	return body
}

// ledger is what a consistency test's writers wrote and when its direct writes committed, and what its readers
// found wrong: a value read must have been written by someone (no phantoms), and a read that began max_staleness
// after a direct commit ("direct-<seq>") of its key returns that value or a later one. Safe for concurrent use.
type ledger[K comparable] struct {
	mu             sync.Mutex
	written        map[string]bool
	direct         map[K][]commit // per key, the direct writes in commit order
	reads, checked int
	errs           chan string
}

// commit is a direct write ("direct-<seq>") and when it committed.
type commit struct {
	seq int
	at  time.Time
}

func newLedger[K comparable](initial ...string) *ledger[K] {
	l := &ledger[K]{written: map[string]bool{}, direct: map[K][]commit{}, errs: make(chan string, 100)}
	for _, v := range initial {
		l.written[v] = true
	}
	return l
}

// fail records a failure (the first hundred are reported).
func (l *ledger[K]) fail(format string, args ...any) {
	select {
	case l.errs <- fmt.Sprintf(format, args...):
	default:
	}
}

// wrote records a value about to be written, by anyone.
func (l *ledger[K]) wrote(v string) {
	l.mu.Lock()
	l.written[v] = true
	l.mu.Unlock()
}

// committed records that the direct write "direct-<seq>" of key has committed.
func (l *ledger[K]) committed(key K, seq int) {
	l.mu.Lock()
	l.direct[key] = append(l.direct[key], commit{seq, time.Now()})
	l.mu.Unlock()
}

// read checks v, read for key by a read that began at began.
func (l *ledger[K]) read(key K, v string, began time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.reads++
	if !l.written[v] {
		l.fail("phantom value %q for %v", v, key)
	}
	must := 0 // the newest direct write committed max_staleness before the read began
	for _, c := range l.direct[key] {
		if c.at.Add(maxStaleness).Before(began) {
			must = c.seq
		}
	}
	if must == 0 {
		return
	}
	l.checked++
	got := 0
	if s, ok := strings.CutPrefix(v, "direct-"); ok {
		got, _ = strconv.Atoi(s)
	}
	if got < must {
		l.fail("stale read of %v: %q, but direct-%d committed over max_staleness before the read", key, v, must)
	}
}

// report fails t with what went wrong, or when no read was old enough to check, once every writer and reader
// has stopped.
func (l *ledger[K]) report(t *testing.T) {
	t.Helper()
	close(l.errs)
	for e := range l.errs {
		t.Error(e)
	}
	if l.checked == 0 {
		t.Fatalf("no read was old enough to check (%d reads)", l.reads)
	}
	t.Logf("%d reads, %d checked against a direct write older than max_staleness", l.reads, l.checked)
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
	l := newLedger[string]("init-0")
	for k := range keys {
		if _, err := db.Exec("INSERT INTO test.demo_test (c1, c2) VALUES (?, 'init-0')", "c"+strconv.Itoa(k)); err != nil {
			t.Fatal(err)
		}
	}
	stop := time.Now().Add(6 * time.Second)
	var wg sync.WaitGroup
	// A direct writer.
	wg.Add(1)
	go func() {
		defer wg.Done()
		for seq := 1; time.Now().Before(stop); seq++ {
			key := "c" + strconv.Itoa(seq%keys)
			v := "direct-" + strconv.Itoa(seq)
			l.wrote(v)
			if _, err := db.Exec("UPDATE test.demo_test SET c2 = ? WHERE c1 = ?", v, key); err != nil {
				l.fail("direct write: %v", err)
				return
			}
			l.committed(key, seq)
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
			l.wrote(v)
			if err := mc.Set(&memcache.Item{Key: "@@aaa.own", Value: []byte(v)}); err != nil {
				l.fail("set through keyway: %v", err)
				return
			}
			if it, err := mc.Get("@@aaa.own"); err != nil || string(it.Value) != v {
				l.fail("read-your-writes: wrote %q, read %v %v", v, it, err)
				return
			}
		}
	}()
	// Readers through keyway.
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
					l.fail("read %s: %v", key, err)
					return
				}
				l.read(key, string(it.Value), began)
			}
		}()
	}
	wg.Wait()
	l.report(t)
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
