package backend

// Replica reads (GroupOptions.Replicas, ReadFrom, MaxReplicaLag).
//
// A group with replicas holds one member per replica: a Group of its own, built from the group's options with the
// replica as its server, so it has its own pools, connection budget, dial backoff and health check, and never has
// replicas itself. The group's position watcher reads every member's applied GTID position every
// positionInterval on a connection of its own (the primary's gtid_binlog_pos, each replica's gtid_slave_pos), and
// keeps a history of the primary's positions from which a replica's lag is measured: how long ago the primary
// first had a commit the replica still lacks. No heartbeat table is needed for that (and no write grant): an idle
// primary's position does not move, and a replica at it is not behind, whatever Seconds_Behind_Master says.
//
// Fencing: every roleInterval the watcher also asks each member whether it replicates (SHOW ALL SLAVES STATUS has a
// row). Two members that are writable (read_only = OFF) and replicate from no one are two primaries: keyway then
// refuses every connection to the group's primary (Pool.get, DialWritable) with a *FencedError naming both, and
// logs it, until one of them is read-only or replicates again. It never sends writes to two primaries. A primary
// that stops answering the watcher is marked down at once (the group's fast-fail, as a failed dial), so writes get
// a clear error within positionInterval rather than at the next health check.
//
// ReadMember answers "which server may run a read that must see everything up to position need": a replica that is
// up and replicates, whose last read position covers need (positions only grow, so one read a moment ago is a safe lower bound),
// and whose lag is within MaxReplicaLag; among several, one at random by weight (ReadAny counts the primary in with
// weight 1). When none qualifies, the primary.

import (
	"context"
	"errors"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/keywaydb/keyway/internal/mysqlwire"
	"github.com/keywaydb/keyway/internal/validity"
)

const (
	// positionInterval is how often the watcher reads the members' positions.
	positionInterval = 100 * time.Millisecond
	// positionHistory is how many samples of the primary's position the lag is measured against (a minute).
	positionHistory = 600
	// positionTimeout bounds one read of a member's position.
	positionTimeout = time.Second
	// roleEvery is how many position reads pass between two reads of the members' roles (a second).
	roleEvery = 10
)

// replicaMember is a replica of a group.
type replicaMember struct {
	*Group
	weight int
	// pos is what the watcher last read (nil before the first read and after a failed one).
	pos   atomic.Pointer[memberPosition]
	reads atomic.Int64 // statements ReadMember sent here
}

// memberPosition is one read of a member's position.
type memberPosition struct {
	pos      validity.Position
	readOnly bool
	// replicates: the member has a replication connection configured, as of the last role read.
	replicates bool
	at         time.Time     // when it was read
	lag        time.Duration // a replica's lag at that moment (see lagOf)
}

// positionSample is the primary's position at an instant.
type positionSample struct {
	at  time.Time
	pos validity.Position
}

// replicaState is the part of a Group about its replicas; empty for a group without them.
type replicaState struct {
	replicas   []*replicaMember
	primaryPos atomic.Pointer[memberPosition]
	reads      atomic.Int64 // reads ReadMember sent to the primary
	fence      atomic.Pointer[FencedError]
	// hold, while set, makes new borrowers of the primary's connections wait until it closes (Switchover);
	// recheck asks the watcher to read the members' roles now.
	hold    atomic.Pointer[chan struct{}]
	recheck chan struct{}
	waiters atomic.Int32 // reads waiting on a replica (WaitMember)
	history struct {
		sync.Mutex
		samples []positionSample // a ring, next is where the next sample goes
		next    int
	}
}

// startReplicas builds the members of o.Replicas and starts the position watcher.
func (g *Group) startReplicas(o GroupOptions) {
	if len(o.Replicas) == 0 {
		return
	}
	for _, r := range o.Replicas {
		ro := o
		ro.Primary, ro.Replicas, ro.ReadFrom = r.Member, nil, ReadPrimary
		m := &replicaMember{Group: NewGroup(ro), weight: max(r.Weight, 1)}
		m.Group.asReplica = m
		g.rs.replicas = append(g.rs.replicas, m)
	}
	g.rs.recheck = make(chan struct{}, 1)
	g.wg.Add(1)
	go g.watchPositions()
}

