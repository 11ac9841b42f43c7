package store

// Persistence: every change of memory is appended, under the shard lock that
// made it, to that shard's pending log with a global sequence number. One
// committer goroutine drains all shards into one Pebble batch and commits it
// with a WAL sync ("group commit": every writer whose change is in the batch
// is answered by that one sync).
//
//   - sync:  a writer waits until the committer reports a durable sequence
//     number at or past its own; the committer runs rounds back to back while
//     anyone is behind, each after a short wait for the writers the last
//     round answered (package gather).
//   - async: writers do not wait; the committer runs a round every
//     FlushInterval (or sooner when a shard's log grows long).
//
// Invariants:
//   - disk.visible is the sequence number up to which every change is
//     committed (synced, with sync durability). Only the committer moves it,
//     only forward, only after a successful commit.
//   - A failure is sticky: the first commit error marks the disk failed, no
//     later round commits anything, visible never moves again, and every
//     change that touches the disk is refused from then on (set, delete,
//     flush_all; changes of ephemeral items only go on). So a waiter's answer
//     is exact however late it wakes: its change is durable iff visible >= its
//     sequence number; otherwise, once the disk has failed, it failed.
//   - Sync writes are published after their sync: memory takes the change at
//     once under the shard lock (so the next change of the key is applied on
//     top of it, in order), but until visible reaches it readers (Get, Peek)
//     see the version from before the key's first unsynced change (the
//     shard's unsynced entries), and an Update whose callback saw an unsynced
//     change answers only after that change is durable. Readers therefore never
//     see a value a crash could take back, and never go back to an older value
//     after a newer one: the entry's prior is the version readers saw, and it
//     is kept until the newest change is visible. When a wait fails, the key
//     goes back to that prior (forget), which is what the disk holds.
//   - Known gap: flush_all empties memory before its range deletes are
//     synced, so readers may see the flush before it is durable.
//
// Disk layout: key = shard byte + item key; value = version byte, flags (4),
// exptime (8), cas (8), then the item's value. Journal records (journal.go)
// use the same value encoding under the prefix byte 0xfe; aside records (aside.go) are under 0xfd. A flush of a shard is one range
// delete over its prefix, which is why the shard of a key must not depend on
// the process: it is chosen by xxhash, not by a per-process seed.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/cockroachdb/pebble"

	"github.com/keywaydb/keyway/internal/gather"
)

type recordOp uint8

const (
	opPut recordOp = iota + 1
	opDelete
	opFlushShard
)

type record struct {
	seq     uint64
	op      recordOp
	shard   byte
	key     string
	value   []byte
	flags   uint32
	exptime int64
	cas     uint64
}

const (
	formatVersion = 1
	itemHeaderLen = 1 + 4 + 8 + 8
	metaKey       = "\xffkeyway-format"
	// kickBytes of pending changes start a commit round without waiting for
	// the async tick, so a burst of writes does not pile up in memory. Each
	// round's changes pass through Go's heap three times (the pending log,
	// the batch, Pebble's WAL blocks) and the heap grows to several times what
	// is live between collections (GOGC), up to the limit the server gives it
	// (HeapMemory plus a fixed allowance): under a load it sits at that
	// limit, so the round's size is resident memory.
	kickBytes = 1 << 20
	// maxBatchBytes splits a round into batches of bounded size; only the
	// last is synced (the WAL is sequential, so that sync covers all). It is
	// kept under what Pebble's batch pool retains (1 MiB: a batch's buffer
	// grows by doubling), so every batch reuses a buffer rather than growing a
	// new one, and far under Pebble's large-batch threshold (half a memtable),
	// past which a batch becomes a memtable of its own and forces a flush.
	maxBatchBytes = 256 << 10
	// maxPendingBytes is where async writers start to wait for the disk
	// (backpressure): memory never holds more than this not yet handed to Pebble.
	// Four rounds' worth (kickBytes starts one): the server gives Go's heap this
	// much room (HeapMemory), and the heap grows to its bound between
	// collections, so a larger one costs RSS under every async load; a smaller
	// one (two rounds) made writers wait for the disk's syncs: a load of
	// 10 B-4 KB values took twice as long, and memcaslap's p99 on it doubled.
	maxPendingBytes = 4 * kickBytes
	recordOverhead  = 64
)

