package container

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
)

// batchTimeout bounds one group-commit transaction; a waiter whose own
// context ends earlier stops waiting (its write may still commit).
const batchTimeout = 30 * time.Second

// setReq is one queued Set.
type setReq struct {
	ctx  context.Context
	key  []byte
	it   Item
	args []any // writeArgs without the CAS filled in: set by the committer
	resp chan setResp
}

type setResp struct {
	cas uint64
	err error
}

// Set stores it under key, unconditionally, through the group committer. It
// returns after the transaction holding the row committed (or failed); an
// expired row is overwritten like any other. If ctx ends first, Set returns
// ctx's error and the write may or may not be committed.
func (c *Container) Set(ctx context.Context, key []byte, it Item) (uint64, error) {
	if err := c.checkKey(key); err != nil {
		return 0, err
	}
	if _, err := c.split(it.Value); err != nil {
		return 0, err
	}
	r := &setReq{ctx: ctx, key: key, it: it, resp: make(chan setResp, 1)}
	c.mu.RLock()
	if c.closed {
		c.mu.RUnlock()
		return 0, c.errorf("%w", ErrClosed)
	}
	select {
	case c.queue <- r:
	case <-ctx.Done():
		c.mu.RUnlock()
		return 0, ctx.Err()
	}
	c.mu.RUnlock()
	select {
	case resp := <-r.resp:
		return resp.cas, resp.err
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// commitLoop is the group committer: it takes the first queued Set, gathers
// what else is queued (up to MaxBatch; waiting up to MaxWait if set), writes them in one statement and answers
// every waiter. It ends when the queue is closed and drained.
func (c *Container) commitLoop() {
	defer close(c.done)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	batch := make([]*setReq, 0, c.opt.MaxBatch)
	for {
		first, ok := <-c.queue
		if !ok {
			return
		}
		batch = append(batch[:0], first)
		var deadline <-chan time.Time // nil: never fires, only what is queued is taken
		if c.opt.MaxWait > 0 {
			timer.Reset(c.opt.MaxWait)
			deadline = timer.C
		}
		open := true
	gather:
		for len(batch) < c.opt.MaxBatch {
			select {
			case r, ok := <-c.queue:
				if !ok {
					open = false
					break gather
				}
				batch = append(batch, r)
			case <-deadline:
				break gather
			default:
				if deadline == nil {
					break gather
				}
				select {
				case r, ok := <-c.queue:
					if !ok {
						open = false
						break gather
					}
					batch = append(batch, r)
				case <-deadline:
					break gather
				}
			}
		}
		timer.Stop()
		c.commitBatch(batch)
		clear(batch)
		if !open {
			return
		}
	}
}

// commitBatch writes batch as one multi-row upsert in one transaction and
// answers each waiter.
func (c *Container) commitBatch(batch []*setReq) {
	// Drop waiters that gave up before their write started.
	live := batch[:0:0]
	for _, r := range batch {
		if r.ctx.Err() != nil {
			r.resp <- setResp{err: r.ctx.Err()}
			continue
		}
		cas := c.itemCAS(r.it)
		args, err := c.writeArgs(r.it, cas)
		if err != nil {
			r.resp <- setResp{err: err}
			continue
		}
		r.args = append([]any{r.key}, args...)
		r.it.CAS = cas
		live = append(live, r)
	}
	if len(live) == 0 {
		return
	}
	// The last Set of a key wins: write only that one (keys compared as the
	// column's collation would, approximately, so one statement never holds
	// the same key twice).
	last := map[string]int{}
	for i, r := range live {
		last[c.normKey(string(r.key))] = i
	}
	rows := make([]*setReq, 0, len(last))
	for i, r := range live {
		if last[c.normKey(string(r.key))] == i {
			rows = append(rows, r)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), batchTimeout)
	defer cancel()
	// One multi-row statement under autocommit is one InnoDB transaction: all
	// rows or none, durable when it returns. An explicit BEGIN/COMMIT would
	// only add two round trips.
	err := c.upsert(ctx, rows)
	c.batches.Add(1)
	c.batchedSets.Add(uint64(len(rows)))
	var me *mysql.MySQLError
	if err != nil && errors.As(err, &me) && len(rows) > 1 {
		// A server error (say one value too long): retry each row alone so
		// every waiter gets its own answer.
		results := map[string]error{}
		for _, r := range rows {
			rctx, rcancel := context.WithTimeout(context.Background(), batchTimeout)
			results[c.normKey(string(r.key))] = c.upsert(rctx, []*setReq{r})
			rcancel()
		}
		for _, r := range live {
			c.answer(r, results[c.normKey(string(r.key))])
		}
		return
	}
	for _, r := range live {
		c.answer(r, err)
	}
}

func (c *Container) answer(r *setReq, err error) {
	if err != nil {
		r.resp <- setResp{err: c.mapErr(err)}
		return
	}
	r.resp <- setResp{cas: r.it.CAS}
}

// upsert writes rows with one INSERT … ON DUPLICATE KEY UPDATE, inside an
// explicit transaction when tx is set (otherwise autocommit, which is one
// transaction too).
func (c *Container) upsert(ctx context.Context, rows []*setReq) error {
	cols := c.writeCols()
	var b strings.Builder
	b.WriteString("INSERT INTO " + c.table + " (" + c.qKey + ", " + strings.Join(cols, ", ") + ") VALUES ")
	tuple := "(?" + strings.Repeat(", ?", len(cols)) + ")"
	args := make([]any, 0, len(rows)*(len(cols)+1))
	for i, r := range rows {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(tuple)
		args = append(args, r.args...)
	}
	b.WriteString(" ON DUPLICATE KEY UPDATE ")
	for i, col := range cols {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(col + " = VALUES(" + col + ")")
	}
	_, err := c.db.ExecContext(ctx, b.String(), args...)
	return err
}