// closeReplicas closes the replicas' members (after the watcher stopped).
func (g *Group) closeReplicas() {
	for _, r := range g.rs.replicas {
		r.Close()
	}
}

// HasReplicas reports whether the group has replicas (GroupOptions.Replicas).
func (g *Group) HasReplicas() bool { return len(g.rs.replicas) > 0 }

// ReadsReplicas reports whether reads may go to another server than the primary.
func (g *Group) ReadsReplicas() bool {
	return len(g.rs.replicas) > 0 && g.cfg.ReadFrom != ReadPrimary && g.cfg.ReadFrom != ""
}

// ReadMember returns the server that runs a read that must see every commit up to need: a replica that covers it
// and is within MaxReplicaLag, or the group itself (its primary). Safe for concurrent use; it allocates nothing.
func (g *Group) ReadMember(need validity.Position) *Group {
	if !g.ReadsReplicas() {
		return g
	}
	now := time.Now()
	total := 0
	if g.cfg.ReadFrom == ReadAny {
		total = 1
	}
	for _, r := range g.rs.replicas {
		if g.eligible(r, need, now) {
			total += r.weight
		}
	}
	if total > 0 {
		n := rand.IntN(total)
		for _, r := range g.rs.replicas {
			if g.eligible(r, need, now) {
				if n -= r.weight; n < 0 {
					r.reads.Add(1)
					return r.Group
				}
			}
		}
	}
	g.rs.reads.Add(1)
	return g
}

// WaitMember returns the replica a read that needs need may wait on (MASTER_GTID_WAIT, Conn.WaitApplied) when
// ReadMember found none that covers it: the most advanced of those that are up, replicate and are within
// MaxReplicaLag, as long as fewer than maxWaiters reads wait already; nil otherwise. A caller that gets one calls
// DoneWaiting when its wait ends.
func (g *Group) WaitMember(need validity.Position) *Group {
	if !g.ReadsReplicas() || g.rs.waiters.Add(1) > maxWaiters {
		g.rs.waiters.Add(-1)
		return nil
	}
	now := time.Now()
	var best *replicaMember
	var bestPos validity.Position
	for _, r := range g.rs.replicas {
		// p is loaded once: the watcher may store nil at any moment.
		if p := r.pos.Load(); p != nil && g.eligible(r, validity.Position{}, now) && (best == nil || p.pos.Covers(bestPos)) {
			best, bestPos = r, p.pos
		}
	}
	if best == nil {
		g.rs.waiters.Add(-1)
		return nil
	}
	return best.Group
}

// DoneWaiting ends a wait WaitMember allowed.
func (g *Group) DoneWaiting() { g.rs.waiters.Add(-1) }

// maxWaiters bounds the reads of a group that wait on a replica at once: each holds a replica connection.
const maxWaiters = 8

// DefaultReplicaWait is how long a read waits on a replica for a position before it goes to the primary.
const DefaultReplicaWait = 50 * time.Millisecond

// WaitApplied waits on c, a connection to a replica, until its server has applied pos, at most timeout
// (MASTER_GTID_WAIT), and reports whether it has; the replica's known position rises with it, so the reads that
// follow need no wait. An error leaves c broken or usable as queryStrings does.
func (c *Conn) WaitApplied(pos validity.Position, timeout time.Duration) (bool, error) {
	_ = c.SetDeadline(time.Now().Add(timeout + positionTimeout)) // a replica that hangs does not hold the read
	vals, err := c.queryStrings("SELECT MASTER_GTID_WAIT('" + pos.String() + "', " +
		strconv.FormatFloat(timeout.Seconds(), 'f', 3, 64) + ")")
	_ = c.SetDeadline(time.Time{})
	if err != nil || vals[0] != "0" {
		return false, err
	}
	if c.pool != nil {
		if r := c.pool.g.asReplica; r != nil {
			r.raise(pos)
		}
	}
	return true, nil
}

