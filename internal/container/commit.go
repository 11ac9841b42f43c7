package container

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/keywaydb/keyway/internal/mysqlwire"
)

// batchTimeout bounds one group-commit batch, retries included; the batch
// also stops once every waiter's context has ended (see batchContext). A
// waiter whose own context ends earlier stops waiting (its write may still
// commit).
const batchTimeout = 30 * time.Second

// Retry policy of WriteRows (see the package comment): a statement that lost
// a deadlock (1213) or waited too long for a lock (1205) is run again, the
// whole batch, at most lockRetries times, after a pause of lockBackoff,
// doubled each time, plus up to as much again at random (so two writers that
// deadlocked do not meet again in step), and never past ctx.
const (
	lockRetries = 4
	lockBackoff = 10 * time.Millisecond
)

// setReq is one queued Set. Its key and it.Value are the request's own copy
// (one allocation for both, made by Set): the caller's buffers are the
// caller's again as soon as Set returns, while the committer may still write
// or retry the row after that.
type setReq struct {
	ctx  context.Context
	key  []byte
	it   Item // its CAS is assigned by the committer
	resp chan setResp
}

type setResp struct {
	cas uint64
	err error
}

// Set stores it under key, unconditionally, through the group committer. It
// returns after the transaction holding the row committed (or failed); an
// expired row is overwritten like any other. If ctx ends first, Set returns
// ctx's error and the write may or may not be committed. A key or value that
// does not fit the table fails only this Set (WriteRows checks each row).
//
// A Set that finds no commit in flight writes its row itself, on the caller's
// goroutine: a lone writer pays one round trip and no hand-off. Sets that
// arrive while a commit is in flight queue, and once it ends a committer
// goroutine writes what queued as the next batch (and so on while Sets keep
// queuing), as Pebble's commit pipeline does; before it takes a batch the
// committer waits a little for the writers the last commit answered (see
// gatherLocked and package gather). With Options.MaxWait set every Set
// queues and the committer waits that long before taking a batch.
//
// key and it.Value are only read during the call: Set copies them before it
// queues the write, so the caller may reuse them (a connection's read buffer)
// once Set returns, whatever it returned.
func (c *Container) Set(ctx context.Context, key []byte, it Item) (uint64, error) {
	if c.sh != nil {
		p, err := c.PartFor(ctx, key)
		if err != nil {
			return 0, err
		}
		return p.Set(ctx, key, it)
	}
	if err := c.notLive(); err != nil {
		return 0, err
	}
	own := make([]byte, len(key)+len(it.Value))
	n := copy(own, key)
	copy(own[n:], it.Value)
	it.Value = own[n:]
	r := &setReq{ctx: ctx, key: own[:n:n], it: it, resp: make(chan setResp, 1)}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return 0, c.errorf("%w", ErrClosed)
	}
	lead := !c.committing // no commit in flight: this Set starts one
	if lead {
		c.committing = true
		c.committers.Add(1)
	}
	if lead && c.opt.MaxWait == 0 {
		// Alone: this Set is the batch, and its caller's context the batch's (see batchContext).
		c.mu.Unlock()
		took := c.commitBatch([]*setReq{r})
		c.handOff(took)
		resp := <-r.resp
		if resp.err != nil && ctx.Err() != nil {
			return 0, ctx.Err() // as a waiter that gave up would say
		}
		return resp.cas, resp.err
	}
	c.queue = append(c.queue, r)
	if lead {
		go c.commitQueued()
	} else if c.gathering > 0 && len(c.queue) >= c.gathering {
		c.gathering = 0
		c.grown <- struct{}{} // buffered; only the gathering committer receives, once per gathering
	}
	c.mu.Unlock()
	select {
	case resp := <-r.resp:
		return resp.cas, resp.err
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// handOff ends a commit of one Set made on a caller's goroutine, whose statement took took: Sets that queued
// meanwhile go to a committer goroutine, so the caller returns at once.
func (c *Container) handOff(took time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.queue) == 0 {
		c.committing = false
		c.committers.Done()
		return
	}
	c.lastRows, c.lastExec = 1, took
	go c.commitQueued()
}

