package backend

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/keywaydb/keyway/internal/mysqlwire"
)

// Pool holds the connections of one PoolKey in a group. The SQL door borrows them per statement (Lease): a
// connection comes back with the session state it has (state.go), recorded in Conn.State, and is reset only when a
// session left state on it that keyway does not carry (MarkDirty).
type Pool struct {
	g        *Group
	key      PoolKey
	password string

	// Counters for metrics: connections handed out, fix-up commands sent to bring a borrowed connection in line
	// with its session, and the time borrowers spent waiting (nanoseconds).
	gets, fixups, waitNanos atomic.Int64
	// baseline is the state of a new connection of the pool (read at its first dial): what a session starts with.
	baseline atomic.Pointer[State]

	mu struct {
		sync.Mutex
		idle   []*Conn // LIFO: the most recently used first out, so surplus ones idle out
		open   int     // idle + in use + dials in progress
		inUse  int
		waits  int64
		errors int64
		// waiters are the Gets waiting, first come first served: put hands a connection to the first directly
		// (so a newcomer cannot take it first), and wakeLocked closes the first's channel to make it retry.
		waiters []chan *Conn
		closed  bool
	}
}

// recentIdle: see get.
const recentIdle = time.Second

// Key returns the pool's key.
func (p *Pool) Key() PoolKey { return p.key }

// Group returns the group whose server the pool's connections go to.
func (p *Pool) Group() *Group { return p.g }

// Get checks out a connection: an idle one that still answers, else a new one while fewer than MaxOpen are open
// and the group's budget allows, else it waits for a release until ctx ends or PoolWait passes. When the budget is
// what is used up, an idle connection of another pool is closed to make room, now or when one comes back. The
// caller must Release it.
func (p *Pool) Get(ctx context.Context) (*Conn, error) { return p.get(ctx, nil) }