// raise records that r's server has applied pos.
func (r *replicaMember) raise(pos validity.Position) {
	for {
		old := r.pos.Load()
		if old == nil || old.pos.Covers(pos) {
			return
		}
		p := *old
		p.pos = old.pos.Merge(pos)
		if r.pos.CompareAndSwap(old, &p) {
			return
		}
	}
}

// eligible reports whether replica r may take a read that needs need, now.
func (g *Group) eligible(r *replicaMember, need validity.Position, now time.Time) bool {
	p := r.pos.Load()
	if p == nil || !p.replicates || !p.pos.Covers(need) { // one that replicates from no one is no replica now
		return false
	}
	if up, _ := r.Healthy(); !up {
		return false
	}
	// p.lag was the lag when p was read; since then the primary may have committed what r lacks.
	return p.lag+now.Sub(p.at) <= g.cfg.MaxReplicaLag
}

// watchPositions reads every member's position each positionInterval, and its role each roleEvery reads, until
// the group closes.
func (g *Group) watchPositions() {
	defer g.wg.Done()
	conns := make(map[*Group]*Conn, 1+len(g.rs.replicas))
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	// What each member was configured as, until its role is read: an account without SLAVE MONITOR cannot read it
	// (the replicas still take reads; fencing then sees nothing).
	replicates := make(map[*Group]bool, 1+len(g.rs.replicas))
	for _, r := range g.rs.replicas {
		replicates[r.Group] = true
	}
	t := time.NewTicker(positionInterval)
	defer t.Stop()
	for tick := 0; ; tick++ {
		roles := tick%roleEvery == 0
		now := time.Now()
		p, err := g.readPosition(conns, g, "SELECT @@gtid_binlog_pos, @@read_only")
		if p != nil {
			p.at = now
			g.notePrimary(positionSample{at: now, pos: p.pos})
		} else if _, refused := errors.AsType[*mysqlwire.Error](err); !refused && err != errNoAccount {
			g.failed(err) // the primary does not answer: writes fail fast from now
		}
		g.readRole(conns, g, p, roles, replicates)
		g.rs.primaryPos.Store(p)
		for _, r := range g.rs.replicas {
			p, _ := g.readPosition(conns, r.Group, "SELECT @@gtid_slave_pos, @@read_only")
			if p != nil {
				p.at = time.Now()
				p.lag = g.lagOf(p.pos, p.at)
			}
			g.readRole(conns, r.Group, p, roles, replicates)
			r.pos.Store(p)
		}
		if roles && g.roleCheck() {
			for m, c := range conns { // they point at the servers as they were
				c.Close()
				delete(conns, m)
			}
			clear(replicates)
			for _, r := range g.rs.replicas {
				replicates[r.Group] = true
			}
		}
		select {
		case <-g.stop:
			return
		case <-t.C:
		case <-g.rs.recheck:
			tick = -1 // roles now (tick++ makes it 0)
		}
	}
}

// readRole records in p whether m replicates: read now when roles, else as last read (kept in replicates).
func (g *Group) readRole(conns map[*Group]*Conn, m *Group, p *memberPosition, roles bool, replicates map[*Group]bool) {
	if p == nil {
		return
	}
	if c := conns[m]; roles && c != nil {
		_ = c.SetDeadline(time.Now().Add(positionTimeout))
		n, err := c.queryRows("SHOW ALL SLAVES STATUS", func([]string) {})
		_ = c.SetDeadline(time.Time{})
		if err != nil {
			if c.broken {
				c.Close()
				delete(conns, m)
			}
			return // unknown: the last answer stands
		}
		replicates[m] = n > 0
	}
	p.replicates = replicates[m]
}