// commitQueued is the committer: it takes up to MaxBatch queued Sets (after waiting MaxWait, if set, or gathering),
// writes them in one statement and answers every waiter, until nothing is queued; then no commit is in flight.
func (c *Container) commitQueued() {
	for {
		if c.opt.MaxWait > 0 {
			time.Sleep(c.opt.MaxWait)
		}
		c.mu.Lock()
		c.gatherLocked()
		n := c.batchLen(min(len(c.queue), c.opt.MaxBatch), func(i int) ([]byte, Item) { return c.queue[i].key, c.queue[i].it })
		if n == 0 {
			c.committing = false
			c.committers.Done()
			c.mu.Unlock()
			return
		}
		batch := slices.Clone(c.queue[:n])
		c.queue = append(c.queue[:0], c.queue[n:]...)
		c.lastRows = n
		c.mu.Unlock()
		c.lastExec = c.commitBatch(batch) // only the committer reads or writes it while a commit is in flight
	}
}

// gatherLocked waits, before the committer takes a batch, for the writers the last batch answered to queue their
// next Sets (see package gather: the wait, its reason and its policy), for at most as long as the last batch's
// statement took and gatherMax. The caller holds c.mu, which is released while waiting. With 8 closed-loop writers
// it about doubles the rows per commit (see docs/benchmarks.md).
func (c *Container) gatherLocked() {
	if c.opt.MaxWait > 0 {
		return
	}
	want := c.gather.Want(c.lastRows, len(c.queue), c.opt.MaxBatch)
	if want == 0 {
		return
	}
	c.gathering = want // Set signals grown once the queue holds want, and sets gathering to 0
	wait := min(c.lastExec, c.gatherMax)
	c.mu.Unlock()
	c.gather.Wait(wait, c.grown, func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.gathering == 0
	})
	c.mu.Lock()
	if c.gathering == 0 { // a Set signalled, perhaps after the wait ran out: take the signal
		select {
		case <-c.grown:
		default:
		}
	}
	c.gathering = 0
}

// commitBatch writes batch as one multi-row upsert and answers each waiter. It returns how long the statement took.
func (c *Container) commitBatch(batch []*setReq) (took time.Duration) {
	// Drop waiters that gave up before their write started.
	live := batch[:0:0]
	rows := make([]Row, 0, len(batch))
	for _, r := range batch {
		if r.ctx.Err() != nil {
			r.resp <- setResp{err: r.ctx.Err()}
			continue
		}
		r.it.CAS = c.AssignCAS(r.it)
		live = append(live, r)
		rows = append(rows, Row{Key: r.key, Item: r.it})
	}
	if len(live) == 0 {
		return 0
	}
	ctx, cancel := batchContext(live)
	defer cancel()
	if len(live) == 1 {
		ctx = c.unwatched(live[0].ctx, ctx)
	}
	start := time.Now()
	errs := c.WriteRows(ctx, rows)
	took = time.Since(start)
	for i, r := range live {
		if errs[i] != nil {
			r.resp <- setResp{err: errs[i]}
		} else {
			r.resp <- setResp{cas: r.it.CAS}
		}
	}
	return took
}

// batchContext is the context of a batch for the waiters live: it ends after
// batchTimeout, or once every waiter's context has ended, since then nobody
// waits for the answer and the next batch should not wait behind this one.
// Until then every row is written, also those of waiters that gave up.
func batchContext(live []*setReq) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(context.Background(), batchTimeout)
	var left atomic.Int64
	left.Store(int64(len(live)))
	stops := make([]func() bool, len(live))
	for i, r := range live {
		stops[i] = context.AfterFunc(r.ctx, func() {
			if left.Add(-1) == 0 {
				cancel()
			}
		})
	}
	return ctx, func() {
		for _, stop := range stops {
			stop()
		}
		cancel()
	}
}

// Row is one row to write: a key and its item, whose CAS is written as given.
type Row struct {
	Key  []byte
	Item Item
}

// WriteRows writes rows with one multi-row INSERT … ON DUPLICATE KEY UPDATE
// (under autocommit, one InnoDB transaction: all rows or none, durable when
// it returns) and returns each row's error, nil for a row now in the table.
// Each Item.CAS is written as it is: the caller assigns it. When two rows
// have the same key (as the key column compares them) the later one wins.
//
// Failures, by kind (the retry policy):
//   - a deadlock (1213) or lock wait timeout (1205) runs the whole batch again,
//     up to lockRetries times with a short growing pause (see upsertRetry);
//   - a server error about the data (one value too long, out of range…: what
//     Refused reports) runs each row alone once, so the bad row fails alone
//     and its neighbours are written;
//   - anything else (connection lost, read-only server, ctx ended) is every
//     row's error at once: running rows alone would only repeat it.
//
// Nothing runs after ctx ends.
func (c *Container) WriteRows(ctx context.Context, rows []Row) []error {
	return c.writeRows(ctx, rows, false)
}