// get is Get preferring, among idle connections, the most recent one whose default database is *db (saving a
// COM_INIT_DB); for *db == "" it takes only one without a database, since none can be unselected, and otherwise
// closes an idle one to dial a new one in its place.
func (p *Pool) get(ctx context.Context, db *string) (*Conn, error) {
	if err := p.g.fenced(); err != nil { // two primaries: nothing goes to either (replicas.go)
		return nil, err
	}
	if err := p.g.waitHold(ctx); err != nil { // a switchover (promote.go)
		return nil, err
	}
	cfg := &p.g.cfg
	var waitUntil time.Time
	for {
		p.mu.Lock()
		if p.mu.closed {
			p.mu.Unlock()
			return nil, fmt.Errorf("keyway: backend group %s is shutting down", cfg.Name)
		}
		if db != nil && *db == "" && len(p.mu.idle) > 0 && p.mu.open >= cfg.MaxOpen && p.idleWithDBLocked(*db) < 0 {
			// Every idle connection has a database and the pool is full: close the oldest, so the dial below has
			// room.
			c := p.mu.idle[0]
			p.mu.idle = p.mu.idle[1:]
			p.mu.open--
			p.mu.Unlock()
			quit(c)
			p.g.returnBudget(1)
			p.mu.Lock()
		}
		for len(p.mu.idle) > 0 {
			i := len(p.mu.idle) - 1
			if db != nil {
				if j := p.idleWithDBLocked(*db); j >= 0 {
					i = j
				} else if *db == "" {
					break
				}
			}
			c := p.mu.idle[i]
			p.mu.idle = append(p.mu.idle[:i], p.mu.idle[i+1:]...)
			p.mu.inUse++
			p.mu.Unlock()
			// A connection given back within recentIdle has not had time to be closed by wait_timeout: the look (a
			// system call) is spared on the path every statement takes. A server that went away meanwhile fails the
			// statement, which the SQL door runs again when that is safe (a read) and reports otherwise.
			if time.Since(c.idleSince) < recentIdle || c.Alive() {
				p.gotAfter(waitUntil)
				return c, nil
			}
			c.Close()
			p.mu.Lock()
			p.mu.inUse--
			p.mu.open--
			p.g.returnBudget(1) // after open--: the pools' open connections never outnumber the budget's count
		}
		overBudget := false
		if p.mu.open < cfg.MaxOpen {
			if p.g.takeBudget() {
				p.mu.open++
				p.mu.inUse++
				p.mu.Unlock()
				gen := p.g.gen.Load()
				c, err := p.g.dial(ctx, p.key.User, p.password, p.key.Caps, p.key.ExtCaps, p.key.Collation)
				if err == nil {
					c.gen = gen
				}
				if err != nil {
					p.mu.Lock()
					p.mu.open--
					p.mu.inUse--
					p.mu.errors++
					p.wakeLocked()
					p.mu.Unlock()
					p.g.returnBudget(1)
					return nil, err
				}
				p.g.learnBudget(c)
				if err := c.readState(); err != nil {
					c.broken = true
					c.pool = p
					c.Release()
					return nil, fmt.Errorf("keyway: backend group %s (%s): setting up session tracking on a new connection: %w", cfg.Name, p.g.Addr(), err)
				}
				c.pool = p
				p.noteBaseline(c)
				p.gotAfter(waitUntil)
				return c, nil
			}
			p.mu.Unlock()
			if p.g.evictIdle(p) {
				continue
			}
			p.mu.Lock()
			overBudget = true
		}
		// Exhausted: wait for a release in this pool or, over budget, for a connection of any pool to close.
		if waitUntil.IsZero() {
			waitUntil = time.Now().Add(cfg.PoolWait)
			p.mu.waits++
		}
		ch := make(chan *Conn, 1)
		p.mu.waiters = append(p.mu.waiters, ch)
		p.mu.Unlock()
		var budgetCh chan struct{} // nil (never ready) unless waiting for budget
		if overBudget {
			budgetCh = p.g.waitBudget()
			// Idle connections of other pools may have come back between evictIdle and waitBudget.
			if p.g.evictIdle(p) {
				p.g.stopWaitingBudget(budgetCh)
				p.mu.Lock()
				c := p.removeWaiterLocked(ch)
				p.mu.Unlock()
				if c != nil {
					return p.handedOver(c, db, waitUntil)
				}
				continue
			}
		}
		t := time.NewTimer(time.Until(waitUntil))
		woken := false
		var handed *Conn
		select {
		case handed = <-ch:
			t.Stop()
			woken = true
		case <-budgetCh:
			t.Stop()
			woken = true
		case <-ctx.Done():
		case <-t.C:
		}
		if budgetCh != nil {
			p.g.stopWaitingBudget(budgetCh)
		}
		p.mu.Lock()
		if handed == nil {
			handed = p.removeWaiterLocked(ch)
		}
		if handed != nil {
			p.mu.Unlock()
			if c, err := p.handedOver(handed, db, waitUntil); c != nil || err != nil {
				return c, err
			}
			continue
		}
		if woken {
			p.mu.Unlock()
			continue
		}
		p.mu.errors++
		p.mu.Unlock()
		p.gotAfter(waitUntil)
		err := ctx.Err()
		if err == nil {
			err = errors.New("timed out")
		}
		if overBudget {
			// What the server would have said had keyway dialed past its budget: the client gets 1040.
			return nil, &BusyError{Group: cfg.Name, Addr: p.g.Addr(), Err: &mysqlwire.Error{
				Code: mysqlwire.ERConCount, State: "08004", Message: fmt.Sprintf(
					"too many connections: all %d connections keyway may open to the server (its budget below max_connections) are in use and none was released in time (%v): raise max_connections in [[groups]] and on the server, or lower the client concurrency",
					p.g.MaxConnections(), err)}}
		}
		return nil, &BusyError{Group: cfg.Name, Addr: p.g.Addr(), Err: &mysqlwire.Error{
			Code: mysqlwire.ERConCount, State: "08004", Message: fmt.Sprintf(
				"all %d connections of the pool for user '%s' are in use (max_open) and none came free within pool_wait (%v): raise max_open or pool_wait in [[groups]], or lower the client concurrency",
				cfg.MaxOpen, p.key.User, cfg.PoolWait)}}
	}
}

