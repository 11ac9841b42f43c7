// Package writebehind holds the sets of a write = "async" container that were
// acknowledged before they reached the table, and writes them there in
// batches.
//
// Invariants:
//   - Per row only the latest write waits; a later Put replaces it. Rows are
//     told apart as the key column compares keys (container.NormKey), so "k"
//     and "K" are one row under a case-insensitive collation. A waiting write
//     is kept under its journal key (prefix + NormKey of its row), always.
//   - Key rule while the container is not checked (its backend was down at
//     start, so the collation is unknown): the writes waiting are those the
//     journal held (no Put gets past the container's Check), each under the
//     key the run that wrote it made. A row is found by that key or by the
//     row exactly as written, which are the same row under any rule; when
//     neither matches, Get and Sync fail with the container's
//     *NotCheckedError instead of reporting no write, because under the rule
//     the table will reveal the row may be one that waits ("K" for a waiting
//     "k"), and a caller told "none" would go on to the table.
//   - Going live: the container calls the queue (container.OnLive) after it
//     learnt the key rule and before anything can see it live; the queue then
//     keys every waiting write by that rule, under its lock. So a command that
//     sees the container live finds the row's waiting write by NormKey, and a
//     command that looked the row up before (under the rule of a container
//     not checked) either found it or failed: none acts on the row in the
//     table ahead of its waiting write. A record whose key is not its row's
//     NormKey (the collation changed between runs) is journaled again under
//     the right key; of two that turn out to be one row the later one stays.
//   - A Put is journaled in the local store (see store.JournalPut) before it
//     returns, so it is as durable as a local set; its journal record is
//     removed only after the table has it (or refused it). A new Queue picks
//     up the records its container left in the journal and writes them first.
//   - Buffers: Put copies the row and value it is given once, into the
//     write's journal record, and the waiting entry slices that record; the
//     caller may reuse its buffers when Put returns. Nothing changes a record
//     once built, so the journal, the queue and readers of Get share it.
//   - Until the table has a write, Get answers for the row: a reader never
//     sees the table's older row in place of an acknowledged write.
//   - Writes go out every Window, and sooner when MaxBatch rows wait, as
//     multi-row upserts of at most MaxBatch rows (fewer when the rows would
//     pass the server's max_allowed_packet: container.BatchLen). When
//     MaxPending rows or MaxPendingBytes wait (the table is down or slower
//     than the writers), Put waits for room up to WaitTimeout and then
//     fails: memory and the loss window stay bounded.
//   - A row the table refuses for its data (container.Refused) is dropped,
//     logged and counted, and OnDrop is told so cached copies can go, before
//     the row leaves the queue (so before a Sync or Drain waiting for it
//     returns): the table stays the truth. Any other error keeps every row and retries.
//   - Sync and Drain wait until writes made before them are in the table:
//     commands whose answer depends on the row, and SQL statements on the
//     table, call them first so they act after every acknowledged write.
//   - Replay never goes back in time: a row counts as written (leaves the
//     queue, lets Sync and Drain return) only once the removal of its journal
//     record is on disk (store.JournalDelete waits for the disk whatever the
//     store's durability; see send), so no write ordered after Sync or Drain
//     can be overwritten by a replay after a crash. (With the store's async
//     durability an acknowledged set itself is durable only within the
//     store's FlushInterval, as any async write.)
package writebehind

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/keywaydb/keyway/internal/container"
)

// Journal is where acknowledged writes are kept until the table has them
// (the local store; see store.JournalPut).
type Journal interface {
	JournalPut(key string, value []byte) (wait func() error)
	JournalDelete(key string) (wait func() error)
	TakeJournal(prefix string) map[string][]byte
}

// Defaults of zero Options fields; the config's defaults are these too.
const (
	DefaultWindow     = 100 * time.Millisecond
	DefaultMaxPending = 16384
)

// Options tune a Queue; zero values take the defaults.
type Options struct {
	Window     time.Duration // a write is sent to the table within about this long; default 100ms
	MaxBatch   int           // rows per statement; default 1024 (see defaultMaxBatch)
	MaxPending int           // rows waiting before Put waits for room; default 16384
	// MaxPendingBytes bounds the keys and values waiting (plus entryOverhead
	// each) the same way; default 64 MiB.
	MaxPendingBytes int64
	WaitTimeout     time.Duration // how long Put, Sync and Drain wait before they fail; default 10s
	Logger          *slog.Logger
	OnDrop          func(row []byte) // a write the table refused was dropped
}

