package backend

// Failover and switchover: keyway's own promotion of a replica, for an operator (keyway failover, keyway
// switchover). Either way the group then follows the new primary as it follows one promoted by someone else
// (roleCheck in replicas.go): promotion only changes the servers, and the position watcher is told to look at once.
//
// Switchover (the primary is up): new borrowers of the primary's connections wait (hold, at most the hold given)
// while the transactions open on the primary that wrote get that long to end (openTransactions); the primary turns
// read-only (which waits for the statements in flight); the target applies everything the primary has (MASTER_GTID_WAIT); it is promoted; the other members,
// the former primary included, replicate from it; the group follows; the held borrowers go on, to the new primary.
// Nothing is lost, and a session outside a transaction sees a pause, not an error.
//
// Failover (the primary is dead): the replica that has received the most (Gtid_IO_Pos) applies what it received
// and is promoted; the others replicate from it. Commits the dead primary acknowledged and never sent are lost with
// asynchronous replication (the server's OnNewPrimary logs which, see internal/server); with semi-synchronous
// replication (AFTER_SYNC) a commit is acknowledged only once a replica has it, so the most advanced one has them.

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/keywaydb/keyway/internal/validity"
)

// PromoteReport says what a Failover or Switchover did.
type PromoteReport struct {
	Group, Former, New string
	// Held is how long new borrowers of the primary's connections waited (switchover); StillOpen the transactions
	// that had written (or held locks) on the former primary and were still open when the hold ended (their COMMIT
	// fails there), -1 when the primary could not say (information_schema.INNODB_TRX needs the PROCESS privilege).
	Held      time.Duration
	StillOpen int
	Position  string // the new primary's position when it was promoted
}

// Failover promotes the replica that received the most of the former primary's binary log (the primary is dead)
// and points the other replicas at it; the group follows it.
func (g *Group) Failover(ctx context.Context) (PromoteReport, error) {
	rep := PromoteReport{Group: g.cfg.Name, Former: g.Addr()}
	qctx, cancel := context.WithTimeout(ctx, positionTimeout)
	_, err := g.memberQuery(qctx, g, "SELECT 1 AS up")
	cancel()
	if err == nil { // two writable primaries would follow; keyway would fence them, but better not make them
		return rep, fmt.Errorf("keyway: group %s: the primary %s answers: use keyway switchover", g.cfg.Name, g.Addr())
	}
	var best *replicaMember
	var bestPos validity.Position
	for _, r := range g.rs.replicas {
		st, err := g.memberQuery(ctx, r.Group, "SHOW ALL SLAVES STATUS")
		if err != nil || len(st) == 0 {
			continue
		}
		pos, err := validity.ParsePosition(st["Gtid_IO_Pos"])
		if err != nil {
			continue
		}
		if best == nil || pos.Covers(bestPos) && !bestPos.Covers(pos) {
			best, bestPos = r, pos
		}
	}
	if best == nil {
		return rep, fmt.Errorf("keyway: group %s: no replica answers and replicates: nothing to promote", g.cfg.Name)
	}
	// What it received, it applies first: a relay log thrown away would lose it.
	if err := g.memberExec(ctx, best.Group, "START SLAVE SQL_THREAD"); err != nil {
		return rep, err
	}
	if err := g.waitApplied(ctx, best.Group, bestPos, 30*time.Second); err != nil {
		return rep, err
	}
	pos, err := g.promote(ctx, best.Group)
	if err != nil {
		return rep, err
	}
	rep.New, rep.Position = best.Addr(), pos
	for _, r := range g.rs.replicas {
		if r != best {
			if err := g.repoint(ctx, r.Group, best.Group, false); err != nil {
				g.log.Warn("failover: a replica could not be pointed at the new primary", "replica", r.Addr(), "err", err)
			}
		}
	}
	return rep, g.awaitFollow(ctx, rep.New)
}