// WriteDistinctRows is WriteRows for rows of which no two are one row (as the key column compares keys): a
// write-behind round, whose rows are its queue's distinct keys. It skips WriteRows' search for a row written twice,
// which normalizes every key into a string and a map (BenchmarkWriteDistinctRows256 against BenchmarkWriteRows256
// shows the allocations it saves).
func (c *Container) WriteDistinctRows(ctx context.Context, rows []Row) []error {
	return c.writeRows(ctx, rows, true)
}

// writeRows is WriteRows, or with distinct WriteDistinctRows.
func (c *Container) writeRows(ctx context.Context, rows []Row, distinct bool) []error {
	if c.sh != nil {
		return c.shardedWriteRows(ctx, rows, distinct)
	}
	errs := make([]error, len(rows))
	w := getWriteScratch()
	defer w.release()
	// Every row's arguments (key, then writeArgs) slice one array; each key is normalized once.
	width := 1 + c.writeWidth()
	flat := slices.Grow(w.flat[:0], len(rows)*width)
	args := w.rowArgs(len(rows))
	// Normalized keys, and the index of each one's last valid row: only a batch can hold one row twice, and only
	// when its rows are not known to be distinct. Otherwise norm stays empty, and release has nothing to unmap.
	looked := 0
	if len(rows) > 1 && !distinct {
		looked = len(rows)
	}
	norm := w.normKeys(looked)
	var last map[string]int
	if looked > 0 {
		last = w.lastRows(looked)
	}
	for i, r := range rows {
		if err := c.checkKey(r.Key); err != nil {
			errs[i] = err
			continue
		}
		start := len(flat)
		a, err := c.appendWriteArgs(append(flat, r.Key), r.Item, r.Item.CAS)
		if err != nil {
			errs[i] = err
			clear(flat[start:min(start+width, cap(flat))]) // what the refused row left past flat's end (release clears up to it)
			continue
		}
		flat = a
		args[i] = flat[start:len(flat):len(flat)]
		if last != nil {
			norm[i] = c.normKey(string(r.Key))
			last[norm[i]] = i
		}
	}
	w.flat = flat
	isLast := func(i int) bool { return errs[i] == nil && (last == nil || last[norm[i]] == i) }
	write := w.write[:0]
	for i := range rows {
		if isLast(i) {
			write = append(write, args[i])
		}
	}
	w.write = write
	if len(write) == 0 {
		return errs
	}
	// In key order: InnoDB inserts a batch's rows with less work (a write-behind round comes in its map's order,
	// which is shuffled), and statements that share rows take their locks in one order. The rows are distinct
	// keys, so the order changes nothing else.
	slices.SortFunc(write, func(a, b []any) int { return bytes.Compare(a[0].([]byte), b[0].([]byte)) })
	// On a group that reads replicas, every statement runs on one connection, whose last GTID is noted before the
	// rows are acknowledged (replicas.go).
	q, finish, err := c.writer(ctx)
	if err == nil {
		err = c.upsertRetry(ctx, q, w, write)
	} else {
		finish = func(bool) error { return nil }
	}
	// After a data error each written row runs alone: alone is each one's error, by index; a row the batch held
	// twice gets its last's.
	var alone []error
	wrote := err == nil
	if err != nil && dataError(err) && len(write) > 1 {
		alone = make([]error, len(rows))
		for i := range rows {
			if isLast(i) {
				alone[i] = c.writeErr(c.upsertRetry(ctx, q, w, [][]any{args[i]}))
				wrote = wrote || alone[i] == nil
			}
		}
	}
	if perr := finish(wrote); perr != nil {
		// Written, but the rows' position is not known: they cannot be acknowledged (replicas.go).
		if alone == nil {
			err = perr
		} else {
			for i, e := range alone {
				if e == nil && isLast(i) {
					alone[i] = perr
				}
			}
		}
	}
	for i := range rows {
		switch {
		case errs[i] != nil:
		case alone == nil:
			errs[i] = c.writeErr(err)
		case last != nil:
			errs[i] = alone[last[norm[i]]]
		default:
			errs[i] = alone[i]
		}
	}
	return errs
}