type disk struct {
	s          *Store
	db         *pebble.DB
	dir        string
	durability Durability
	interval   time.Duration

	seq atomic.Uint64
	// visible is the sequence number up to which every change is committed
	// (and, with sync durability, synced). It only grows, and only after a
	// successful commit: once the disk has failed it never moves again, so a
	// change above it is never reported durable nor shown to readers.
	visible atomic.Uint64
	rounds  atomic.Int64 // commit rounds that wrote something; shows group commit at work
	// pendingBytes estimates the size of all shards' pending logs.
	pendingBytes atomic.Int64
	// failed holds the error that made the disk unusable (nil while healthy).
	// It is sticky: a store whose disk failed stays failed until restarted.
	failed atomic.Pointer[error]
	// waitAny is waitDurable for any sequence number, built once at open: without sync durability the wait does
	// not depend on the change (see waitDurable), so a journal record's wait needs no closure of its own.
	waitAny func() error
	kick    chan struct{}
	quit    chan struct{}
	done    chan struct{}

	// The committer's own (see gatherNext): the writers its last round answered and how long the round took, the
	// bound of a gathering wait (gather.Limit; tests change it before the first write) and the gathering state.
	lastRound int
	lastTook  time.Duration
	gatherMax time.Duration
	gather    gather.Gatherer

	// free holds chunks the committer has given back (see carveLocked), at most maxFreeChunks.
	free struct {
		sync.Mutex
		chunks [][]byte
	}

	mu struct {
		sync.Mutex
		// cond is broadcast after every round and at close; waiters check
		// visible, failed and closed under mu, and the committer changes
		// them before it takes mu to broadcast, so no wakeup is lost.
		cond   sync.Cond
		closed bool
	}
}

// Pebble's memory, outside Go's heap: memtables (writes stop at two: one filling, one flushing) and a block cache,
// 16 MiB as a rule, not 24: Pebble reserves each memtable's size in the cache (Cache.Reserve), so the two share one
// budget, the larger of the cache and two memtables. While two memtables are live the cache holds no blocks, which
// costs nothing here, as the store reads Pebble only when it loads at open (and reads aside records). Smaller
// memtables do not pay: measured twice, alternating with 8 MiB ones (docs/benchmarks.md), 4 MiB ones (two or three
// of them) and 2 MiB ones (four) made the mix's async load 1.4-2.2 times as long and memcaslap's p99 on the
// loaded store one to three log2 buckets longer, and held about as much anonymous memory (119-132 MiB for the
// mix, against 128).
const (
	pebbleCache    = 8 << 20
	pebbleMemTable = 8 << 20
	// HeapMemory is what a store with a disk holds on Go's heap at most, beside a little bookkeeping: the changes
	// not yet handed to Pebble (maxPendingBytes) and the batch being committed (maxBatchBytes). The items are in
	// the arenas, outside the heap.
	HeapMemory = maxPendingBytes + maxBatchBytes
)