// roleCheck fences the group when two members it can see are writable and replicate from no one, and lifts the
// fence when that ends; both are logged. When exactly one member is such a primary and it is a replica, the group
// follows it (follow) and roleCheck reports true.
func (g *Group) roleCheck() bool {
	var primaries []*Group
	var newPrimary *replicaMember
	if p := g.rs.primaryPos.Load(); p != nil && !p.readOnly && !p.replicates {
		primaries = append(primaries, g)
	}
	for _, r := range g.rs.replicas {
		if p := r.pos.Load(); p != nil && !p.readOnly && !p.replicates {
			primaries, newPrimary = append(primaries, r.Group), r
		}
	}
	old := g.rs.fence.Load()
	switch {
	case len(primaries) >= 2:
		addrs := make([]string, len(primaries))
		for i, m := range primaries {
			addrs[i] = m.Addr()
		}
		f := &FencedError{Group: g.cfg.Name, Primaries: addrs}
		g.rs.fence.Store(f)
		if old == nil {
			g.log.Error("two members are writable and replicate from no one: keyway refuses the group's writes until one of them is read-only or replicates", "primaries", addrs)
		}
		return false
	case old != nil:
		g.rs.fence.Store(nil)
		g.log.Warn("one writable primary again: the group's writes go through again", "was", old.Primaries)
	}
	if len(primaries) == 1 && newPrimary != nil {
		g.follow(newPrimary)
		return true
	}
	return false
}

// follow makes replica r, now the only writable member that replicates from no one, the group's primary: the
// group's connections go to r's server from now on and r's to the former primary's (swapServers). A former primary
// that did not answer the watcher makes it a failover: cached copies may hold transactions the new primary never
// got, which GroupOptions.OnNewPrimary is told.
func (g *Group) follow(r *replicaMember) {
	oldPos, newPos := g.rs.primaryPos.Load(), r.pos.Load()
	change := NewPrimary{Group: g.cfg.Name, Old: g.Addr(), New: r.Addr(), Failover: oldPos == nil}
	if newPos != nil {
		change.Position = newPos.pos
	}
	g.swapServers(r.Group)
	g.rs.primaryPos.Store(nil)
	r.pos.Store(nil)
	g.log.Warn("following the group's new primary: it is writable and replicates from no one", "new", change.New,
		"former", change.Old, "failover", change.Failover)
	if f := g.cfg.OnNewPrimary; f != nil {
		f(change)
	}
}

// NewPrimary is a change of a group's primary that keyway followed (GroupOptions.OnNewPrimary).
type NewPrimary struct {
	Group, Old, New string
	// Failover: the former primary did not answer (it may have acknowledged commits the new one never got);
	// otherwise a switchover (it was read-only or replicating).
	Failover bool
	Position validity.Position // the new primary's position when keyway followed it
}

// swapServers exchanges the servers of g (the group's primary) and m (one of its replicas): the group's
// connections, new ones and those that come back, go to m's server from now on, and m's to g's former one. Idle
// connections of both are closed, connections in use are closed when released (gen), and each re-learns its server
// (budget, health) from the next dial.
func (g *Group) swapServers(m *Group) {
	a, b := g.srv.Load(), m.srv.Load()
	g.srv.Store(b)
	m.srv.Store(a)
	for _, x := range []*Group{g, m} {
		x.gen.Add(1)
		x.mu.Lock()
		x.mu.budgetKnown, x.mu.stmtsKnown = x.cfg.MaxConnections != 0, false
		x.mu.down, x.mu.lastErr, x.mu.failUntil, x.mu.backoff, x.mu.info = false, nil, time.Time{}, 0, nil
		pools := make([]*Pool, 0, len(x.mu.pools))
		for _, p := range x.mu.pools {
			pools = append(pools, p)
		}
		x.mu.Unlock()
		for _, p := range pools {
			p.closeIdle(0)
		}
	}
}

// FencedError says keyway refuses a group's writes because more than one member is a writable primary.
type FencedError struct {
	Group     string
	Primaries []string
}

func (e *FencedError) Error() string {
	return "keyway: backend group " + e.Group + " has several writable primaries (" + strings.Join(e.Primaries, ", ") +
		": read_only = OFF and replicating from no one); keyway refuses its writes until only one is"
}