// writeScratch is WriteRows' working memory, reused from one call to the next (writeScratches): a write-behind
// round writes hundreds of rows per statement, and building their arguments afresh each time was a tenth of what
// an async set allocated (8 writers, async container). Released, it keeps its arrays but no row's data.
type writeScratch struct {
	flat  []any          // every row's arguments
	args  [][]any        // each row's, slicing flat
	norm  []string       // each row's normalized key
	last  map[string]int // normalized key -> index of its last row
	write [][]any        // the rows the statement writes
	stmt  []any          // the statement's arguments (upsert)
}

var writeScratches = sync.Pool{New: func() any { return new(writeScratch) }}

func getWriteScratch() *writeScratch { return writeScratches.Get().(*writeScratch) }

// maxScratchRows bounds what a released scratch keeps: a batch larger than this leaves its arrays to the collector.
const maxScratchRows = 4096

func (w *writeScratch) rowArgs(n int) [][]any {
	w.args = slices.Grow(w.args[:0], n)[:n]
	return w.args
}

func (w *writeScratch) normKeys(n int) []string {
	w.norm = slices.Grow(w.norm[:0], n)[:n]
	return w.norm
}

func (w *writeScratch) lastRows(n int) map[string]int {
	if w.last == nil {
		w.last = make(map[string]int, n)
	}
	return w.last
}

// release drops every reference to the rows and returns w to the pool, unless it grew past maxScratchRows.
func (w *writeScratch) release() {
	if cap(w.args) > maxScratchRows {
		return
	}
	for _, k := range w.norm {
		delete(w.last, k) // not clear(w.last): that costs the map's capacity, grown by the largest batch, every time
	}
	// Each array's length is what this call used; past it, earlier releases cleared.
	clear(w.flat)
	clear(w.args)
	clear(w.norm)
	clear(w.write)
	clear(w.stmt)
	writeScratches.Put(w)
}

// dataError reports whether err is the server refusing a row's data.
func dataError(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && dataErrors[me.Number]
}

// lockError reports whether err is a lost deadlock or a lock wait timeout:
// the statement was rolled back and may pass when run again.
func lockError(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && (me.Number == mysqlwire.ERLockDeadlock || me.Number == mysqlwire.ERLockWaitTimeout)
}

// upsertRetry runs upsert, and runs it again after a deadlock or lock wait
// timeout, up to lockRetries times, pausing between attempts; it stops when
// ctx ends and returns the last error. Every statement counts in Stats.
func (c *Container) upsertRetry(ctx context.Context, q sqlConn, w *writeScratch, rows [][]any) error {
	pause := lockBackoff
	for attempt := 0; ; attempt++ {
		err := c.upsert(ctx, q, w, rows)
		c.lowerMaxPacket(ctx, err)
		c.batches.Add(1)
		c.batchedSets.Add(uint64(len(rows)))
		if err == nil || !lockError(err) || attempt == lockRetries {
			return err
		}
		t := time.NewTimer(pause + rand.N(pause))
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		pause *= 2
	}
}

// upsert writes rows (each the key, then writeArgs) with one INSERT … ON
// DUPLICATE KEY UPDATE under autocommit, on q; w holds the statement's arguments.
func (c *Container) upsert(ctx context.Context, q sqlConn, w *writeScratch, rows [][]any) error {
	if len(rows) == 1 {
		_, err := q.ExecContext(ctx, c.stmt.upsert1, rows[0]...)
		return err
	}
	var b strings.Builder
	b.Grow(len(c.stmt.upsert) + len(rows)*(len(c.stmt.tuple)+2) + len(c.stmt.onDup))
	b.WriteString(c.stmt.upsert)
	args := slices.Grow(w.stmt[:0], len(rows)*len(rows[0]))
	for i, r := range rows {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(c.stmt.tuple)
		args = append(args, r...)
	}
	w.stmt = args
	b.WriteString(c.stmt.onDup)
	_, err := q.ExecContext(ctx, b.String(), args...)
	return err
}