func openDisk(s *Store, o Options) (*disk, error) {
	cache := pebble.NewCache(pebbleCache)
	defer cache.Unref() // the DB holds its own reference
	db, err := pebble.Open(o.DataDir, &pebble.Options{
		Logger: pebbleLogger{},
		FS:     o.FS,
		// Small, fixed memory: the item data lives in the store already.
		Cache:                       cache,
		MemTableSize:                pebbleMemTable,
		MemTableStopWritesThreshold: 2, // one filling, one flushing: their memory stays bounded (see pebbleMemTable)
	})
	if err != nil && (errors.Is(err, syscall.EAGAIN) || strings.Contains(err.Error(), "lock held by current process")) {
		// Pebble's LOCK file is held: by another process (fcntl's F_SETLK refuses with EAGAIN), or by a store
		// of this one (pebble's own check, which has no error value to match).
		return nil, fmt.Errorf("store: data_dir %q is in use by another process (another keyway serving it?): stop that one, or give this one its own data_dir: %w", o.DataDir, err)
	}
	if err != nil {
		return nil, fmt.Errorf("store: cannot open data_dir %q (check that it exists or can be created and is writable): %w", o.DataDir, err)
	}
	d := &disk{
		s:          s,
		db:         db,
		dir:        o.DataDir,
		durability: o.Durability,
		interval:   o.FlushInterval,
		kick:       make(chan struct{}, 1),
		gatherMax:  gather.Limit,
		quit:       make(chan struct{}),
		done:       make(chan struct{}),
	}
	d.mu.cond.L = &d.mu.Mutex
	d.waitAny = func() error { return d.waitDurable(0) }
	if err := d.checkFormat(); err != nil {
		db.Close()
		return nil, err
	}
	return d, nil
}

func (d *disk) checkFormat() error {
	want := fmt.Sprintf("v%d shards=%d", formatVersion, numShards)
	v, closer, err := d.db.Get([]byte(metaKey))
	switch {
	case errors.Is(err, pebble.ErrNotFound):
		if err := d.db.Set([]byte(metaKey), []byte(want), pebble.Sync); err != nil {
			return fmt.Errorf("store: cannot write to data_dir %q: %w", d.dir, err)
		}
		return nil
	case err != nil:
		return fmt.Errorf("store: cannot read data_dir %q: %w", d.dir, err)
	}
	got := string(v)
	closer.Close()
	if got != want {
		return fmt.Errorf("store: data_dir %q holds format %q, this keyway writes %q: use an empty data_dir", d.dir, got, want)
	}
	return nil
}

// load fills the arenas from the disk before the store is used. Expired items and
// items that no longer fit under the memory limit are deleted from the disk. It
// runs before any other use of the store: no lock is needed.
func (d *disk) load() error {
	s := d.s
	now := s.now()
	it, err := d.db.NewIter(&pebble.IterOptions{UpperBound: []byte{0xff}})
	if err != nil {
		return fmt.Errorf("store: cannot read data_dir %q: %w", d.dir, err)
	}
	drop := d.db.NewBatch()
	var maxCAS uint64
	var loaded, dropped int
	for it.First(); it.Valid(); it.Next() {
		k, v := it.Key(), it.Value()
		if len(k) > 0 && k[0] == asidePrefix {
			continue // not items (aside.go)
		}
		if len(k) < 1 || len(v) < itemHeaderLen || v[0] != formatVersion {
			drop.Delete(k, nil)
			dropped++
			continue
		}
		if k[0] == journalPrefix {
			if s.loadedJournal == nil {
				s.loadedJournal = map[string][]byte{}
			}
			key := string(k[1:])
			s.loadedJournal[key] = append([]byte(nil), v[itemHeaderLen:]...)
			_, sh := s.shardFor(k[1:])
			sh.mu.journalOnDisk[key] = struct{}{} // before anything journals: no lock needed yet
			continue
		}
		item := Item{
			Flags:      binary.LittleEndian.Uint32(v[1:5]),
			Exptime:    int64(binary.LittleEndian.Uint64(v[5:13])),
			CAS:        binary.LittleEndian.Uint64(v[13:21]),
			Value:      v[itemHeaderLen:], // copied into the arena
			LastAccess: now,
		}
		key := k[1:]
		idx, sh, h := s.locate(key)
		if int(k[0]) != idx || item.Expired(now) || len(key) > MaxKeyLen || recLen(len(key), len(item.Value), 0) > sh.mu.a.end ||
			!s.insertLocked(sh, key, h, &item, now) {
			drop.Delete(k, nil)
			dropped++
			continue
		}
		maxCAS = max(maxCAS, item.CAS)
	}
	// Items that did not fit under the limit were evicted as the arenas filled, oldest loaded first, and their
	// deletes are pending for the disk: they count as dropped, not as evictions.
	for i := range s.shards {
		sh := &s.shards[i]
		loaded += int(sh.mu.items)
		for c := range sh.mu.classes {
			cs := &sh.mu.classes[c]
			cs.Evicted, cs.EvictedNonzero, cs.EvictedUnfetched, cs.EvictedTime, cs.evictedAt = 0, 0, 0, 0, 0
		}
	}
	dropped += int(s.evictions.Swap(0))
	err = it.Close()
	if err == nil && drop.Count() > 0 {
		err = drop.Commit(pebble.Sync)
	}
	drop.Close()
	if err != nil {
		return fmt.Errorf("store: cannot load data_dir %q: %w", d.dir, err)
	}
	s.nextCAS.Store(maxCAS)
	s.log.Info("store loaded from disk", "data_dir", d.dir, "items", loaded, "dropped", dropped, "journal_records", len(s.loadedJournal))
	return nil
}