// Fenced returns the *FencedError of the group c belongs to while it is fenced, else nil: a connection held across
// statements (pinned, or kept for the next one) must not carry writes to one of two primaries either.
func (c *Conn) Fenced() error {
	if c.pool == nil {
		return nil
	}
	return c.pool.g.fenced()
}

// fenced returns the group's *FencedError while it is fenced, else nil.
func (g *Group) fenced() error {
	if f := g.rs.fence.Load(); f != nil {
		return f
	}
	return nil
}

// errNoAccount: the group has no account to read positions with.
var errNoAccount = errors.New("backend: no account for the position watcher")

// readPosition runs q (position, read_only) on m's watcher connection, dialing it when there is none; nil and the
// error when it fails (the connection is then closed).
func (g *Group) readPosition(conns map[*Group]*Conn, m *Group, q string) (*memberPosition, error) {
	c := conns[m]
	if c == nil {
		if g.cfg.User == "" {
			return nil, errNoAccount // no replica is ever eligible
		}
		ctx, cancel := context.WithTimeout(context.Background(), positionTimeout)
		var err error
		c, err = m.connect(ctx, g.cfg.User, g.cfg.Password, 0, 0, 0)
		cancel()
		if err != nil {
			return nil, err
		}
		conns[m] = c
	}
	_ = c.SetDeadline(time.Now().Add(positionTimeout))
	vals, err := c.queryStrings(q)
	_ = c.SetDeadline(time.Time{})
	var pos validity.Position
	if err == nil {
		pos, err = validity.ParsePosition(vals[0])
	}
	if err != nil {
		c.Close()
		delete(conns, m)
		return nil, err
	}
	return &memberPosition{pos: pos, readOnly: vals[1] == "1"}, nil
}

// notePrimary adds a sample of the primary's position to the history.
func (g *Group) notePrimary(s positionSample) {
	h := &g.rs.history
	h.Lock()
	defer h.Unlock()
	if len(h.samples) < positionHistory {
		h.samples = append(h.samples, s)
		return
	}
	h.samples[h.next] = s
	h.next = (h.next + 1) % positionHistory
}

// lagOf is how far a server at pos is behind the primary at now: 0 when pos covers the primary's latest sample,
// else the time since the newest sample it covers (the primary has committed something pos lacks since then), or
// since the oldest sample when it covers none.
func (g *Group) lagOf(pos validity.Position, now time.Time) time.Duration {
	h := &g.rs.history
	h.Lock()
	defer h.Unlock()
	n := len(h.samples)
	if n == 0 {
		return g.cfg.MaxReplicaLag + time.Hour // nothing to compare with: not eligible
	}
	newest := (h.next + n - 1) % n
	for i := range n {
		s := h.samples[(newest-i+n)%n]
		if pos.Covers(s.pos) {
			if i == 0 {
				return 0
			}
			return now.Sub(s.at)
		}
	}
	return now.Sub(h.samples[h.next%n].at)
}

// MemberStatus is a member's state as the position watcher last saw it, for metrics, the dashboard and tests.
type MemberStatus struct {
	Address  string
	Primary  bool
	Up       bool
	Known    bool // the watcher read its position
	ReadOnly bool
	Position string
	Lag      time.Duration
	Reads    int64 // reads ReadMember sent to it
}

// Members returns the primary's and each replica's status (the primary first); nil for a group without replicas.
func (g *Group) Members() []MemberStatus {
	if len(g.rs.replicas) == 0 {
		return nil
	}
	status := func(m *Group, p *memberPosition, reads int64) MemberStatus {
		up, _ := m.Healthy()
		s := MemberStatus{Address: m.Addr(), Up: up, Reads: reads}
		if p != nil {
			s.Known, s.ReadOnly, s.Position, s.Lag = true, p.readOnly, p.pos.String(), p.lag
		}
		return s
	}
	out := []MemberStatus{status(g, g.rs.primaryPos.Load(), g.rs.reads.Load())}
	out[0].Primary = true
	for _, r := range g.rs.replicas {
		out = append(out, status(r.Group, r.pos.Load(), r.reads.Load()))
	}
	return out
}
