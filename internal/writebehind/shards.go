package writebehind

// The write-behind queue of a sharded container (container.OpenSharded): one Queue per part, that is per shard
// group, each over its part (its rounds, its batches, its own failures and backlog: a shard that is down fills only
// its own queue), behind the one Queue the engine holds.
//
// Invariants:
//   - Every part's queue journals under the container's prefix: a row lives on one shard, so its journal key is
//     one part's. At start the records the journal holds are handed to the part the current map routes each row to.
//     A record whose row no shard holds under the current map stays in the journal (logged) for a later start.
//   - Put, Get and Sync route the row by the map loaded then. While the map is the one the queue started with, a
//     row is always in the same part's queue. Once a reload changed it, a row may wait in another part's queue
//     (queued under the earlier map): Put and Sync first wait for such a write to reach its table, and Get answers
//     it when the row's own part has none, so a write is never overtaken by a later one nor hidden from a read.
//     (Moving rows between shards is not built: a write queued before a reload reaches the shard it was queued for.)
//   - Drain, Roomy, Stats and Close are over every part's queue.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/keywaydb/keyway/internal/container"
)

// shardedQueue is the state of a sharded container's Queue (Queue.sh).
type shardedQueue struct {
	base uint64 // the map version the queue started with

	mu     sync.Mutex // serializes adding a part's queue; guards closed
	closed bool
	byPart atomic.Pointer[map[*container.Container]*Queue]
	order  atomic.Pointer[[]*Queue]
}

// partJournal is the journal as one part's queue sees it: its TakeJournal returns the records handed to the part.
type partJournal struct {
	Journal
	recs map[string][]byte
}

func (pj *partJournal) TakeJournal(string) map[string][]byte {
	r := pj.recs
	pj.recs = nil
	return r
}

// newSharded fills q (its name, container, journal, prefix and defaulted options set) as a sharded container's queue.
func (q *Queue) newSharded() *Queue {
	c := q.c
	sh := &shardedQueue{base: c.ShardMapVersion()}
	empty := map[*container.Container]*Queue{}
	sh.byPart.Store(&empty)
	sh.order.Store(&[]*Queue{})
	q.sh = sh
	recs := map[*container.Container]map[string][]byte{}
	ctx, cancel := context.WithTimeout(context.Background(), q.o.WaitTimeout)
	defer cancel()
	for k, v := range q.j.TakeJournal(q.prefix) {
		row, _, ok := decode(v)
		if !ok {
			q.o.Logger.Error("write-behind: unreadable journal record dropped", "container", q.name, "key", k)
			q.j.JournalDelete(k)
			continue
		}
		p, err := c.PartFor(ctx, row)
		if err != nil {
			q.o.Logger.Error("write-behind: a journaled write has no shard under the current map; it stays in the journal",
				"container", q.name, "key", string(row), "err", err)
			continue
		}
		if recs[p] == nil {
			recs[p] = map[string][]byte{}
		}
		recs[p][k] = v
	}
	for _, p := range c.Parts() {
		q.addPart(p, recs[p]) // fails only after Close
	}
	return q
}

// addPart returns the queue of part p, starting it (with the journal records recs) when there is none; after Close
// it fails.
func (q *Queue) addPart(p *container.Container, recs map[string][]byte) (*Queue, error) {
	sh := q.sh
	sh.mu.Lock()
	defer sh.mu.Unlock()
	cur := *sh.byPart.Load()
	if pq := cur[p]; pq != nil {
		return pq, nil
	}
	if sh.closed {
		return nil, fmt.Errorf("container %q: %w", q.name, container.ErrClosed)
	}
	pq := New(p, &partJournal{Journal: q.j, recs: recs}, q.prefix, q.o)
	next := make(map[*container.Container]*Queue, len(cur)+1)
	for k, v := range cur {
		next[k] = v
	}
	next[p] = pq
	order := append(append([]*Queue(nil), *sh.order.Load()...), pq)
	sh.byPart.Store(&next)
	sh.order.Store(&order)
	return pq, nil
}

// part is the queue of row's part under the current map, and whether the map changed since the queue started (so
// the row may wait in another part's queue).
func (q *Queue) part(row []byte) (pq *Queue, moved bool, err error) {
	// Background: the context bounds only the opening of a part for a group the map names first, and the
	// container's Open bounds that (a per-Put timer would cost every Put).
	p, err := q.c.PartFor(context.Background(), row)
	if err != nil {
		return nil, false, err
	}
	moved = q.c.ShardMapVersion() != q.sh.base
	if pq = (*q.sh.byPart.Load())[p]; pq != nil {
		return pq, moved, nil
	}
	pq, err = q.addPart(p, nil)
	return pq, moved, err
}

// syncOthers waits for row's writes waiting in the queues of parts other than pq.
func (q *Queue) syncOthers(pq *Queue, row []byte) error {
	for _, o := range *q.sh.order.Load() {
		if o != pq {
			if err := o.Sync(row); err != nil {
				return err
			}
		}
	}
	return nil
}

func (q *Queue) shardedPut(row []byte, item container.Item, queued func()) error {
	pq, moved, err := q.part(row)
	if err != nil {
		return err
	}
	if moved {
		if err := q.syncOthers(pq, row); err != nil {
			return err
		}
	}
	return pq.Put(row, item, queued)
}

func (q *Queue) shardedGet(row []byte) (container.Item, bool, error) {
	pq, moved, err := q.part(row)
	if err != nil {
		return container.Item{}, false, err
	}
	it, ok, err := pq.Get(row)
	if ok || err != nil || !moved {
		return it, ok, err
	}
	for _, o := range *q.sh.order.Load() {
		if o != pq {
			if it, ok, err := o.Get(row); ok || err != nil {
				return it, ok, err
			}
		}
	}
	return container.Item{}, false, nil
}

func (q *Queue) shardedSync(row []byte) error {
	pq, moved, err := q.part(row)
	if err != nil {
		return err
	}
	if moved {
		if err := q.syncOthers(pq, row); err != nil {
			return err
		}
	}
	return pq.Sync(row)
}

func (q *Queue) shardedDrain() error {
	var errs []error
	for _, pq := range *q.sh.order.Load() {
		if err := pq.Drain(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (q *Queue) shardedRoomy() bool {
	for _, pq := range *q.sh.order.Load() {
		if !pq.Roomy() {
			return false
		}
	}
	return true
}

func (q *Queue) shardedStats() Stats {
	var st Stats
	for _, pq := range *q.sh.order.Load() {
		s := pq.Stats()
		st.Pending += s.Pending
		st.PendingBytes += s.PendingBytes
		st.Written += s.Written
		st.Dropped += s.Dropped
		st.FailedRounds += s.FailedRounds
	}
	return st
}

// shardedClose closes every part's queue, concurrently (each keeps trying its table for closeTimeout at most).
func (q *Queue) shardedClose() error {
	q.sh.mu.Lock()
	q.sh.closed = true // no part's queue starts after this
	q.sh.mu.Unlock()
	qs := *q.sh.order.Load()
	errs := make([]error, len(qs))
	var wg sync.WaitGroup
	for i, pq := range qs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = pq.Close()
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}
