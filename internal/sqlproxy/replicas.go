package sqlproxy

// Reads on replicas (a group's read_from = "replicas" or "any"; backend.Group.ReadMember picks the server).
//
// A statement may run on a replica when it is a read the result cache could hold (Plan.Cacheable: one SELECT of
// tables, no locking clause, no variables, no function whose answer changes without a write) and the session
// could have it answered from anywhere: outside a transaction, unpinned, not reading LAST_INSERT_ID() or the
// previous statement's diagnostics, holding no connection (lease keeps a held one). It then runs on a replica whose
// applied position covers what it needs: the position of the last commit keyway knows of to each table it reads
// (validity.Gate.Needs), or the group's newest known position when keyway cannot name its tables (a view). When no
// replica is known to cover it (their positions are read every 100 ms, so a read right after a write rarely is),
// the read waits on the most advanced replica for that position (MASTER_GTID_WAIT, 50 ms at most, at most 8 reads
// of a group at once), and goes to the primary if it times out. Since positions only grow and the need is read when the statement is
// sent, a read sees every write keyway acknowledged before it, through either door, and every direct write the
// binlog follower had applied.
//
// Writes: the GTID MariaDB reports for a write keyway relays (session-tracked last_gtid) is recorded for the
// tables it wrote (those of its transaction, at COMMIT) before the client gets the OK, so the next read of those
// tables, from any session, goes to a server that has it. A write whose tables keyway cannot name (CALL, an
// unparsable statement) raises every table's position (validity.Gate.NoteAll). Tables written by triggers are not
// named (see docs/replicas.md).

import (
	"slices"

	"github.com/keywaydb/keyway/internal/backend"
	"github.com/keywaydb/keyway/internal/mysqlwire"
	"github.com/keywaydb/keyway/internal/validity"
)

// runGroup is the group that runs the session's statement: the shard the router chose (shardroute.go), else the
// session's own.
func (ss *session) runGroup() *backend.Group {
	if ss.shard != nil && ss.shard != ss.user.group {
		return ss.shard
	}
	return ss.user.group
}

// leasePool is the pool the statement of plan borrows from: a replica's, when the statement may read there and a
// replica covers what it needs, else its group's primary's (primary). When no replica covers it but one may
// soon, wait is the position the borrowed connection must wait for first (leaseWaited); zero otherwise.
func (ss *session) leasePool(plan *Plan) (pool, primary *backend.Pool, wait validity.Position) {
	g, primary := ss.runGroup(), ss.pool
	if g != ss.user.group {
		primary = g.Pool(ss.pool.Key(), ss.user.backendPassword) // the shard's: looked up once, here
	}
	if plan == nil || !g.ReadsReplicas() || !ss.mayReadReplica(plan) {
		return primary, primary, wait
	}
	need, ok := ss.readNeeds(plan)
	if !ok {
		return primary, primary, wait
	}
	if m := g.ReadMember(need); m != g {
		return m.Pool(ss.pool.Key(), ss.user.backendPassword), primary, wait
	}
	if m := g.WaitMember(need); m != nil {
		return m.Pool(ss.pool.Key(), ss.user.backendPassword), primary, need
	}
	return primary, primary, wait
}

// leaseWaited makes be, borrowed from a replica's pool of group g, wait until its server has applied wait (at
// most backend.DefaultReplicaWait): be when it has, else nil, be given back, and the read goes to the primary.
func (ss *session) leaseWaited(g *backend.Group, be *backend.Conn, wait validity.Position) *backend.Conn {
	defer g.DoneWaiting()
	if ok, err := be.WaitApplied(wait, backend.DefaultReplicaWait); !ok || err != nil {
		be.Release()
		return nil
	}
	return be
}

// mayReadReplica reports whether plan, run now by the session, may run on a replica.
func (ss *session) mayReadReplica(plan *Plan) bool {
	return plan.Cacheable && retrySafe(plan) && !plan.ReadsLastInsertID && !plan.ReadsDiagnostics &&
		ss.status&mysqlwire.StatusInTrans == 0 && ss.pins() == 0 && ss.hasGate()
}

// readNeeds is the position a server must have applied to run plan: the positions of its tables, or the group's
// newest known one when keyway cannot name them. ok is false when there is no way to tell.
func (ss *session) readNeeds(plan *Plan) (validity.Position, bool) {
	gate, _ := ss.gate()
	ids := plan.TableIDs(ss.db)
	reg := ss.s.opts.Validity
	for _, id := range ids {
		if id.Schema != "" && reg != nil && !reg.Table(id).Trusted() {
			return gate.Newest(), true // a view: the tables under it are not named
		}
	}
	return gate.Needs(ids), true
}

// notePosition records the GTID of a write the session's statement made (be's last_gtid moved from before), for
// the tables it wrote, before the client is told of it. tx are the tables written in the transaction the
// statement ended, if it ended one.
func (ss *session) notePosition(plan *Plan, before string, be *backend.Conn, tx []validity.TableID) {
	gate, _ := ss.gateOf(be.Pool().Group()) // the server the write ran on: a shard's, in a sharded farm
	if gate == nil || be.State.LastGTID == before || be.State.LastGTID == "" {
		return
	}
	pos, err := validity.ParsePosition(be.State.LastGTID)
	if err != nil {
		ss.s.log.Debug("sql: unreadable last_gtid; replicas' reads of the tables it wrote wait for the binlog follower",
			"session", ss.id, "last_gtid", be.State.LastGTID, "err", err)
		return
	}
	var ids []validity.TableID
	if plan != nil && plan.ParseError == "" {
		ids = slices.Concat(plan.TableIDs(ss.db), tx) // a copy: TableIDs' slice is shared
	}
	if len(ids) == 0 { // a write keyway cannot name the tables of (CALL, an unparsable statement…)
		gate.NoteAll(pos)
		return
	}
	gate.NoteCommit(ids, pos)
}
