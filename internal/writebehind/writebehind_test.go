package writebehind

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

	_ "github.com/go-sql-driver/mysql"

	"github.com/keywaydb/keyway/internal/container"
	"github.com/keywaydb/keyway/internal/store"
	"github.com/keywaydb/keyway/internal/testenv"
)

func TestMain(m *testing.M) { os.Exit(testenv.RunWithSharedMariaDB(m)) }

var ctx = context.Background()

// table creates the plugin's demo table and opens a container on it over db.
func table(t *testing.T, db *sql.DB, name string, create bool) *container.Container {
	t.Helper()
	if create {
		for _, q := range []string{"DROP TABLE IF EXISTS test." + name,
			"CREATE TABLE test." + name + " (c1 VARCHAR(32) PRIMARY KEY, c2 VARCHAR(64), c3 INT UNSIGNED, c4 BIGINT UNSIGNED, c5 INT UNSIGNED)"} {
			if _, err := db.Exec(q); err != nil {
				t.Fatal(err)
			}
		}
	}
	c, err := container.Open(ctx, db, container.Def{Name: name, Schema: "test", Table: name, KeyColumn: "c1",
		ValueColumns: []string{"c2"}, FlagsColumn: "c3", CASColumn: "c4", ExpiryColumn: "c5"}, container.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// deadTable creates the demo table over db and returns a container on it
// whose own pool is closed: every write through it fails, as with MySQL down.
func deadTable(t *testing.T, db *sql.DB, name string) *container.Container {
	t.Helper()
	table(t, db, name, true)
	deadDB, err := sql.Open("mysql", testenv.SharedMariaDB(t).AppDSN)
	if err != nil {
		t.Fatal(err)
	}
	dead := table(t, deadDB, name, false)
	deadDB.Close()
	return dead
}

func openStore(t *testing.T, dir string) *store.Store {
	t.Helper()
	o := store.Options{MemoryLimit: 8 << 20}
	if dir != "" {
		o.DataDir, o.Durability = dir, store.DurabilitySync
	}
	s, err := store.Open(o)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// rows reads the table as key → "value/flags/cas".
func rows(t *testing.T, db *sql.DB, name string) map[string]string {
	t.Helper()
	r, err := db.Query("SELECT c1, c2, c3, c4 FROM test." + name)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	out := map[string]string{}
	for r.Next() {
		var k, v string
		var flags, cas uint64
		if err := r.Scan(&k, &v, &flags, &cas); err != nil {
			t.Fatal(err)
		}
		out[k] = fmt.Sprintf("%s/%d/%d", v, flags, cas)
	}
	return out
}

// TestPutThenTable: concurrent Puts are readable at once through Get, reach
// the table in batches with their own CAS, and the latest Put of a key wins.
func TestPutThenTable(t *testing.T) {
	db := testenv.SharedDB(t)
	c := table(t, db, "wb_put", true)
	s := openStore(t, "")
	defer s.Close()
	q := New(c, s, "@@wb_put.", Options{Window: time.Hour, MaxBatch: 64})
	defer q.Close()
	want := map[string]string{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 50; i++ {
				k := fmt.Sprintf("k%d", (w*50+i)%300) // the last 100 keys are written twice
				it := container.Item{Value: []byte(fmt.Sprintf("v%d-%d", w, i)), Flags: uint32(w), CAS: uint64(1000 + w*50 + i)}
				mu.Lock() // one Put per key at a time, so want holds the last one
				if err := q.Put([]byte(k), it, nil); err != nil {
					t.Error(err)
				}
				want[k] = fmt.Sprintf("%s/%d/%d", it.Value, it.Flags, it.CAS)
				if got, ok, _ := q.Get([]byte(k)); !ok && !strings.Contains(rows(t, db, "wb_put")[k], string(it.Value)) {
					t.Errorf("%s: neither waiting (%v) nor in the table after Put", k, got)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if err := q.Drain(); err != nil {
		t.Fatal(err)
	}
	got := rows(t, db, "wb_put")
	if len(got) != len(want) {
		t.Fatalf("%d rows, want %d", len(got), len(want))
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %q", k, got[k], v)
		}
	}
	st := q.Stats()
	if st.Pending != 0 || st.Written < 300 || st.Dropped != 0 {
		t.Fatalf("stats %+v", st)
	}
	if bs := c.Stats(); bs.Batches >= 300 {
		t.Fatalf("%d statements for %d rows: not batched", bs.Batches, bs.BatchedSets)
	}
}

// TestRefusedRowIsDropped: a row the table cannot take is dropped (and
// reported) without holding back its neighbours.
func TestRefusedRowIsDropped(t *testing.T) {
	db := testenv.SharedDB(t)
	c := table(t, db, "wb_refused", true)
	s := openStore(t, "")
	defer s.Close()
	var droppedKeys []string
	var mu sync.Mutex
	q := New(c, s, "@@wb_refused.", Options{Window: time.Hour, OnDrop: func(row []byte) {
		mu.Lock()
		droppedKeys = append(droppedKeys, string(row))
		mu.Unlock()
	}})
	defer q.Close()
	for i, v := range []string{"ok", strings.Repeat("x", 65), "fine"} {
		if err := q.Put([]byte(fmt.Sprint("r", i)), container.Item{Value: []byte(v), CAS: 1}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := q.Drain(); err != nil {
		t.Fatal(err)
	}
	got := rows(t, db, "wb_refused")
	if len(got) != 2 || got["r0"] == "" || got["r2"] == "" {
		t.Fatalf("rows %v", got)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(droppedKeys) != 1 || droppedKeys[0] != "r1" || q.Stats().Dropped != 1 {
		t.Fatalf("dropped %v, stats %+v", droppedKeys, q.Stats())
	}
}

// TestTableDownBackpressureAndJournal: with the table unreachable, Puts are
// acknowledged up to MaxPending and then refused with the reason; what was
// acknowledged stays readable, survives a restart in the store's journal, and
// reaches the table once it can.
func TestTableDownBackpressureAndJournal(t *testing.T) {
	db := testenv.SharedDB(t)
	dead := deadTable(t, db, "wb_down")

	dir := t.TempDir()
	s := openStore(t, dir)
	q := New(dead, s, "@@wb_down.", Options{Window: 10 * time.Millisecond, MaxPending: 4, WaitTimeout: 300 * time.Millisecond})
	for i := 0; i < 4; i++ {
		if err := q.Put([]byte(fmt.Sprint("d", i)), container.Item{Value: []byte(fmt.Sprint("v", i)), CAS: uint64(i + 1)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	err := q.Put([]byte("d4"), container.Item{Value: []byte("v4")}, nil)
	if !errors.Is(err, ErrBehind) || !strings.Contains(err.Error(), "database is closed") {
		t.Fatalf("put beyond MaxPending with the table down: %v", err)
	}
	if err := q.Put([]byte("d0"), container.Item{Value: []byte("v0-again"), CAS: 9}, nil); err != nil {
		t.Fatalf("rewriting a waiting key needs no room: %v", err)
	}
	if it, ok, _ := q.Get([]byte("d0")); !ok || string(it.Value) != "v0-again" {
		t.Fatalf("get d0 while the table is down: %q %v", it.Value, ok)
	}
	if err := q.Close(); err == nil || !strings.Contains(err.Error(), "4 acknowledged writes") {
		t.Fatalf("close with the table down: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if len(rows(t, db, "wb_down")) != 0 {
		t.Fatal("rows written through a closed pool?")
	}

	// Next start: the journal's writes go to the table.
	s = openStore(t, dir)
	defer s.Close()
	q = New(table(t, db, "wb_down", false), s, "@@wb_down.", Options{Window: 10 * time.Millisecond})
	defer q.Close()
	if it, ok, _ := q.Get([]byte("d3")); !ok || string(it.Value) != "v3" || it.CAS != 4 {
		t.Fatalf("d3 from the journal: %+v %v", it, ok)
	}
	if err := q.Drain(); err != nil {
		t.Fatal(err)
	}
	got := rows(t, db, "wb_down")
	want := map[string]string{"d0": "v0-again/0/9", "d1": "v1/0/2", "d2": "v2/0/3", "d3": "v3/0/4"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("after restart: %v, want %v", got, want)
	}
}

// TestKeysAsTheColumnComparesThem: under a case-insensitive key column, "k"
// and "K" are one row, so the later Put replaces the earlier one and a read
// of either sees it.
func TestKeysAsTheColumnComparesThem(t *testing.T) {
	db := testenv.SharedDB(t)
	c := table(t, db, "wb_case", true)
	s := openStore(t, "")
	defer s.Close()
	q := New(c, s, "@@wb_case.", Options{Window: time.Hour})
	defer q.Close()
	for _, k := range []string{"Key", "KEY"} {
		if err := q.Put([]byte(k), container.Item{Value: []byte("from " + k), CAS: 1}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if it, ok, _ := q.Get([]byte("key")); !ok || string(it.Value) != "from KEY" {
		t.Fatalf("get key: %q %v", it.Value, ok)
	}
	if st := q.Stats(); st.Pending != 1 {
		t.Fatalf("%d rows waiting, want 1", st.Pending)
	}
	if err := q.Drain(); err != nil {
		t.Fatal(err)
	}
	if got := rows(t, db, "wb_case"); len(got) != 1 || got["KEY"] != "from KEY/0/1" {
		t.Fatalf("rows %v", got)
	}
}

// TestPendingBytesBound: the bytes waiting are bounded too, and rewriting a
// waiting row needs no more room than it adds.
func TestPendingBytesBound(t *testing.T) {
	dead := deadTable(t, testenv.SharedDB(t), "wb_bytes")
	s := openStore(t, "")
	defer s.Close()
	q := New(dead, s, "@@wb_bytes.", Options{Window: time.Hour, MaxPendingBytes: 330, WaitTimeout: 100 * time.Millisecond})
	defer q.Close()
	big := container.Item{Value: []byte(strings.Repeat("v", 60))} // 189 bytes waiting
	put := func(k string, it container.Item) error { return q.Put([]byte(k), it, nil) }
	if err := put("a", big); err != nil {
		t.Fatal(err)
	}
	if err := put("b", big); !errors.Is(err, ErrBehind) {
		t.Fatalf("second 189-byte row over a 330-byte bound: %v", err)
	}
	if err := put("a", big); err != nil {
		t.Fatalf("rewriting a waiting row: %v", err)
	}
	if err := put("c", container.Item{Value: []byte("small")}); err != nil {
		t.Fatalf("a small row that fits: %v", err)
	}
	if st := q.Stats(); st.Pending != 2 || st.PendingBytes != int64(1+60+entryOverhead+1+5+entryOverhead) {
		t.Fatalf("stats %+v", st)
	}
}

// TestPutCopiesCallerBuffers: the row and value a caller hands to Put are
// the caller's again when Put returns (a connection reads its next request
// over them); what waits, what Get answers and what reaches the table are
// the bytes that were put.
func TestPutCopiesCallerBuffers(t *testing.T) {
	db := testenv.SharedDB(t)
	c := table(t, db, "wb_owned", true)
	s := openStore(t, "")
	defer s.Close()
	q := New(c, s, "@@wb_owned.", Options{Window: time.Hour})
	defer q.Close()
	buf := []byte("origvalue") // the connection's read buffer
	if err := q.Put(buf[:4], container.Item{Value: buf[4:], CAS: 7}, nil); err != nil {
		t.Fatal(err)
	}
	copy(buf, "XXXXgarbage")
	if it, ok, _ := q.Get([]byte("orig")); !ok || string(it.Value) != "value" {
		t.Fatalf("get after the caller reused its buffer: %q %v", it.Value, ok)
	}
	if err := q.Drain(); err != nil {
		t.Fatal(err)
	}
	if got := rows(t, db, "wb_owned"); len(got) != 1 || got["orig"] != "value/0/7" {
		t.Fatalf("rows %v, want orig = value", got)
	}
}

// slowDeleteJournal is the store's journal on a disk that is slow to take
// removals: a JournalDelete reaches the store only after delay, and crash
// loses every removal that has not reached it yet, as a process killed before
// its disk synced them would (their waits fail). The puts go straight to the
// store. Only for rows not put again while their removal is delayed.
type slowDeleteJournal struct {
	*store.Store
	delay time.Duration

	mu      sync.Mutex
	crashed bool
	crashCh chan struct{}
}

func newSlowDeleteJournal(s *store.Store, delay time.Duration) *slowDeleteJournal {
	return &slowDeleteJournal{Store: s, delay: delay, crashCh: make(chan struct{})}
}

func (j *slowDeleteJournal) JournalDelete(key string) (wait func() error) {
	forwarded := make(chan func() error, 1)
	go func() {
		select {
		case <-time.After(j.delay):
		case <-j.crashCh:
		}
		j.mu.Lock()
		defer j.mu.Unlock()
		if j.crashed {
			forwarded <- func() error { return store.ErrClosed }
			return
		}
		forwarded <- j.Store.JournalDelete(key)
	}()
	return func() error { return (<-forwarded)() }
}

// crash loses the removals not yet in the store.
func (j *slowDeleteJournal) crash() {
	j.mu.Lock()
	defer j.mu.Unlock()
	if !j.crashed {
		j.crashed = true
		close(j.crashCh)
	}
}

// TestReplayNeverGoesBackInTime: once Drain returned, a statement on the
// table (the SQL door's, which drains first) acts after the queued writes. A
// crash right after it must not let the restart's replay of the journal write
// the older queued value over that statement's newer one: the journal record
// of a written row must be durably gone before the row counts as written.
func TestReplayNeverGoesBackInTime(t *testing.T) {
	db := testenv.SharedDB(t)
	c := table(t, db, "wb_replay", true)
	dir := t.TempDir()
	s := openStore(t, dir)
	j := newSlowDeleteJournal(s, 500*time.Millisecond)
	q := New(c, j, "@@wb_replay.", Options{Window: time.Hour, WaitTimeout: 5 * time.Second})
	if err := q.Put([]byte("k"), container.Item{Value: []byte("queued"), CAS: 1}, nil); err != nil {
		t.Fatal(err)
	}
	if err := q.Drain(); err != nil {
		t.Fatal(err)
	}
	// The SQL door drained the queue; its statement now changes the row.
	if _, err := db.Exec("UPDATE test.wb_replay SET c2 = 'newer' WHERE c1 = 'k'"); err != nil {
		t.Fatal(err)
	}
	// keyway dies: removals not on disk yet are lost.
	j.crash()
	q.Close()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	// The restart replays whatever the journal still holds.
	s = openStore(t, dir)
	defer s.Close()
	q = New(table(t, db, "wb_replay", false), s, "@@wb_replay.", Options{Window: 10 * time.Millisecond})
	defer q.Close()
	if err := q.Drain(); err != nil {
		t.Fatal(err)
	}
	if got := rows(t, db, "wb_replay")["k"]; got != "newer/0/1" {
		t.Fatalf("k = %q after the replay, want the newer row newer/0/1", got)
	}
}

// TestRoomy: with the table down, the queue stops being roomy once half of MaxPending rows (or half of
// MaxPendingBytes) wait, long before a Put would wait for room; it is roomy again once the table took them.
func TestRoomy(t *testing.T) {
	db := testenv.SharedDB(t)
	dead := deadTable(t, db, "wb_roomy")
	s := openStore(t, "")
	defer s.Close()
	q := New(dead, s, "@@wb_roomy.", Options{Window: time.Hour, MaxPending: 8, WaitTimeout: 100 * time.Millisecond})
	for i := range 4 {
		if !q.Roomy() {
			t.Fatalf("not roomy with %d of 8 rows waiting", i)
		}
		if err := q.Put([]byte(fmt.Sprint("r", i)), container.Item{Value: []byte("v")}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if q.Roomy() {
		t.Fatal("roomy with 4 of 8 rows waiting")
	}
	q.Close()

	bytes := New(dead, s, "@@wb_roomy_bytes.", Options{Window: time.Hour, MaxPendingBytes: 380, WaitTimeout: 100 * time.Millisecond})
	defer bytes.Close()
	if err := bytes.Put([]byte("big"), container.Item{Value: []byte(strings.Repeat("v", 60))}, nil); err != nil {
		t.Fatal(err)
	}
	if bytes.Roomy() {
		t.Fatalf("roomy with %d of 380 bytes waiting", bytes.Stats().PendingBytes)
	}

	live := New(table(t, db, "wb_roomy_live", true), s, "@@wb_roomy_live.", Options{Window: 10 * time.Millisecond, MaxPending: 8})
	defer live.Close()
	for i := range 6 {
		if err := live.Put([]byte(fmt.Sprint("r", i)), container.Item{Value: []byte("v")}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := live.Drain(); err != nil {
		t.Fatal(err)
	}
	if !live.Roomy() {
		t.Fatal("not roomy once the table took every row")
	}
}

// TestBatchWithinMaxAllowedPacket: a round whose rows together pass the server's max_allowed_packet goes out as
// several statements, each within it. The server ends the connection of a client that sends more, so a round sent
// as one statement failed as if the table were down, every time: acknowledged rows never reached it.
func TestBatchWithinMaxAllowedPacket(t *testing.T) {
	db := testenv.SharedDB(t)
	var maxPacket int
	if err := db.QueryRow("SELECT @@max_allowed_packet").Scan(&maxPacket); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"DROP TABLE IF EXISTS test.wb_packet",
		"CREATE TABLE test.wb_packet (c1 VARCHAR(32) PRIMARY KEY, c2 MEDIUMBLOB, c3 INT UNSIGNED, c4 BIGINT UNSIGNED, c5 INT UNSIGNED)"} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	c := table(t, db, "wb_packet", false)
	s := openStore(t, "")
	defer s.Close()
	q := New(c, s, "@@wb_packet.", Options{Window: time.Hour, MaxBatch: 256})
	defer q.Close()
	// 160 rows whose values together are twice max_allowed_packet: one batch by count, at least two by bytes.
	const n = 160
	value := []byte(strings.Repeat("v", 2*maxPacket/n))
	for i := range n {
		if err := q.Put(fmt.Appendf(nil, "p%03d", i), container.Item{Value: value, CAS: uint64(i + 1)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := q.Drain(); err != nil {
		t.Fatalf("drain: %v (rows in the table: %d of %d)", err, len(rows(t, db, "wb_packet")), n)
	}
	var count, bytes int
	if err := db.QueryRow("SELECT COUNT(*), SUM(LENGTH(c2)) FROM test.wb_packet").Scan(&count, &bytes); err != nil {
		t.Fatal(err)
	}
	if count != n || bytes != n*len(value) {
		t.Fatalf("table holds %d rows of %d bytes, want %d of %d", count, bytes, n, n*len(value))
	}
	if st := c.Stats(); st.Batches < 3 {
		t.Fatalf("%d statements for %d rows of %d bytes under max_allowed_packet %d", st.Batches, n, len(value), maxPacket)
	}
}