func (d *disk) start() { go d.commitLoop() }

// cancelLocked makes the record at index i of the shard's pending log nothing (a journal record overtaken before
// it left memory: see Store.journalAppend). It keeps its place and sequence number; the caller holds sh.mu.
func (d *disk) cancelLocked(sh *shard, i int) {
	r := &sh.mu.pending[i]
	d.pendingBytes.Add(-int64(len(r.key) + len(r.value))) // the drain takes recordOverhead off, as for any record
	*r = record{seq: r.seq}
}

// Pending records' keys and values are carved from chunks the shards reuse, not allocated one by one: a copy a
// change on its way to the disk would be garbage as soon as the committer had it, and with async durability a
// load of small items made the heap grow to its bound between collections (RSS the store's items do not need).
// A shard carves from its current chunk; the committer, having drained the shard's records into a batch (which
// copies them), gives the shard's chunks back to a free list the shards take from. A key or value longer than
// a quarter chunk gets an allocation of its own. Item records' keys are read nowhere after the drain; journal
// records, whose keys the journal's maps keep, are not carved (see journalAppend).
const (
	chunkSize     = 64 << 10
	maxFreeChunks = kickBytes / chunkSize
)

// carveLocked copies key and value into the shard's current chunk; the caller holds sh.mu.
func (d *disk) carveLocked(sh *shard, key, value []byte) (string, []byte) {
	n := len(key) + len(value)
	if n == 0 {
		return "", nil
	}
	var b []byte
	if n > chunkSize/4 {
		b = make([]byte, n)
	} else {
		if cap(sh.mu.chunk)-len(sh.mu.chunk) < n {
			if cap(sh.mu.chunk) > 0 {
				sh.mu.chunks = append(sh.mu.chunks, sh.mu.chunk)
			}
			sh.mu.chunk = d.takeChunk()
		}
		l := len(sh.mu.chunk)
		sh.mu.chunk = sh.mu.chunk[:l+n]
		b = sh.mu.chunk[l : l+n : l+n]
	}
	copy(b, key)
	copy(b[len(key):], value)
	var k string
	if len(key) > 0 {
		k = unsafe.String(&b[0], len(key)) // b is never written again while the record holds it
	}
	var v []byte
	if len(value) > 0 {
		v = b[len(key):n:n]
	}
	return k, v
}

// drainChunksLocked hands the committer the chunks of the records it is draining (every one the shard carved
// from, the current one too: the next record starts a new one), appended to dst; the caller holds sh.mu.
func (sh *shard) drainChunksLocked(dst [][]byte) [][]byte {
	dst = append(dst, sh.mu.chunks...)
	clear(sh.mu.chunks)
	sh.mu.chunks = sh.mu.chunks[:0]
	if cap(sh.mu.chunk) > 0 {
		dst = append(dst, sh.mu.chunk)
		sh.mu.chunk = nil
	}
	return dst
}