// defaultMaxBatch is Options.MaxBatch's default. Each statement costs a round of its own (the statement, the
// journal removals' disk sync, the binlog follower's commit), so fewer, larger statements cost less CPU per row
// (1024 against 256: see docs/benchmarks.md). container.BatchLen keeps large rows' statements within the server's
// max_allowed_packet.
const defaultMaxBatch = 1024

// ErrBehind means writes queued for the table did not reach it in time: Put
// found no room, or Sync or Drain gave up waiting.
var ErrBehind = errors.New("the table has not taken the queued writes in time")

// Queue is the write-behind queue of one container.
type Queue struct {
	name   string
	c      *container.Container
	j      Journal
	prefix string // journal keys: prefix + row
	o      Options
	sh     *shardedQueue // a sharded container's: one queue per part (shards.go); nil otherwise

	mu      sync.Mutex
	cond    sync.Cond
	pending map[string]*entry   // by journal key (without prefix): NormKey of the row once live
	norm    func(string) string // the container's key rule; nil until it is live (see goLive)
	byRow   map[string]string   // until live: the row as written → its key in pending
	bytes   int64               // size of pending (see entry.size)
	// queued is len(pending) and queuedBytes is bytes, stored under mu after each change (countLocked), so Drain
	// can see "nothing pending" and Roomy "room to spare" without the lock: the SQL door settles before every
	// statement that names the table, and an event loop asks before a set.
	queued      atomic.Int64
	queuedBytes atomic.Int64
	seq         uint64 // the last Put's number
	lastErr     error  // the last failure to reach the table; nil once a round succeeds
	closed      bool

	kick chan struct{}
	quit chan struct{}
	done chan struct{}

	keyBuf []byte // Put's, under mu: a journal key being built (journalKeyLocked)

	// The loop's own: a round's rows and their entries, reused from round to round, and a batch's rows settled
	// (see send), reused from batch to batch.
	roundRows    []container.Row
	roundEntries []*entry
	settling     []settled

	written, dropped, failedRounds atomic.Uint64
}

// entry is the write waiting for one row. row and item.Value are slices of
// the write's journal record (see encode), which the queue builds from the
// caller's bytes in Put and never changes afterwards: the store's journal,
// the entry and the readers Get hands item to share it read-only.
type entry struct {
	row  []byte // the key as last written
	item container.Item
	seq  uint64
	// jkey is the entry's journal key, journalKey of its key in pending, which is jkey[len(prefix):]: built once
	// by Put (or New, or goLive when it keys the entry again), so a round settles the row without building it again.
	jkey string
}

// entryOverhead is what a waiting row costs beyond its key and value: the
// entry, its map slot and the journal record's header, roughly.
const entryOverhead = 128

func (e *entry) size() int64 { return int64(len(e.row)+len(e.item.Value)) + entryOverhead }

// Stats count a queue's work.
type Stats struct {
	Pending      int    `json:"pending"`       // rows waiting for the table
	PendingBytes int64  `json:"pending_bytes"` // their size, as MaxPendingBytes counts it
	Written      uint64 `json:"written"`       // rows the table took
	Dropped      uint64 `json:"dropped"`       // rows the table refused (see OnDrop)
	FailedRounds uint64 `json:"failed_rounds"` // rounds that could not reach the table
}

