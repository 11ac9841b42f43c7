package container

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/keywaydb/keyway/internal/testenv"
)

// lockWaitDB is a pool on the shared MariaDB whose sessions give up a lock
// wait after one second (error 1205) instead of InnoDB's default 50.
func lockWaitDB(t *testing.T) *sql.DB {
	t.Helper()
	cfg, err := mysql.ParseDSN(testenv.SharedMariaDB(t).AppDSN)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Params == nil {
		cfg.Params = map[string]string{}
	}
	cfg.Params["innodb_lock_wait_timeout"] = "1"
	db, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// lockRow inserts key (if missing) and holds its row lock in a transaction
// on db until the returned function rolls it back.
func lockRow(t *testing.T, db *sql.DB, table, key string) (release func()) {
	t.Helper()
	exec(t, db, "INSERT IGNORE INTO test."+table+" (c1, c2) VALUES (?, 'locked')", key)
	tx, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	var k string
	if err := tx.QueryRow("SELECT c1 FROM test."+table+" WHERE c1 = ? FOR UPDATE", key).Scan(&k); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	release = func() { once.Do(func() { tx.Rollback() }) }
	t.Cleanup(release)
	return release
}

// TestSetCopiesCallerBuffers: a Set whose caller gave up (its context ended)
// may still be written by the group committer, on a retry after its caller
// reused the buffer the key and value came from (as a connection reuses its
// read buffer). The row written must be the one the caller asked for, never
// the bytes that later took the buffer's place.
func TestSetCopiesCallerBuffers(t *testing.T) {
	db := openDB(t)
	exec(t, db, "DROP TABLE IF EXISTS test.demo_owned")
	exec(t, db, "CREATE TABLE test.demo_owned (c1 VARCHAR(32) PRIMARY KEY, c2 VARCHAR(1024), c3 INT UNSIGNED, c4 BIGINT UNSIGNED, c5 INT UNSIGNED)")
	// MaxWait lets the two Sets below join one batch.
	c, err := Open(ctx, lockWaitDB(t), Def{Name: "owned", Schema: "test", Table: "demo_owned", KeyColumn: "c1",
		ValueColumns: []string{"c2"}, CASColumn: "c4"}, Options{MaxWait: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	release := lockRow(t, db, "demo_owned", "orig")

	// buf plays the connection's read buffer: key and value are slices of it.
	buf := []byte("origvalue")
	gaveUp := make(chan error, 1)
	go func() {
		sctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		defer cancel()
		_, err := c.Set(sctx, buf[:4], Item{Value: buf[4:]})
		gaveUp <- err
	}()
	time.Sleep(50 * time.Millisecond)
	other := make(chan error, 1)
	go func() { // a patient writer in the same batch keeps it worth retrying
		sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		_, err := c.Set(sctx, []byte("other"), Item{Value: []byte("o")})
		other <- err
	}()
	if err := <-gaveUp; !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("set on a locked row with a short deadline: %v", err)
	}
	copy(buf, "XXXXgarbage") // the connection reads its next request over the buffer
	// The batch's first statement waits for the lock until 1205 (after 1s);
	// what the committer sends after that must still be "orig".
	time.Sleep(1500 * time.Millisecond)
	release()
	if err := <-other; err != nil {
		t.Fatalf("the patient writer: %v", err)
	}
	if r := readDemo(t, db, "demo_owned", "XXXX"); r.found {
		t.Fatalf("a row under the overwritten key: %+v", r)
	}
	if r := readDemo(t, db, "demo_owned", "orig"); r.v != "value" {
		t.Fatalf("orig = %+v, want the value the caller set", r)
	}
}

// comInsert is the server's count of INSERT statements run (failed ones
// included); the package's tests run one at a time on their own server.
func comInsert(t *testing.T, db *sql.DB) int64 {
	t.Helper()
	var name string
	var n int64
	if err := db.QueryRow("SHOW GLOBAL STATUS LIKE 'Com_insert'").Scan(&name, &n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestLockWaitTimeoutRetriedAsBatch: a batch that runs into a lock wait
// timeout (1205) is run again as one batch after a short pause, not row by
// row, and a lone Set is retried too instead of failing at once.
func TestLockWaitTimeoutRetriedAsBatch(t *testing.T) {
	db := openDB(t)
	c := demo(t, db, "demo_lockwait")
	c.Close()
	c, err := Open(ctx, lockWaitDB(t), c.Def(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	t.Run("set", func(t *testing.T) {
		release := lockRow(t, db, "demo_lockwait", "a")
		time.AfterFunc(1500*time.Millisecond, release) // after the first 1205
		sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		if _, err := c.Set(sctx, []byte("a"), Item{Value: []byte("set")}); err != nil {
			t.Fatalf("set on a row locked for 1.5s, lock wait timeout 1s: %v", err)
		}
		if r := readDemo(t, db, "demo_lockwait", "a"); r.v != "set" {
			t.Fatalf("a = %+v", r)
		}
	})
	t.Run("batch", func(t *testing.T) {
		release := lockRow(t, db, "demo_lockwait", "b")
		time.AfterFunc(1500*time.Millisecond, release)
		before := comInsert(t, db)
		wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		var rows []Row
		for _, k := range []string{"b", "c", "d"} {
			rows = append(rows, Row{Key: []byte(k), Item: Item{Value: []byte("batch"), CAS: 5}})
		}
		for i, err := range c.WriteRows(wctx, rows) {
			if err != nil {
				t.Errorf("row %s: %v", rows[i].Key, err)
			}
		}
		for _, k := range []string{"b", "c", "d"} {
			if r := readDemo(t, db, "demo_lockwait", k); r.v != "batch" {
				t.Errorf("%s = %+v", k, r)
			}
		}
		if n := comInsert(t, db) - before; n != 2 {
			t.Fatalf("%d INSERT statements, want 2 (the batch, then the batch again)", n)
		}
	})
	t.Run("deadline", func(t *testing.T) {
		lockRow(t, db, "demo_lockwait", "e") // held to the end
		before := comInsert(t, db)
		sctx, cancel := context.WithTimeout(ctx, 2500*time.Millisecond)
		defer cancel()
		if _, err := c.Set(sctx, []byte("e"), Item{Value: []byte("never")}); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("set on a row locked for good: %v, want the deadline (retried until then)", err)
		}
		tries := comInsert(t, db) - before
		if tries < 2 {
			t.Fatalf("%d INSERT statements before the deadline, want retries", tries)
		}
		time.Sleep(1500 * time.Millisecond) // longer than a lock wait and the longest pause
		if n := comInsert(t, db) - before; n != tries {
			t.Fatalf("%d INSERT statements after the waiter's deadline", n-tries)
		}
	})
}

// TestLockedRowStopsAtWaitersDeadline: a batch stuck on a row lock is given
// up when every waiter's context has ended, so the container's next Sets are
// not held behind it (InnoDB would wait 50s for the lock).
func TestLockedRowStopsAtWaitersDeadline(t *testing.T) {
	db := openDB(t)
	c := demo(t, db, "demo_stuck")
	lockRow(t, db, "demo_stuck", "x") // held to the end of the test
	sctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if _, err := c.Set(sctx, []byte("x"), Item{Value: []byte("stuck")}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("set on a locked row: %v", err)
	}
	sctx, cancel = context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := c.Set(sctx, []byte("y"), Item{Value: []byte("free")}); err != nil {
		t.Fatalf("set of another row after the stuck one gave up: %v", err)
	}
	if r := readDemo(t, db, "demo_stuck", "y"); r.v != "free" {
		t.Fatalf("y = %+v", r)
	}
}

// TestDataErrorRetriesRowsAlone: when the server refuses one row's data, the
// batch's other rows are written by one more round of single-row statements
// and only the bad row fails, with ErrValueTooLong. WriteRows gives a row the
// batch holds twice its last's answer; WriteDistinctRows (rows known to be
// distinct) answers the same for distinct rows.
func TestDataErrorRetriesRowsAlone(t *testing.T) {
	db := openDB(t)
	c := demo(t, db, "demo_dataerr")
	c.valCols[0].maxChars, c.valCols[0].maxOctets = 0, 0 // let the server judge the length
	for _, distinct := range []bool{false, true} {
		if _, err := db.Exec("TRUNCATE TABLE test.demo_dataerr"); err != nil {
			t.Fatal(err)
		}
		before := comInsert(t, db)
		var rows []Row
		for i := range 4 {
			v := []byte("ok")
			if i == 2 {
				v = []byte(strings.Repeat("v", 1025))
			}
			rows = append(rows, Row{Key: fmt.Appendf(nil, "r%d", i), Item: Item{Value: v, CAS: 3}})
		}
		write := c.WriteDistinctRows
		if !distinct {
			rows = append(rows, Row{Key: []byte("r1"), Item: Item{Value: []byte("ok"), CAS: 4}}) // r1 again: the last wins
			write = c.WriteRows
		}
		errs := write(ctx, rows)
		for i, err := range errs {
			k := string(rows[i].Key)
			if k == "r2" {
				if !errors.Is(err, ErrValueTooLong) || !Refused(err) {
					t.Errorf("distinct %v: the long row: %v", distinct, err)
				}
			} else if err != nil || readDemo(t, db, "demo_dataerr", k).v != "ok" {
				t.Errorf("distinct %v: row %d (%s) beside it: %v", distinct, i, k, err)
			}
		}
		if r := readDemo(t, db, "demo_dataerr", "r1"); !distinct && r.cas != 4 {
			t.Errorf("r1 written twice: %+v, want the last write (cas 4)", r)
		}
		if n := comInsert(t, db) - before; n != 5 {
			t.Fatalf("distinct %v: %d INSERT statements, want 5 (the batch, then each row alone)", distinct, n)
		}
	}
}

// TestDeadlockRetriedAsBatch: a batch chosen as a deadlock's victim (1213)
// is run again as one batch once the other transaction is through.
func TestDeadlockRetriedAsBatch(t *testing.T) {
	db := openDB(t)
	c := demo(t, db, "demo_deadlock")
	exec(t, db, "INSERT INTO test.demo_deadlock (c1, c2) VALUES ('a', 'old'), ('b', 'old')")
	other, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	defer other.Rollback()
	// Many rows make the other transaction the heavier one: InnoDB rolls back
	// the lighter, the batch.
	for i := range 50 {
		if _, err := other.Exec("INSERT INTO test.demo_deadlock (c1, c2) VALUES (?, 'heavy')", fmt.Sprint("z", i)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := other.Exec("SELECT c1 FROM test.demo_deadlock WHERE c1 = 'b' FOR UPDATE"); err != nil {
		t.Fatal(err)
	}
	before := comInsert(t, db)
	done := make(chan []error, 1)
	go func() { // locks a, then waits for b
		wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		done <- c.WriteRows(wctx, []Row{{Key: []byte("a"), Item: Item{Value: []byte("new")}}, {Key: []byte("b"), Item: Item{Value: []byte("new")}}})
	}()
	for waiting := 0; waiting == 0; {
		time.Sleep(10 * time.Millisecond)
		if err := db.QueryRow("SELECT COUNT(*) FROM information_schema.INNODB_LOCK_WAITS").Scan(&waiting); err != nil {
			t.Fatal(err)
		}
	}
	// The other transaction now wants a: a deadlock, and the batch loses it.
	if _, err := other.Exec("SELECT c1 FROM test.demo_deadlock WHERE c1 = 'a' FOR UPDATE"); err != nil {
		t.Fatalf("the heavier transaction: %v", err)
	}
	time.Sleep(300 * time.Millisecond)
	if err := other.Commit(); err != nil {
		t.Fatal(err)
	}
	for i, err := range <-done {
		if err != nil {
			t.Errorf("row %d: %v", i, err)
		}
	}
	for _, k := range []string{"a", "b"} {
		if r := readDemo(t, db, "demo_deadlock", k); r.v != "new" {
			t.Errorf("%s = %+v", k, r)
		}
	}
	if n := comInsert(t, db) - before; n != 2 {
		t.Fatalf("%d INSERT statements, want 2 (the batch, then the batch again)", n)
	}
}

// TestCommitGathersAnsweredWriters: writers that each send their next Set as soon as the last one is answered make
// one batch with the Sets that queued meanwhile, instead of the committer sending those at once and the answered
// writer's Set alone after them; and a writer that does not come back holds the batch only for the bounded wait.
func TestCommitGathersAnsweredWriters(t *testing.T) {
	db := openDB(t)
	c := demo(t, db, "demo_gather")
	// The test's wait bound: long enough for a goroutine to come back on a loaded machine, or short.
	setLimit := func(d time.Duration) {
		c.mu.Lock()
		c.gatherMax = d
		c.mu.Unlock()
	}
	set := func(key string) {
		if _, err := c.Set(ctx, []byte(key), Item{Value: []byte("v-" + key)}); err != nil {
			t.Errorf("set %s: %v", key, err)
		}
	}
	// round: A's Set waits on a locked row while B and C queue; when the lock goes, A (if again) sets again soon.
	round := func(a, again string, queued ...string) (statements uint64) {
		// The last round's committer may still wait for writers that are done: A must find no commit in flight.
		waitFor(t, "no commit in flight", func() bool { c.mu.Lock(); defer c.mu.Unlock(); return !c.committing })
		release := lockRow(t, db, "demo_gather", a)
		before := c.Stats().Batches
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			set(a)
			if again != "" {
				// Later than a committer that does not gather takes what queued, well within A's statement's time.
				time.Sleep(50 * time.Millisecond)
				set(again)
			}
		}()
		waitFor(t, "A's commit in flight", func() bool { c.mu.Lock(); defer c.mu.Unlock(); return c.committing })
		for _, k := range queued {
			wg.Add(1)
			go func() { defer wg.Done(); set(k) }()
		}
		waitFor(t, "the others queued", func() bool { c.mu.Lock(); defer c.mu.Unlock(); return len(c.queue) == len(queued) })
		time.Sleep(300 * time.Millisecond) // A's statement takes longer than A takes to come back
		release()
		wg.Wait()
		for _, k := range append([]string{a, again}, queued...) {
			if k != "" {
				if r := readDemo(t, db, "demo_gather", k); r.v != "v-"+k {
					t.Errorf("%s = %+v", k, r)
				}
			}
		}
		return c.Stats().Batches - before
	}

	t.Run("comes back", func(t *testing.T) {
		setLimit(time.Minute)
		if n := round("a1", "a2", "b1", "c1"); n != 2 {
			t.Fatalf("%d statements, want 2: a1 alone, then b1, c1 and a2 together", n)
		}
	})
	t.Run("does not come back", func(t *testing.T) {
		setLimit(50 * time.Millisecond)
		if n := round("a3", "", "b3", "c3"); n != 2 {
			t.Fatalf("%d statements, want 2: a3 alone, then b3 and c3 after the bounded wait", n)
		}
	})
}

// waitFor polls cond until it holds, or fails the test after 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited 10s for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// openBlobContainer opens, on keyway's own pool (OpenDB) to dsn's server, a container on a new table test.<table> of
// a VARCHAR(32) key and a LONGBLOB value; both close at the test's end.
func openBlobContainer(t *testing.T, dsn, table string) (*sql.DB, *Container) {
	t.Helper()
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	db := OpenDB(cfg)
	t.Cleanup(func() { db.Close() })
	exec(t, db, "DROP TABLE IF EXISTS test."+table)
	exec(t, db, "CREATE TABLE test."+table+" (c1 VARCHAR(32) PRIMARY KEY, c2 LONGBLOB)")
	c, err := Open(ctx, db, Def{Name: table, Schema: "test", Table: table, KeyColumn: "c1", ValueColumns: []string{"c2"}},
		Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return db, c
}

// TestSetsWithinMaxAllowedPacket: concurrent Sets whose values together pass the server's max_allowed_packet are
// committed in batches that each stay within it (the server ends the connection of a client that sends more, and
// every Set of such a batch failed), and a row that cannot go even alone is refused before any SQL, as too long,
// while one whose value escapes to just under the limit is written.
func TestSetsWithinMaxAllowedPacket(t *testing.T) {
	// The pool keyway writes with (OpenDB): its statements are interpolated by the driver, which takes them to be
	// within its own default limit (64 MiB), not the server's.
	db, c := openBlobContainer(t, testenv.SharedMariaDB(t).AppDSN, "packet")
	var maxPacket int
	if err := db.QueryRow("SELECT @@max_allowed_packet").Scan(&maxPacket); err != nil {
		t.Fatal(err)
	}
	// 24 writers, each value a twelfth of the limit: the batch that queues behind the first Set passes it (and stays
	// under the driver's own limit, past which it would send the values apart as long data).
	const writers = 24
	value := []byte(strings.Repeat("v", maxPacket/12))
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := c.Set(ctx, fmt.Appendf(nil, "w%02d", w), Item{Value: value}); err != nil {
				t.Errorf("set w%02d: %v", w, err)
			}
		}()
	}
	wg.Wait()
	var count, bytes int
	if err := db.QueryRow("SELECT COUNT(*), SUM(LENGTH(c2)) FROM test.packet").Scan(&count, &bytes); err != nil {
		t.Fatal(err)
	}
	if count != writers || bytes != writers*len(value) {
		t.Fatalf("table holds %d rows of %d bytes in all, want %d of %d", count, bytes, writers, writers*len(value))
	}
	// Plain bytes: the bound (two per byte) is passed, the exact count is not.
	if _, err := c.Set(ctx, []byte("big"), Item{Value: []byte(strings.Repeat("b", maxPacket*3/4))}); err != nil {
		t.Errorf("a value of three quarters of max_allowed_packet, nothing to escape: %v", err)
	}
	// Every byte escaped: twice the limit.
	if _, err := c.Set(ctx, []byte("quotes"), Item{Value: []byte(strings.Repeat("'", maxPacket*3/4))}); !errors.Is(err, ErrValueTooLong) {
		t.Errorf("a value that escapes past max_allowed_packet: %v, want ErrValueTooLong", err)
	}
	if err := c.Check([]byte("quotes"), Item{Value: []byte(strings.Repeat("'", maxPacket*3/4))}); !errors.Is(err, ErrValueTooLong) {
		t.Errorf("Check of that value: %v, want ErrValueTooLong", err)
	}
}

// TestMaxAllowedPacketLoweredWhileServing: a DBA lowers max_allowed_packet after the table was checked. The server
// ends the connection of a statement past the new limit (the client sees a broken pipe, not an error reply); the
// container then learns the new limit, so the next batches fit it instead of failing alike for as long as keyway
// runs (the write-behind retries a round as it was).
func TestMaxAllowedPacketLoweredWhileServing(t *testing.T) {
	m := testenv.NewMariaDB(t) // private: max_allowed_packet is global
	db, c := openBlobContainer(t, m.AppDSN, "lowered")
	root, err := sql.Open("mysql", m.RootDSN)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()

	const lowered = 1 << 20
	exec(t, root, fmt.Sprintf("SET GLOBAL max_allowed_packet = %d", lowered))
	db.SetMaxIdleConns(0) // the pool's open connections keep the old limit: new ones take the new
	db.SetMaxIdleConns(64)

	// 40 rows of 50 KB: one statement under the limit the table was checked with, twice the new one.
	rows := make([]Row, 40)
	for i := range rows {
		rows[i] = Row{Key: fmt.Appendf(nil, "r%02d", i), Item: Item{Value: bytes.Repeat([]byte{'v'}, 50_000)}}
	}
	if n := c.BatchLen(rows); n != len(rows) {
		t.Fatalf("before the change: BatchLen %d, want %d", n, len(rows))
	}
	errs := c.WriteRows(ctx, rows)
	if errs[0] == nil {
		t.Fatal("a statement of 2 MB passed a max_allowed_packet of 1 MB")
	}
	// Written as the write-behind does: a batch at a time, as many rows as BatchLen gives.
	for left := rows; len(left) > 0; {
		n := c.BatchLen(left)
		if n == len(rows) {
			t.Fatalf("after the failed statement BatchLen still gives all %d rows", n)
		}
		for i, err := range c.WriteRows(ctx, left[:n]) {
			if err != nil {
				t.Fatalf("row %s: %v", left[i].Key, err)
			}
		}
		left = left[n:]
	}
	var count int
	if err := db.QueryRow("SELECT COUNT(*) FROM test.lowered").Scan(&count); err != nil {
		t.Fatal(err)
	}
	if count != len(rows) {
		t.Fatalf("table holds %d rows, want %d", count, len(rows))
	}

	// Lowered to 16 KiB: rows of 2 KB still go, a few to a statement (the statement's own text and the longest key
	// take a few hundred bytes of it, not a fixed 64 KiB).
	exec(t, root, "SET GLOBAL max_allowed_packet = 16384")
	db.SetMaxIdleConns(0)
	db.SetMaxIdleConns(64)
	small := make([]Row, 30)
	for i := range small {
		small[i] = Row{Key: fmt.Appendf(nil, "s%02d", i), Item: Item{Value: bytes.Repeat([]byte{'s'}, 2_000)}}
	}
	c.WriteRows(ctx, small[:c.BatchLen(small)]) // sized for 1 MB: fails, and the container learns of 16 KiB
	for left := small; len(left) > 0; {
		n := c.BatchLen(left)
		for i, err := range c.WriteRows(ctx, left[:n]) {
			if err != nil {
				t.Fatalf("row %s under a max_allowed_packet of 16 KiB: %v", left[i].Key, err)
			}
		}
		left = left[n:]
	}
	if err := db.QueryRow("SELECT COUNT(*) FROM test.lowered WHERE c1 LIKE 's%'").Scan(&count); err != nil {
		t.Fatal(err)
	}
	if count != len(small) {
		t.Fatalf("table holds %d of the small rows, want %d", count, len(small))
	}
}