func (d *disk) takeChunk() []byte {
	d.free.Lock()
	defer d.free.Unlock()
	if n := len(d.free.chunks); n > 0 {
		c := d.free.chunks[n-1]
		d.free.chunks[n-1] = nil
		d.free.chunks = d.free.chunks[:n-1]
		return c[:0]
	}
	return make([]byte, 0, chunkSize)
}

// giveChunks returns chunks whose records the committer no longer needs; beyond maxFreeChunks they are left to
// the collector.
func (d *disk) giveChunks(chunks [][]byte) {
	d.free.Lock()
	for _, c := range chunks {
		if len(d.free.chunks) >= maxFreeChunks {
			break
		}
		if cap(c) == chunkSize {
			d.free.chunks = append(d.free.chunks, c)
		}
	}
	d.free.Unlock()
	clear(chunks)
}

// appendLocked adds rec to the shard's pending log; the caller holds sh.mu.
func (d *disk) appendLocked(sh *shard, rec record) uint64 {
	rec.seq = d.seq.Add(1)
	sh.mu.pending = append(sh.mu.pending, rec)
	pending := d.pendingBytes.Add(int64(len(rec.key) + len(rec.value) + recordOverhead))
	if d.durability == DurabilitySync || pending >= kickBytes {
		select {
		case d.kick <- struct{}{}:
		default:
		}
	}
	return rec.seq
}

// waitDurable blocks a sync writer until seq is committed and reports whether
// it was. The answer is exact for every waiter, however late it wakes: seq is
// durable exactly when visible has reached it, and once the disk has failed
// visible never moves again, so every change above it failed. An async writer
// returns at once unless the disk has fallen so far behind that pending
// changes exceed maxPendingBytes; then it waits for a round.
func (d *disk) waitDurable(seq uint64) error {
	if d.durability != DurabilitySync {
		if err := d.failure(); err != nil {
			return err
		}
		if d.pendingBytes.Load() < maxPendingBytes {
			return nil
		}
		d.mu.Lock()
		for d.pendingBytes.Load() >= maxPendingBytes && !d.mu.closed {
			d.mu.cond.Wait()
		}
		d.mu.Unlock()
		return nil
	}
	return d.waitSynced(seq)
}

// waitSynced blocks until seq is committed and synced, whatever the store's
// durability: with async durability it starts a commit round instead of
// waiting for the next FlushInterval tick. The answer is exact, as for
// waitDurable.
func (d *disk) waitSynced(seq uint64) error {
	if d.visible.Load() >= seq {
		return nil
	}
	select {
	case d.kick <- struct{}{}:
	default: // a round is already asked for; it drains everything appended before it starts
	}
	d.mu.Lock()
	for d.visible.Load() < seq && d.failed.Load() == nil && !d.mu.closed {
		d.mu.cond.Wait()
	}
	d.mu.Unlock()
	if d.visible.Load() >= seq {
		return nil
	}
	if err := d.failure(); err != nil {
		return err
	}
	return ErrClosed
}

func (d *disk) commitLoop() {
	defer close(d.done)
	var tick <-chan time.Time
	if d.durability == DurabilityAsync {
		t := time.NewTicker(d.interval)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-d.quit:
			d.commitRound()
			return
		case <-d.kick:
		case <-tick:
		}
		d.commitRound()
		// A sync writer may have appended to a shard after this round drained it; keep going until nobody is
		// behind, each round after a short wait for the writers the last one answered (see gatherNext).
		for d.durability == DurabilitySync && d.failed.Load() == nil {
			d.gatherNext()
			if d.seq.Load() <= d.visible.Load() {
				break
			}
			d.commitRound()
		}
	}
}