// New starts the queue of container c, journaling under prefix (unique per
// container, such as "@@name."). Writes left in the journal by an earlier run
// wait first.
func New(c *container.Container, j Journal, prefix string, o Options) *Queue {
	if o.Window <= 0 {
		o.Window = DefaultWindow
	}
	if o.MaxBatch <= 0 {
		o.MaxBatch = defaultMaxBatch
	}
	if o.MaxPending <= 0 {
		o.MaxPending = DefaultMaxPending
	}
	if o.MaxPendingBytes <= 0 {
		o.MaxPendingBytes = 64 << 20
	}
	if o.WaitTimeout <= 0 {
		o.WaitTimeout = 10 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if c.Sharded() {
		q := &Queue{name: c.Def().Name, c: c, j: j, prefix: prefix, o: o}
		return q.newSharded()
	}
	q := &Queue{
		name: c.Def().Name, c: c, j: j, prefix: prefix, o: o,
		pending: map[string]*entry{},
		byRow:   map[string]string{},
		kick:    make(chan struct{}, 1),
		quit:    make(chan struct{}),
		done:    make(chan struct{}),
	}
	q.cond.L = &q.mu
	// Records keep the key their run made; they are keyed by the container's
	// rule when it is live (now, or later: see goLive).
	for k, v := range j.TakeJournal(prefix) {
		row, it, ok := decode(v)
		if !ok {
			o.Logger.Error("write-behind: unreadable journal record dropped", "container", q.name, "key", k)
			j.JournalDelete(k)
			continue
		}
		c.SeenCAS(it.CAS)
		q.seq++
		e := &entry{row: row, item: it, seq: q.seq, jkey: k}
		q.pending[k[len(prefix):]] = e
		q.byRow[string(row)] = k[len(prefix):]
		q.bytes += e.size()
	}
	q.countLocked()
	if n := len(q.pending); n > 0 {
		o.Logger.Info("write-behind: writes acknowledged before the last stop are written first", "container", q.name, "rows", n)
	}
	// Not under q.mu: the container calls goLive holding its own lock, which
	// OnLive takes. Nobody else has q yet.
	if !c.OnLive(q.goLive) {
		q.goLive(c.NormKey)
	}
	go q.loop()
	return q
}

// goLive keys every waiting write by norm, the container's key rule, and
// makes it the queue's; the container calls it before it goes live (see
// container.OnLive), or New when it is live already.
func (q *Queue) goLive(norm func(string) string) {
	q.mu.Lock()
	var waits []func() error
	old := q.pending
	q.pending = make(map[string]*entry, len(old))
	moved := map[string]bool{} // new keys whose record must be journaled again
	for k, e := range old {
		nk := norm(string(e.row))
		if nk != k {
			q.o.Logger.Warn("write-behind: journal record keyed by another key rule (the key column's collation changed?); keyed again",
				"container", q.name, "key", k, "now", nk)
			waits = append(waits, q.j.JournalDelete(e.jkey))
			e.jkey = q.journalKey(nk)
			moved[nk] = true
		}
		if cur := q.pending[nk]; cur != nil {
			// Two waiting writes of one row: the later stays.
			q.o.Logger.Warn("write-behind: two journal records are one row under the key rule; the later stays", "container", q.name, "key", nk)
			moved[nk] = true
			if cur.seq > e.seq {
				q.bytes -= e.size()
				continue
			}
			q.bytes -= cur.size()
		}
		q.pending[nk] = e
	}
	q.countLocked()
	for nk := range moved {
		e := q.pending[nk]
		waits = append(waits, q.j.JournalPut(e.jkey, encode(e.row, e.item)))
	}
	q.norm, q.byRow = norm, nil
	q.mu.Unlock()
	for _, w := range waits {
		if err := w(); err != nil {
			q.o.Logger.Error("write-behind: journal", "container", q.name, "err", err)
		}
	}
}

// keyLocked is row's key in pending: NormKey once live. Until then it is
// the key of the waiting write for row if one is known (see the package
// comment), else found is false and k is row itself. The caller holds q.mu.
func (q *Queue) keyLocked(row []byte) (k string, found bool) {
	if q.norm != nil {
		return q.norm(string(row)), true
	}
	if _, ok := q.pending[string(row)]; ok {
		return string(row), true
	}
	if k, ok := q.byRow[string(row)]; ok {
		return k, true
	}
	return string(row), false
}

// Put queues item (its CAS already assigned) for row and returns once it is
// journaled. It fails with ErrBehind when the queue stays full for WaitTimeout.
// queued, when not nil, runs under the queue's lock right after the write is
// queued, so for concurrent Puts of a row it runs in queue order; it must not
// block or call the queue.
//
// row and item.Value are only read during the call: Put copies them (once,
// into the journal record) so the caller may reuse them when it returns.
func (q *Queue) Put(row []byte, item container.Item, queued func()) error {
	if q.sh != nil {
		return q.shardedPut(row, item, queued)
	}
	rec := encode(row, item)
	e := &entry{item: item}
	e.row, e.item.Value = recordSlices(rec)
	q.mu.Lock()
	jkey := q.journalKeyLocked(row)
	k := jkey[len(q.prefix):] // the map keeps one string, the journal key, not two
	if q.fullLocked(k, e) {
		q.nudge()
		deadline := time.Now().Add(q.o.WaitTimeout)
		for q.fullLocked(k, e) && !q.closed {
			if !q.waitLocked(deadline) {
				err := q.behindLocked()
				q.mu.Unlock()
				return err
			}
		}
	}
	if q.closed {
		q.mu.Unlock()
		return fmt.Errorf("container %q: %w", q.name, container.ErrClosed)
	}
	q.seq++
	e.seq = q.seq
	e.jkey = jkey
	if old := q.pending[k]; old != nil {
		q.bytes -= old.size()
	}
	q.pending[k] = e
	if q.byRow != nil {
		q.byRow[string(e.row)] = k
	}
	q.bytes += e.size()
	q.countLocked()
	if queued != nil {
		queued()
	}
	// Appended under q.mu so journal records of a row keep the order of its Puts.
	wait := q.j.JournalPut(e.jkey, rec)
	if len(q.pending) >= q.o.MaxBatch {
		q.nudge()
	}
	q.mu.Unlock()
	if err := wait(); err != nil {
		return fmt.Errorf("container %q: write-behind journal: %w", q.name, err)
	}
	return nil
}

// countLocked publishes the size of pending (queued, queuedBytes); the caller holds q.mu and calls it after changing
// pending or bytes.
func (q *Queue) countLocked() {
	q.queued.Store(int64(len(q.pending)))
	q.queuedBytes.Store(q.bytes)
}

// Roomy reports, without the lock, whether the queue has room to spare: fewer than half of MaxPending rows and
// half of MaxPendingBytes wait. A Put made then finds room unless others filled the other half meanwhile; a caller
// that must not wait for room (an event loop) asks first, and when the table falls behind or is down, the queue
// stops being roomy long before Put would wait.
func (q *Queue) Roomy() bool {
	if q.sh != nil {
		return q.shardedRoomy()
	}
	return q.queued.Load() < int64(q.o.MaxPending)/2 && q.queuedBytes.Load() < q.o.MaxPendingBytes/2
}

// fullLocked reports whether queuing e for the row with NormKey k must wait
// for room. Replacing a waiting write of the row needs no new row, only the
// bytes it adds; one write is always let in so a large value cannot wait forever.
func (q *Queue) fullLocked(k string, e *entry) bool {
	old := q.pending[k]
	add := e.size()
	if old != nil {
		add -= old.size()
	} else if len(q.pending) >= q.o.MaxPending {
		return true
	}
	return add > 0 && q.bytes+add > q.o.MaxPendingBytes && len(q.pending) > 0
}

// Get returns the write waiting for row, if there is one. While the
// container is not checked it fails with the container's *NotCheckedError
// when it cannot tell (see the package comment): the caller must not read
// the table for row then.
func (q *Queue) Get(row []byte) (container.Item, bool, error) {
	if q.sh != nil {
		return q.shardedGet(row)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	k, known := q.keyLocked(row)
	if !known {
		return container.Item{}, false, q.notCheckedLocked()
	}
	if e := q.pending[k]; e != nil {
		return e.item, true, nil
	}
	return container.Item{}, false, nil
}

// notCheckedLocked is the container's error while the queue is not live.
// The container goes live only after goLive, which needs q.mu: while the
// caller holds it with q.norm nil, the container is not live.
func (q *Queue) notCheckedLocked() error {
	if err := q.c.NotChecked(); err != nil {
		return err
	}
	return fmt.Errorf("container %q: write-behind queue not keyed yet", q.name) // not reached; see above
}

// Sync returns once the write waiting for row when it was called (if any)
// is in the table, or fails after WaitTimeout. While the container is not
// checked it fails as Get does when it cannot tell.
func (q *Queue) Sync(row []byte) error {
	if q.sh != nil {
		return q.shardedSync(row)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	k, known := q.keyLocked(row)
	if !known {
		return q.notCheckedLocked()
	}
	e := q.pending[k]
	if e == nil {
		return nil
	}
	q.nudge()
	deadline := time.Now().Add(q.o.WaitTimeout)
	for {
		k, _ = q.keyLocked(e.row) // the queue may have gone live meanwhile
		cur := q.pending[k]
		if cur == nil || cur.seq > e.seq {
			return nil
		}
		if q.closed || !q.waitLocked(deadline) {
			return q.behindLocked()
		}
	}
}

// Drain returns once every write waiting when it was called is in the table,
// or fails after WaitTimeout.
func (q *Queue) Drain() error {
	if q.sh != nil {
		return q.shardedDrain()
	}
	if q.queued.Load() == 0 {
		return nil // every acknowledged write has left the queue: its removal stored 0 after its Put stored more
	}
	return q.drainUntil(time.Now().Add(q.o.WaitTimeout))
}

func (q *Queue) drainUntil(deadline time.Time) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	upTo := q.seq
	for {
		older := false
		for _, e := range q.pending {
			if e.seq <= upTo {
				older = true
				break
			}
		}
		if !older {
			return nil
		}
		if q.lastErr == nil {
			q.nudge() // after a failure the loop retries every Window, not at each wake-up
		}
		if q.closed || !q.waitLocked(deadline) {
			return q.behindLocked()
		}
	}
}

// Stats returns the queue's counters.
func (q *Queue) Stats() Stats {
	if q.sh != nil {
		return q.shardedStats()
	}
	q.mu.Lock()
	n, b := len(q.pending), q.bytes
	q.mu.Unlock()
	return Stats{Pending: n, PendingBytes: b, Written: q.written.Load(), Dropped: q.dropped.Load(), FailedRounds: q.failedRounds.Load()}
}

// closeTimeout bounds how long Close keeps trying to reach the table.
const closeTimeout = 3 * time.Second

// Close writes what it can within closeTimeout and stops. Writes the table did
// not take stay in the journal for the next start (with a persistent store;
// without one they are lost, and the log says how many).
func (q *Queue) Close() error {
	if q.sh != nil {
		return q.shardedClose()
	}
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return nil
	}
	q.mu.Unlock()
	err := q.drainUntil(time.Now().Add(min(q.o.WaitTimeout, closeTimeout)))
	q.mu.Lock()
	q.closed = true
	left := len(q.pending)
	q.cond.Broadcast()
	q.mu.Unlock()
	close(q.quit)
	<-q.done
	if left > 0 {
		q.o.Logger.Error("write-behind: writes not in the table at stop stay in the local journal", "container", q.name, "rows", left, "err", err)
		return fmt.Errorf("container %q: %d acknowledged writes are not in the table: %w", q.name, left, err)
	}
	return nil
}

// loop sends waiting writes every Window, or sooner when nudged.
func (q *Queue) loop() {
	defer close(q.done)
	t := time.NewTicker(q.o.Window)
	defer t.Stop()
	for {
		select {
		case <-q.quit:
			return
		case <-t.C:
		case <-q.kick:
		}
		q.round()
	}
}

// round sends every write waiting at its start, MaxBatch rows per
// statement. It stops at the first batch that cannot reach the table.
func (q *Queue) round() {
	q.mu.Lock()
	if len(q.pending) == 0 {
		q.mu.Unlock()
		return
	}
	rows := slices.Grow(q.roundRows[:0], len(q.pending))
	entries := slices.Grow(q.roundEntries[:0], len(q.pending))
	for _, e := range q.pending {
		rows = append(rows, container.Row{Key: e.row, Item: e.item})
		entries = append(entries, e)
	}
	// Live, pending is keyed by the rows' NormKey: one write per row. Before, two keys can turn out to be one row.
	distinct := q.norm != nil
	q.mu.Unlock()
	defer q.keepRound(rows, entries)
	for len(rows) > 0 {
		n := q.c.BatchLen(rows[:min(len(rows), q.o.MaxBatch)]) // within the server's max_allowed_packet too
		if !q.send(rows[:n], entries[:n], distinct) {
			return
		}
		rows, entries = rows[n:], entries[n:]
	}
}

// settled is a row of a batch that the table took or refused, and the wait for its journal record's removal.
type settled struct {
	e    *entry
	wait func() error
}

// keepRound keeps a round's arrays for the next one, cleared so the rows' data goes to the collector, unless the
// round was an unusual one (a backlog after an outage) whose arrays are best left to the collector too.
func (q *Queue) keepRound(rows []container.Row, entries []*entry) {
	if cap(rows) > maxKeptRound {
		q.roundRows, q.roundEntries = nil, nil
		return
	}
	clear(rows)
	clear(entries)
	q.roundRows, q.roundEntries = rows[:0], entries[:0]
}

// maxKeptRound is the most rows whose arrays keepRound keeps.
const maxKeptRound = 1 << 16

// send writes one batch and settles its rows; false when the table could not
// be reached or the journal could not record that it was (the rows stay).
//
// A row the table took (or refused) counts as written, and leaves pending so
// that Sync and Drain can return, only once the removal of its journal record
// is on disk (store.JournalDelete waits for the sync whatever the store's
// durability): otherwise a statement ordered
// after Drain could change the row, keyway die before the removal reached the
// disk, and the next start replay the older queued write over the newer row.
// Waiting is the only guard that works for every writer: the alternative,
// replaying a record only where the row's cas column shows no newer write,
// needs a cas column (it is optional) and writers that keep it (the SQL door
// and other clients do not). The removals of one batch are appended together
// and ride one group commit of the store, so a batch waits for one disk sync.
//
// distinct says that no two rows are one row (see round); the container then skips looking for one.
func (q *Queue) send(rows []container.Row, entries []*entry, distinct bool) bool {
	ctx, cancel := context.WithTimeout(context.Background(), q.o.WaitTimeout)
	var errs []error
	if distinct {
		errs = q.c.WriteDistinctRows(ctx, rows)
	} else {
		errs = q.c.WriteRows(ctx, rows)
	}
	cancel()
	done := q.settling[:0]
	defer func() { clear(done); q.settling = done[:0] }() // kept for the next batch, as the round's rows are
	var dropped [][]byte
	ok := true
	q.mu.Lock()
	for i, r := range rows {
		switch err := errs[i]; {
		case err == nil:
			q.written.Add(1)
		case container.Refused(err):
			q.dropped.Add(1)
			dropped = append(dropped, r.Key)
			q.o.Logger.Error("write-behind: the table refused an acknowledged write; it is dropped", "container", q.name, "key", string(r.Key), "err", err)
		default:
			if ok {
				q.failLocked("cannot reach the table", err)
			}
			ok = false
			continue
		}
		// Settled, unless a newer write of the row came meanwhile (its journal
		// record then replaced this one; it stays). Appended under q.mu so the
		// removal keeps its order with the row's Puts.
		if e := entries[i]; q.waiting(e) {
			done = append(done, settled{e: e, wait: q.j.JournalDelete(e.jkey)})
		}
	}
	q.mu.Unlock()
	// Cached copies of refused rows go before the rows leave pending: a Sync or Drain that returns has them gone.
	if q.o.OnDrop != nil {
		for _, k := range dropped {
			q.o.OnDrop(k)
		}
	}
	jerrs := make([]error, len(done))
	for n, d := range done {
		jerrs[n] = d.wait()
	}
	q.mu.Lock()
	for n, d := range done {
		if jerrs[n] != nil {
			// The record may survive a crash: keep the row waiting (it is
			// written again next round, which Sync and Drain wait for).
			if ok {
				q.failLocked("cannot remove written rows from the journal", jerrs[n])
			}
			ok = false
			continue
		}
		if e := d.e; q.waiting(e) {
			q.bytes -= e.size()
			delete(q.pending, e.jkey[len(q.prefix):])
			q.countLocked()
			if q.byRow != nil {
				delete(q.byRow, string(e.row))
			}
		}
	}
	if ok && q.lastErr != nil {
		q.o.Logger.Info("write-behind: the table is reachable again", "container", q.name, "pending", len(q.pending))
		q.lastErr = nil
	}
	q.cond.Broadcast()
	q.mu.Unlock()
	return ok
}

// waiting reports whether e is still the write waiting for its row: no newer Put replaced it. Its key in pending
// is current even across goLive, which keys an entry again in place. The caller holds q.mu.
func (q *Queue) waiting(e *entry) bool {
	return q.pending[e.jkey[len(q.prefix):]] == e
}

// failLocked records a round that failed with err; the caller holds q.mu.
func (q *Queue) failLocked(what string, err error) {
	if q.lastErr == nil {
		q.o.Logger.Error("write-behind: "+what+"; writes wait and are retried", "container", q.name, "pending", len(q.pending), "err", err)
	}
	q.lastErr = err
	q.failedRounds.Add(1)
}

// nudge asks the loop for a round now; the caller holds q.mu.
func (q *Queue) nudge() {
	select {
	case q.kick <- struct{}{}:
	default:
	}
}

// waitLocked waits on q.cond until woken or deadline; false once it passed.
func (q *Queue) waitLocked(deadline time.Time) bool {
	d := time.Until(deadline)
	if d <= 0 {
		return false
	}
	t := time.AfterFunc(d, func() {
		q.mu.Lock()
		q.cond.Broadcast()
		q.mu.Unlock()
	})
	q.cond.Wait()
	t.Stop()
	return time.Now().Before(deadline)
}

// behindLocked is the error of a wait that ran out; the caller holds q.mu.
func (q *Queue) behindLocked() error {
	if q.closed {
		return fmt.Errorf("container %q: %w", q.name, container.ErrClosed)
	}
	reason := "the table is slower than the writers"
	if q.lastErr != nil {
		reason = q.lastErr.Error()
	}
	return fmt.Errorf("container %q: %w: %d writes wait for the table (%s)", q.name, ErrBehind, len(q.pending), reason)
}

// journalKey is the journal's key for the row with key k in pending.
func (q *Queue) journalKey(k string) string {
	return q.prefix + k
}

// journalKeyLocked is the journal key of row: journalKey of its key in pending (keyLocked). Once the queue and the
// container are live it is built in one allocation (container.AppendNormKey is NormKey's rule, without a string of
// row and one of its key). The caller holds q.mu.
func (q *Queue) journalKeyLocked(row []byte) string {
	if q.norm == nil || !q.c.Checked() {
		// Not live: only a caller that skipped the container's Check gets here; the row as written is its key
		// until goLive keys it by the rule.
		k, _ := q.keyLocked(row)
		return q.journalKey(k)
	}
	q.keyBuf = q.c.AppendNormKey(append(q.keyBuf[:0], q.prefix...), row)
	return string(q.keyBuf)
}

// Journal record: key length (2), key, flags (4), exptime (8), cas (8), value.
const headerLen = 4 + 8 + 8

func encode(row []byte, it container.Item) []byte {
	b := make([]byte, 2+len(row)+headerLen+len(it.Value))
	binary.LittleEndian.PutUint16(b[0:2], uint16(len(row)))
	n := 2 + copy(b[2:], row)
	binary.LittleEndian.PutUint32(b[n:], it.Flags)
	binary.LittleEndian.PutUint64(b[n+4:], uint64(it.Exptime))
	binary.LittleEndian.PutUint64(b[n+12:], it.CAS)
	copy(b[n+headerLen:], it.Value)
	return b
}

// recordSlices returns the row and the value of a record encode built, as
// slices of it whose capacity ends with them (an append copies).
func recordSlices(b []byte) (row, value []byte) {
	n := 2 + int(binary.LittleEndian.Uint16(b[0:2]))
	return b[2:n:n], b[n+headerLen:]
}

func decode(b []byte) (row []byte, it container.Item, ok bool) {
	if len(b) < 2 {
		return nil, it, false
	}
	n := 2 + int(binary.LittleEndian.Uint16(b[0:2]))
	if len(b) < n+headerLen {
		return nil, it, false
	}
	return append([]byte(nil), b[2:n]...), container.Item{
		Flags:   binary.LittleEndian.Uint32(b[n:]),
		Exptime: int64(binary.LittleEndian.Uint64(b[n+4:])),
		CAS:     binary.LittleEndian.Uint64(b[n+12:]),
		Value:   append([]byte(nil), b[n+headerLen:]...),
	}, true
}