// noteBaseline records the state of c, just dialed, as the pool's baseline, once.
func (p *Pool) noteBaseline(c *Conn) {
	if p.baseline.Load() == nil {
		p.baseline.CompareAndSwap(nil, &State{Vars: c.State.Vars})
	}
}

// idleWithDBLocked is the index of the most recently idle connection with default database db, or -1.
func (p *Pool) idleWithDBLocked(db string) int {
	for i := len(p.mu.idle) - 1; i >= 0; i-- {
		if c := p.mu.idle[i]; c.DBKnown && c.State.DB == db {
			return i
		}
	}
	return -1
}

// gotAfter counts a checkout, and the time it waited when it had to (waitUntil set: it waited from
// waitUntil - PoolWait).
func (p *Pool) gotAfter(waitUntil time.Time) {
	p.gets.Add(1)
	if !waitUntil.IsZero() {
		p.waitNanos.Add(int64(time.Since(waitUntil.Add(-p.g.cfg.PoolWait))))
	}
}

// handedOver takes a connection put handed to a waiting get: it is the caller's, unless the caller needs one
// without a database and this one has one (nil, nil: it was closed, and the caller tries again).
func (p *Pool) handedOver(c *Conn, db *string, waitUntil time.Time) (*Conn, error) {
	if db != nil && *db == "" && c.State.DB != "" {
		c.broken = true
		c.Release()
		return nil, nil
	}
	p.gotAfter(waitUntil)
	return c, nil
}

// wakeLocked lets one waiter retry.
func (p *Pool) wakeLocked() {
	if len(p.mu.waiters) == 0 {
		return
	}
	close(p.mu.waiters[0])
	p.mu.waiters = p.mu.waiters[1:]
}

// removeWaiterLocked takes ch out of the waiters. When it was out already, it was handed a connection (returned:
// the caller's now) or woken (the wake-up is passed on, so a release is not lost).
func (p *Pool) removeWaiterLocked(ch chan *Conn) *Conn {
	for i, w := range p.mu.waiters {
		if w == ch {
			p.mu.waiters = append(p.mu.waiters[:i], p.mu.waiters[i+1:]...)
			return nil
		}
	}
	if c := <-ch; c != nil { // handed (buffered) or closed: either is ready
		return c
	}
	p.wakeLocked()
	return nil
}

// put keeps c idle with its state, or reset first when it is dirty, or closes it (broken, reset failed, pool
// closed).
func (p *Pool) put(c *Conn) {
	ok := !c.broken && c.Buffered() == 0 && c.gen == p.g.gen.Load() // not a connection to a former primary
	if ok && c.dirty {
		_ = c.SetDeadline(time.Now().Add(resetTimeout))
		err := c.WriteCommand(comResetConnection, nil)
		if err == nil {
			c.Status, err = c.ReadOK()
		}
		if err == nil {
			c.ForgetStmts()     // the reset closed them
			err = c.readState() // the reset turned session tracking off with the rest
		}
		_ = c.SetDeadline(time.Time{})
		ok, c.dirty = err == nil, false
		if err != nil {
			p.g.log.Debug("backend connection reset failed; closing it", "addr", p.g.Addr(), "err", err)
		}
	}
	// While another pool waits for the group's budget and none of this pool's Gets waits for this connection,
	// closing it makes room there; idling it would keep the budget until IdleTimeout.
	p.mu.Lock()
	p.mu.inUse--
	if !ok || p.mu.closed || (len(p.mu.waiters) == 0 && p.g.budgetWaited()) {
		p.mu.open--
		p.wakeLocked()
		p.mu.Unlock()
		if ok {
			quit(c)
		} else {
			c.Close()
		}
		p.g.returnBudget(1)
		return
	}
	if len(p.mu.waiters) > 0 { // hand it to the first waiter, still in use
		w := p.mu.waiters[0]
		p.mu.waiters = p.mu.waiters[1:]
		p.mu.inUse++
		p.mu.Unlock()
		w <- c
		return
	}
	c.idleSince = time.Now()
	p.mu.idle = append(p.mu.idle, c)
	p.mu.Unlock()
}