// gatherNext waits, with sync durability, for the writers the last round answered to append their next changes
// (see package gather: the wait, its reason and its policy), for at most as long as the last round took and
// gatherMax. Each sync append kicks the committer, which is the signal to look again.
func (d *disk) gatherNext() {
	pending := func() int { return int(d.seq.Load() - d.visible.Load()) }
	want := d.gather.Want(d.lastRound, pending(), maxGathered)
	if want == 0 {
		return
	}
	d.gather.Wait(min(d.lastTook, d.gatherMax), d.kick, func() bool { return pending() >= want })
}

// maxGathered caps the changes a round waits for.
const maxGathered = 1 << 16

// commitRound writes everything pending in one synced batch. Every sequence
// number at or below the one read before draining is in the batch, because a
// writer takes its number and appends under the same shard lock.
func (d *disk) commitRound() {
	start := time.Now()
	upTo := d.seq.Load()
	b := d.db.NewBatch()
	var scratch []record
	var chunks [][]byte
	var err error
	var committedEarly bool // a full batch went out unsynced; the round must end with a sync
	// The round's writers, for gatherNext: each change counts as one, except the write-behind queue's journal
	// removals, which one writer appends by the batch (and waits for once).
	var writes, journalDeletes int
	visible := d.visible.Load()
	for i := range d.s.shards {
		sh := &d.s.shards[i]
		sh.mu.Lock()
		scratch, sh.mu.pending = sh.mu.pending, scratch[:0]
		chunks = sh.drainChunksLocked(chunks[:0])
		sh.pruneUnsyncedLocked(visible)
		sh.handJournalLocked(scratch)
		sh.mu.Unlock()
		var drained int64
		for j := range scratch {
			r := &scratch[j]
			drained += int64(len(r.key) + len(r.value) + recordOverhead)
			switch {
			case r.op == 0: // cancelled (cancelLocked)
			case r.shard == journalPrefix && r.op == opDelete:
				journalDeletes++
			default:
				writes++
			}
			addToBatch(b, r)
			*r = record{} // let values be collected
			if b.Len() >= maxBatchBytes && d.failed.Load() == nil {
				if cerr := d.commitSafely(b, false); cerr != nil && err == nil {
					err = cerr
				}
				b.Close()
				b = d.db.NewBatch()
				committedEarly = true
			}
		}
		d.pendingBytes.Add(-drained)
		d.giveChunks(chunks) // the batch holds copies of the records carved from them
	}
	failedBefore := d.failed.Load() != nil
	switch {
	case failedBefore:
	case b.Count() > 0:
		if cerr := d.commitSafely(b, true); cerr != nil && err == nil {
			err = cerr
		}
		d.rounds.Add(1)
	case committedEarly:
		// Nothing left for the last batch: sync the WAL on its own.
		if cerr := d.syncSafely(); cerr != nil && err == nil {
			err = cerr
		}
		d.rounds.Add(1)
	}
	b.Close()
	if err != nil {
		d.fail(err) // any commit error is sticky; see disk.failed
	}
	d.lastRound, d.lastTook = writes+min(journalDeletes, 1), time.Since(start)
	if d.failed.Load() == nil && upTo > d.visible.Load() {
		d.visible.Store(upTo) // only the committer stores it
	}
	d.mu.Lock()
	d.mu.cond.Broadcast()
	d.mu.Unlock()
}

// handJournalLocked notes the journal records of a drained pending log as handed to the disk: their puts can no
// longer be cancelled, and a key's last record says whether the disk holds one (see Store.journalAppend). The
// caller holds sh.mu.
func (sh *shard) handJournalLocked(drained []record) {
	if len(sh.mu.journalPending) > 0 {
		clear(sh.mu.journalPending)
	}
	for i := range drained {
		r := &drained[i]
		if r.shard != journalPrefix {
			continue
		}
		switch r.op {
		case opPut:
			sh.mu.journalOnDisk[r.key] = struct{}{}
		case opDelete:
			delete(sh.mu.journalOnDisk, r.key)
		}
	}
}