// Switchover makes replica to ("" = the most advanced) the primary while the primary is up, holding new writes for
// at most hold (see the file comment).
func (g *Group) Switchover(ctx context.Context, to string, hold time.Duration) (rep PromoteReport, err error) {
	rep = PromoteReport{Group: g.cfg.Name, Former: g.Addr()}
	target := g.pickTarget(to)
	if target == nil {
		return rep, fmt.Errorf("keyway: group %s: no replica %q that answers and replicates to switch over to", g.cfg.Name, to)
	}
	start := time.Now()
	release := g.holdPrimary()
	defer func() {
		release()
		rep.Held = time.Since(start)
	}()
	deadline := start.Add(hold)
	for {
		rep.StillOpen = g.openTransactions(ctx)
		left := time.Until(deadline)
		if rep.StillOpen == 0 || left <= 0 {
			break
		}
		time.Sleep(min(trxPollInterval, left)) // the last look may be early, and see the snapshot before it
	}
	if err := g.memberExec(ctx, g, "SET GLOBAL read_only = 1"); err != nil {
		return rep, err
	}
	vals, err := g.memberQuery(ctx, g, "SELECT @@gtid_binlog_pos AS pos")
	if err != nil {
		_ = g.memberExec(ctx, g, "SET GLOBAL read_only = 0")
		return rep, err
	}
	want, err := validity.ParsePosition(vals["pos"])
	if err == nil {
		err = g.waitApplied(ctx, target.Group, want, max(time.Until(deadline), time.Second))
	}
	if err != nil {
		_ = g.memberExec(ctx, g, "SET GLOBAL read_only = 0") // nothing changed: the primary takes writes again
		return rep, fmt.Errorf("keyway: group %s: switchover abandoned, %s did not apply the primary's writes in time: %w", g.cfg.Name, target.Addr(), err)
	}
	pos, err := g.promote(ctx, target.Group)
	if err != nil {
		return rep, err
	}
	rep.New, rep.Position = target.Addr(), pos
	if err := g.repoint(ctx, g, target.Group, true); err != nil {
		g.log.Warn("switchover: the former primary could not be pointed at the new one", "err", err)
	}
	for _, r := range g.rs.replicas {
		if r != target {
			if err := g.repoint(ctx, r.Group, target.Group, false); err != nil {
				g.log.Warn("switchover: a replica could not be pointed at the new primary", "replica", r.Addr(), "err", err)
			}
		}
	}
	return rep, g.awaitFollow(ctx, rep.New)
}

// pickTarget is replica to, or the most advanced replica that replicates when to is "".
func (g *Group) pickTarget(to string) *replicaMember {
	var best *replicaMember
	var bestPos validity.Position
	for _, r := range g.rs.replicas {
		p := r.pos.Load() // once: the watcher may clear it
		if p == nil || !p.replicates {
			continue
		}
		if to != "" {
			if r.Addr() == to {
				return r
			}
			continue
		}
		if best == nil || p.pos.Covers(bestPos) {
			best, bestPos = r, p.pos
		}
	}
	return best
}

// promote makes m a primary: its replication stops and is forgotten, and it takes writes. It returns m's position.
func (g *Group) promote(ctx context.Context, m *Group) (string, error) {
	for _, q := range []string{"STOP SLAVE", "RESET SLAVE ALL", "SET GLOBAL read_only = 0"} {
		if err := g.memberExec(ctx, m, q); err != nil {
			return "", err
		}
	}
	vals, err := g.memberQuery(ctx, m, "SELECT @@gtid_binlog_pos AS pos")
	return vals["pos"], err
}

// repoint makes m replicate from primary with GTIDs, read-only. A former primary starts from what it wrote itself
// and logs in with the group's replication account; a replica keeps its own, which CHANGE MASTER leaves as it was.
func (g *Group) repoint(ctx context.Context, m, primary *Group, former bool) error {
	host, port, err := net.SplitHostPort(primary.Addr())
	if err != nil {
		return fmt.Errorf("keyway: %s is not host:port, which CHANGE MASTER needs: %w", primary.Addr(), err)
	}
	change := "CHANGE MASTER TO MASTER_HOST = '" + sqlQuote(host) + "', MASTER_PORT = " + port + ", MASTER_USE_GTID = slave_pos"
	qs := []string{"STOP SLAVE", "SET GLOBAL read_only = 1"}
	if former {
		change += ", MASTER_USER = '" + sqlQuote(g.cfg.ReplicationUser) + "', MASTER_PASSWORD = '" +
			sqlQuote(g.cfg.ReplicationPassword) + "', MASTER_CONNECT_RETRY = 1"
		qs = append(qs, "SET GLOBAL gtid_slave_pos = @@gtid_binlog_pos")
	}
	for _, q := range append(qs, change, "START SLAVE") {
		if err := g.memberExec(ctx, m, q); err != nil {
			return err
		}
	}
	return nil
}

func sqlQuote(s string) string { return strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) }