// closeIdle closes idle connections: those idle longer than olderThan beyond MinIdle, or all when olderThan is 0.
func (p *Pool) closeIdle(olderThan time.Duration) {
	var drop []*Conn
	now := time.Now()
	p.mu.Lock()
	keep := p.mu.idle[:0]
	for i, c := range p.mu.idle { // oldest first: LIFO keeps recent ones at the end
		surplus := len(p.mu.idle)-i > p.g.cfg.MinIdle
		if olderThan == 0 || (surplus && now.Sub(c.idleSince) > olderThan) {
			drop = append(drop, c)
			p.mu.open--
			continue
		}
		keep = append(keep, c)
	}
	clear(p.mu.idle[len(keep):])
	p.mu.idle = keep
	p.mu.Unlock()
	for _, c := range drop {
		quit(c)
	}
	p.g.returnBudget(len(drop))
}

// fill opens connections until n are idle (or MaxOpen are open, or the group's budget is used up: MinIdle never
// takes another pool's connections).
func (p *Pool) fill(n int) {
	for {
		p.mu.Lock()
		if p.mu.closed || len(p.mu.idle) >= n || p.mu.open >= p.g.cfg.MaxOpen || !p.g.takeBudget() {
			p.mu.Unlock()
			return
		}
		p.mu.open++
		p.mu.Unlock()
		gen := p.g.gen.Load()
		c, err := p.g.dial(context.Background(), p.key.User, p.password, p.key.Caps, p.key.ExtCaps, p.key.Collation)
		if err == nil {
			c.gen = gen
		}
		p.mu.Lock()
		if err != nil || p.mu.closed {
			p.mu.open--
			if err != nil {
				p.mu.errors++
			}
			p.mu.Unlock()
			if c != nil {
				c.Close()
			}
			p.g.returnBudget(1)
			return
		}
		p.mu.Unlock()
		if err := c.readState(); err != nil {
			p.mu.Lock()
			p.mu.open--
			p.mu.errors++
			p.mu.Unlock()
			c.Close()
			p.g.returnBudget(1)
			return
		}
		p.noteBaseline(c)
		p.mu.Lock()
		c.pool = p
		c.idleSince = time.Now()
		p.mu.idle = append(p.mu.idle, c)
		p.wakeLocked()
		p.mu.Unlock()
	}
}

// close closes idle connections and makes Get fail; connections in use close when released.
func (p *Pool) close() {
	p.mu.Lock()
	p.mu.closed = true
	for _, w := range p.mu.waiters {
		close(w)
	}
	p.mu.waiters = nil
	p.mu.Unlock()
	p.closeIdle(0)
}

// Stats returns the pool's state.
func (p *Pool) Stats() PoolStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return PoolStats{
		Group: p.g.cfg.Name, Address: p.g.Addr(), User: p.key.User, Caps: p.key.Caps, ExtCaps: p.key.ExtCaps,
		Collation: p.key.Collation,
		Open:      p.mu.open, Idle: len(p.mu.idle), InUse: p.mu.inUse, Waits: p.mu.waits, Errors: p.mu.errors,
		Waiting: len(p.mu.waiters), Gets: p.gets.Load(), Fixups: p.fixups.Load(), WaitTime: time.Duration(p.waitNanos.Load()),
	}
}