func addToBatch(b *pebble.Batch, r *record) {
	switch r.op {
	case opPut:
		// Encoded in place in the batch: no key or value of its own to allocate.
		op := b.SetDeferred(1+len(r.key), itemHeaderLen+len(r.value))
		op.Key[0] = r.shard
		copy(op.Key[1:], r.key)
		v := op.Value
		v[0] = formatVersion
		binary.LittleEndian.PutUint32(v[1:5], r.flags)
		binary.LittleEndian.PutUint64(v[5:13], uint64(r.exptime))
		binary.LittleEndian.PutUint64(v[13:21], r.cas)
		copy(v[itemHeaderLen:], r.value)
		op.Finish() // the batch is not indexed: nothing to fail
	case opDelete:
		b.Delete(diskKey(r.shard, r.key), nil)
	case opFlushShard:
		b.DeleteRange([]byte{r.shard}, []byte{r.shard + 1}, nil)
	}
}

func diskKey(shard byte, key string) []byte {
	k := make([]byte, 1+len(key))
	k[0] = shard
	copy(k[1:], key)
	return k
}

// close commits what is pending, wakes any waiter and closes Pebble.
func (d *disk) close() error {
	select {
	case <-d.done:
	default:
		close(d.quit)
		<-d.done
	}
	d.mu.Lock()
	d.mu.closed = true
	d.mu.cond.Broadcast()
	d.mu.Unlock()
	if err := d.failure(); err != nil {
		// Pebble's pipeline is broken; closing it could hang or panic. What it
		// had synced before the failure is on disk.
		return err
	}
	return d.db.Close()
}

// pebbleLogger keeps Pebble's informational chatter out of keyway's log.
type pebbleLogger struct{}

func (pebbleLogger) Infof(string, ...interface{}) {}

// Fatalf is called by Pebble on an error it cannot go on from, such as a WAL
// write failing on a full disk. Pebble expects it not to return; it panics
// with a pebbleFatal, which the committer recovers (see commitSafely) so that
// a full disk fails writes instead of crashing keyway.
func (pebbleLogger) Fatalf(format string, args ...interface{}) {
	panic(pebbleFatal{fmt.Errorf(format, args...)})
}

type pebbleFatal struct{ err error }

// commitSafely commits b, turning a Pebble fatal error into an error. After
// one, Pebble's commit pipeline is unusable: the disk is marked failed and
// never written again.
func (d *disk) commitSafely(b *pebble.Batch, sync bool) (err error) {
	defer func() {
		if r := recover(); r != nil {
			f, ok := r.(pebbleFatal)
			if !ok {
				panic(r)
			}
			err = f.err
			d.fail(err)
		}
	}()
	opt := pebble.NoSync
	if sync {
		opt = pebble.Sync
	}
	return b.Commit(opt)
}

// syncSafely syncs the WAL on its own, as commitSafely commits.
func (d *disk) syncSafely() (err error) {
	defer func() {
		if r := recover(); r != nil {
			f, ok := r.(pebbleFatal)
			if !ok {
				panic(r)
			}
			err = f.err
			d.fail(err)
		}
	}()
	return d.db.LogData(nil, pebble.Sync)
}

// fail marks the disk unusable: every later write is refused with the cause.
func (d *disk) fail(err error) {
	if d.failed.CompareAndSwap(nil, &err) {
		d.s.log.Error("store: the disk failed; writes are refused until keyway restarts with a usable data_dir",
			"data_dir", d.dir, "err", err)
	}
}

// failure reports why the disk is unusable, or nil.
func (d *disk) failure() error {
	if p := d.failed.Load(); p != nil {
		return fmt.Errorf("%w: %v", ErrPersist, *p)
	}
	return nil
}
