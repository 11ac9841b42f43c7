package server

import (
	"context"
	"database/sql"
	"sync"
	"testing"
	"time"

	"github.com/keywaydb/keyway/internal/testenv"
)

// TestSwitchoverUnderWriters: writers insert through keyway's SQL door while keyway switches over twice with a
// hold of 2 s. The hold ends as soon as no transaction that wrote is open on the primary, not at its end:
//   - the first switchover has a read view open on the primary (BEGIN, SELECT, left open): it does not wait for
//     it, and ends its hold with nothing open (StillOpen 0) before the hold is out;
//   - the second has a transaction that inserted a row and commits 400 ms later: it waits for that COMMIT, and
//     the row is on the new primary.
//
// No write fails, every acknowledged row is on the last primary, once. (Polled every 10 ms, INNODB_TRX kept the
// snapshot of the switchover's first look for its whole hold: the INSERTs in flight then counted as open
// transactions, StillOpen was above 0 and every write waited the 2 s out.)
func TestSwitchoverUnderWriters(t *testing.T) {
	e := newPromoteEnv(t, testenv.ReplicationOptions{}, false)
	ctx := context.Background()
	g := e.srv.topo.Group("main")
	const hold = 2 * time.Second
	w := startAckWriters(e.sql, 4)
	stop := sync.OnceFunc(w.stop)
	defer stop()
	w.waitAcked(t, 200)

	direct := func(addr string) *sql.DB { return openTestDB(t, "app:secret@tcp("+addr+")/test") }
	reader, err := direct(g.Addr()).BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Rollback()
	var n int
	if err := reader.QueryRow("SELECT COUNT(*) FROM acked").Scan(&n); err != nil {
		t.Fatal(err)
	}
	rep, err := g.Switchover(ctx, "", hold)
	t.Logf("switchover with a read view open: %+v", rep)
	if err != nil {
		t.Fatalf("switchover: %v", err)
	}
	if rep.StillOpen != 0 || rep.Held >= hold {
		t.Errorf("the first switchover held writes %v of its %v, with %d transactions open at the end, want none (a read view is not waited for, nor a write in flight)",
			rep.Held, hold, rep.StillOpen)
	}
	w.waitAcked(t, 100) // the writers go on, to the new primary

	const commitAfter = 400 * time.Millisecond
	writer, err := direct(g.Addr()).BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := writer.Exec("INSERT INTO acked (w, n) VALUES (100, 1)"); err != nil {
		t.Fatal(err)
	}
	committed := make(chan error, 1)
	time.AfterFunc(commitAfter, func() { committed <- writer.Commit() })
	rep, err = g.Switchover(ctx, "", hold)
	t.Logf("switchover with a transaction that wrote, committed after %v: %+v", commitAfter, rep)
	if err != nil {
		t.Fatalf("switchover: %v", err)
	}
	if err := <-committed; err != nil {
		t.Fatalf("the transaction open at the switchover did not commit: %v", err)
	}
	if rep.StillOpen != 0 || rep.Held < commitAfter || rep.Held >= hold {
		t.Errorf("the second switchover held writes %v of its %v, with %d transactions open at the end; want it to wait for the COMMIT after %v, and no longer",
			rep.Held, hold, rep.StillOpen, commitAfter)
	}
	w.waitAcked(t, 100)
	stop()

	for _, f := range w.failed {
		t.Errorf("write %v failed (%v to %v): %v", f.id, f.start.Format("15:04:05.000"), f.end.Format("15:04:05.000"), f.err)
	}
	have := onServer(t, direct(rep.New))
	checkNoneTwice(t, have)
	missing := 0
	for k := range w.acked {
		if have[k] == 0 {
			missing++
		}
	}
	if missing > 0 || have[[2]int{100, 1}] != 1 {
		t.Errorf("%d of %d acknowledged rows are not on the new primary %s; the row committed during the hold: %d times",
			missing, len(w.acked), rep.New, have[[2]int{100, 1}])
	}
}