// waitApplied waits until m has applied pos (MASTER_GTID_WAIT), at most timeout.
func (g *Group) waitApplied(ctx context.Context, m *Group, pos validity.Position, timeout time.Duration) error {
	if pos.IsZero() {
		return nil
	}
	q := "SELECT MASTER_GTID_WAIT('" + pos.String() + "', " + strconv.FormatFloat(timeout.Seconds(), 'f', 3, 64) + ") AS r"
	vals, err := g.memberQuery(ctx, m, q)
	if err != nil {
		return err
	}
	if vals["r"] != "0" {
		return fmt.Errorf("%s had not applied %s after %v", m.Addr(), pos, timeout)
	}
	return nil
}

// awaitFollow tells the watcher to look at the members' roles now and waits until the group's primary is addr.
func (g *Group) awaitFollow(ctx context.Context, addr string) error {
	deadline := time.Now().Add(10 * time.Second)
	for g.Addr() != addr {
		select {
		case g.rs.recheck <- struct{}{}:
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("keyway: group %s: %s was promoted, but the group did not follow it within 10 s", g.cfg.Name, addr)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
	return nil
}

// holdPrimary makes new borrowers of the primary's pools wait until the returned release is called.
func (g *Group) holdPrimary() (release func()) {
	ch := make(chan struct{})
	g.rs.hold.Store(&ch)
	return func() {
		g.rs.hold.Store(nil)
		close(ch)
	}
}

// waitHold blocks while a switchover holds the group's primary, or until ctx ends.
func (g *Group) waitHold(ctx context.Context) error {
	if h := g.rs.hold.Load(); h != nil {
		select {
		case <-*h:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// trxPollInterval spaces a switchover's looks at INNODB_TRX. The server answers from a snapshot of its
// transactions that it takes again only when the table was not read for 100 ms (trx_i_s_cache, CACHE_MIN_IDLE_TIME_US):
// read more often, it keeps the snapshot of the first read however long the reads go on. Polled every 10 ms, a
// switchover under writers saw the INSERTs in flight at its start as open transactions for its whole hold, and
// every write waited the hold out.
const trxPollInterval = 120 * time.Millisecond

// openTransactions counts the transactions on the primary that a switchover waits for (-1 when it cannot tell):
// those that wrote rows or hold locks, but the asking connection's. A transaction that wrote cannot commit once
// the primary is read-only: its client gets the hold to end it. One that has only read (a read view, no locks)
// loses nothing and commits on a read-only primary as well: an idle reader (a long report, a consistent dump) does
// not hold every writer for the hold. A write in flight outside a transaction is counted once it locks, and need
// not be before: SET GLOBAL read_only waits for the statements in flight and their commits, so the binary log
// position read after it covers them.
func (g *Group) openTransactions(ctx context.Context) int {
	vals, err := g.memberQuery(ctx, g, "SELECT COUNT(*) AS n FROM information_schema.INNODB_TRX "+
		"WHERE trx_mysql_thread_id <> CONNECTION_ID() AND (trx_rows_modified > 0 OR trx_lock_structs > 0)")
	if err != nil {
		return -1
	}
	n, err := strconv.Atoi(vals["n"])
	if err != nil {
		return -1
	}
	return n
}

// Stale reports whether c was dialed to a server its group has stopped using (it followed a new primary since).
func (c *Conn) Stale() bool { return c.pool != nil && c.gen != c.pool.g.gen.Load() }

// WaitHold blocks while a switchover holds the group c belongs to (a session's next statement outside a
// transaction waits there, as new borrowers do in Pool.get), or until ctx ends.
func (c *Conn) WaitHold(ctx context.Context) error {
	if c.pool == nil {
		return nil
	}
	return c.pool.g.waitHold(ctx)
}

// memberExec runs q on m with the group's account, on a connection of its own.
func (g *Group) memberExec(ctx context.Context, m *Group, q string) error {
	_, err := g.memberQuery(ctx, m, q)
	return err
}

// memberQuery runs q on m with the group's account and returns its first row by column name (nil for none).
func (g *Group) memberQuery(ctx context.Context, m *Group, q string) (map[string]string, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	c, err := m.connect(ctx, g.cfg.User, g.cfg.Password, 0, 0, 0)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
	names, rows, err := c.queryNamedRows(q)
	if err != nil {
		return nil, fmt.Errorf("keyway: %s on %s: %w", q, m.Addr(), err)
	}
	if len(rows) == 0 {
		return nil, nil
	}
	out := make(map[string]string, len(names))
	for i, n := range names {
		out[n] = rows[0][i]
	}
	return out, nil
}
