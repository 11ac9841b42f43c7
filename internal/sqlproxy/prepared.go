package sqlproxy

// This file is the binary protocol's prepared statements, which keyway owns: a client's COM_STMT_PREPARE gets a
// statement id of keyway's (the session's own counter), and keyway keeps the statement's text, its plan and what
// the client was told. Each COM_STMT_EXECUTE runs on the connection the session borrows for it, where the statement
// is prepared the first time it runs there (backend.Conn.Prepare; the connection keeps it, bounded, for every
// session that runs the same text in the same state). So a prepared statement does not pin its session.
//
// What must match between the client and the connection's statement:
//   - Parameter types: a client binds them once and omits them after. The server keeps the types per statement,
//     and a connection's statement may have been bound by another session: keyway adds the client's types to an
//     execute that omits them whenever the statement's types on that connection differ (forBackend).
//   - Column definitions, for a client with MariaDB's metadata cache (MARIADB_CLIENT_CACHE_METADATA): the server
//     leaves them out of an execute's reply while they are what it last sent for that statement, which may not be
//     what this client holds (DDL between the client's prepare and a prepare on another connection). keyway
//     compares the two, and where they differ sends the client the definitions with the metadata-follows flag set,
//     as MariaDB does after a re-prepare (relay.executeColumns).
//   - COM_STMT_SEND_LONG_DATA and cursors live on one connection: they pin the session until the execute
//     (long data) or until the statement is reset, closed or executed without a cursor (pipeline.go's pinTable).

import (
	"bytes"
	"encoding/binary"
	"time"

	"github.com/keywaydb/keyway/internal/backend"
	"github.com/keywaydb/keyway/internal/mysqlwire"
)

// maxSessionStmts bounds the statements one session keeps prepared, as the server's max_prepared_stmt_count
// bounds them for a client connected directly.
const maxSessionStmts = 4096

// prepared is a client's prepared statement, under keyway's id for it.
type prepared struct {
	plan            *Plan
	query           string // the statement text, as prepared (a cache key holds it)
	params, columns int    // its parameter and column counts
	// defs are the column definitions the client holds, when it caches them (MariaDB's metadata cache); nil
	// otherwise.
	defs []byte
	// types are the parameter types the client bound last (an execute may omit them); longData is set while
	// parameters were sent with COM_STMT_SEND_LONG_DATA since the last execute; cursor: its last execute opened a
	// cursor. longData and cursor pin the session (notePreparedPins); longData and types decide cacheability.
	types    []byte
	longData bool
	cursor   bool
}

// stmtCommand runs a COM_STMT_* command.
func (ss *session) stmtCommand(p []byte) error {
	if p[0] == comStmtPrepare {
		if plan := ss.s.plans.Plan(string(p[1:])); plan.Kill != KillNone {
			return ss.reply(mysqlwire.NewError(mysqlwire.ERUnsupportedPS, "HY000",
				"keyway: KILL cannot be prepared: send it as a text query so keyway can map its connection id"))
		}
		return ss.prepare(p)
	}
	st, err := ss.stmt(p, stmtCommandName(p[0]))
	if st == nil {
		return err
	}
	switch p[0] {
	case comStmtExecute:
		return ss.execute(p, st)
	case comStmtFetch:
		if ss.be == nil || ss.be.Stmt(st.query) == nil || !st.cursor {
			return ss.reply(mysqlwire.NewError(mysqlwire.ERStmtHasNoOpenCursor, "HY000",
				"The statement (%d) has no open cursor.", binary.LittleEndian.Uint32(p[1:])))
		}
		_, _, err := ss.exchange(p, nil, st, relay.rows, toClient)
		return err
	case comStmtSendLongData:
		st.longData = true
		ss.pin.set |= pinSet(PinLongData)
		if e, err := ss.lease(nil); e != nil || err != nil {
			return err // no reply to carry e: the execute that follows fails
		}
		q, e, err := ss.onConnection(st, p)
		if e != nil || err != nil {
			return err
		}
		return ss.writeCommand(q, false)
	case comStmtReset:
		held := st.longData || st.cursor
		st.longData, st.cursor = false, false
		ss.notePreparedPins()
		if !held || ss.be == nil || ss.be.Stmt(st.query) == nil {
			return ss.reply(nil) // nothing of it on a connection: nothing to reset
		}
		_, _, err := ss.exchange(p, nil, st, relay.one, toClient)
		return err
	case comStmtClose:
		// The connections keep their statement for other sessions (backend.Conn's cache); only the client's
		// handle goes.
		delete(ss.stmts, binary.LittleEndian.Uint32(p[1:]))
		if st.longData || st.cursor {
			ss.notePreparedPins()
		}
	}
	return nil
}

// stmtCommandName is how the server names a COM_STMT_* command with a reply in its errors, "" for the commands
// without one.
func stmtCommandName(cmd byte) string {
	switch cmd {
	case comStmtExecute:
		return "mysqld_stmt_execute"
	case comStmtFetch:
		return "mysqld_stmt_fetch"
	case comStmtReset:
		return "mysqld_stmt_reset"
	}
	return ""
}

// stmt finds the statement a COM_STMT_* packet names. An unknown id gets ER_UNKNOWN_STMT_HANDLER, as the server
// words it, for commands with a reply (answer names the command); nil is returned then, or for a packet too short.
func (ss *session) stmt(p []byte, answer string) (*prepared, error) {
	if len(p) < 5 {
		if answer == "" {
			return nil, nil
		}
		return nil, ss.reply(mysqlwire.NewError(mysqlwire.ERMalformedPacket, "08S01", "Malformed communication packet: %s", answer))
	}
	id := binary.LittleEndian.Uint32(p[1:])
	if st := ss.stmts[id]; st != nil {
		return st, nil
	}
	if answer == "" {
		return nil, nil
	}
	return nil, ss.reply(mysqlwire.NewError(mysqlwire.ERUnknownStmtHandler, "HY000",
		"Unknown prepared statement handler (%d) given to %s", id, answer))
}

// prepare runs COM_STMT_PREPARE on a borrowed connection (or takes the statement its cache holds) and answers the
// client with the server's reply under a statement id of keyway's.
func (ss *session) prepare(p []byte) error {
	query := string(p[1:])
	if len(ss.stmts) >= maxSessionStmts {
		return ss.reply(mysqlwire.NewError(mysqlwire.ERMaxPreparedStmtCount, "42000",
			"Can't create more than max_prepared_stmt_count statements (current value: %d)", maxSessionStmts))
	}
	if g := ss.prepareShard(query); g != nil {
		ss.shard = g // a shard of the table's mapping has it (every shard has the same definition)
		defer func() { ss.shard = nil }()
	}
	if e, err := ss.lease(nil); e != nil || err != nil {
		if err != nil {
			return err
		}
		return ss.reply(e)
	}
	bs := ss.be.Stmt(query)
	if bs == nil {
		var err error
		if bs, err = ss.be.Prepare(query); err != nil {
			if me, ok := err.(*mysqlwire.Error); ok {
				return ss.reply(me)
			}
			ss.sendErr(lostBackend(ss.user.group, err))
			return errSessionEnd
		}
	}
	ss.nextStmt++
	if ss.nextStmt == 0 {
		ss.nextStmt = 1
	}
	id := ss.nextStmt
	st := &prepared{plan: ss.s.plans.Plan(query), query: query, params: bs.Params, columns: bs.Columns}
	if ss.cachesMetadata() {
		st.defs = bs.Defs
	}
	first := true
	var err error
	perr := backend.Payloads(bs.Reply, func(q []byte) bool {
		if first { // PREPARE_OK: the client gets keyway's id
			first = false
			err = ss.c.Finish(append(binary.LittleEndian.AppendUint32(append(ss.c.Begin(), q[0]), id), q[5:]...))
		} else {
			err = ss.c.WritePacket(q)
		}
		return err == nil
	})
	if err == nil {
		err = perr
	}
	if err != nil {
		return err
	}
	if ss.stmts == nil {
		ss.stmts = make(map[uint32]*prepared)
	}
	ss.stmts[id] = st
	return ss.c.Flush()
}

// cachesMetadata reports whether the client negotiated MariaDB's metadata cache.
func (ss *session) cachesMetadata() bool {
	return ss.c.ExtCapabilities&mysqlwire.MariaCacheMetadata != 0
}

// execute runs COM_STMT_EXECUTE of st, counted under its digest: from the result cache when route says so and the
// execute is one the cache can answer, else on a borrowed connection.
func (ss *session) execute(p []byte, st *prepared) error {
	start := time.Now()
	plan := st.plan
	st.noteTypes(p)
	if ss.s.shardMap() != nil {
		g, e := ss.shardGroup(plan, &routeValues{sql: st.query, st: st, params: ss.routeParams(st, p), plans: ss.s.plans})
		if e != nil {
			ss.record(plan, 0, time.Since(start), true)
			return ss.reply(e)
		}
		ss.shard = g
		defer func() { ss.shard = nil }()
	}
	if ss.s.opts.Cache != nil {
		if h := ss.hintFor(st.query, plan); ss.route(plan, h) == toCache {
			if params, ok := executeParams(st, p); ok {
				st.longData = false
				key := ss.cacheKey('E', st.query, params[:]...)
				ks := keySource{st: st, params: key[len(key)-len(params[0])-len(params[1])-len(params[2]):]}
				rows, failed, err := ss.throughCache(p, plan, st, key, ks, h.ttl, relay.executeResults)
				ss.record(plan, rows, time.Since(start), failed || err != nil)
				return err
			}
		}
	}
	longData := st.longData
	st.longData = false
	rows, failed, err := ss.exchange(p, plan, st, relay.executeResults, toClient)
	// The execute consumed the long data; a cursor it opened stays open for COM_STMT_FETCH (an execute's flags
	// byte follows the statement id).
	cursor := err == nil && !failed && len(p) > 5 && p[5] != 0
	if cursor != st.cursor || longData {
		st.cursor = cursor
		ss.notePreparedPins()
	}
	ss.record(plan, rows, time.Since(start), failed || err != nil)
	return err
}

// onConnection returns the COM_STMT_* packet p of st as the connection the session holds must get it: with the
// id of the statement prepared there (preparing it now if it is not), and for an execute, with the parameter types
// the server needs (forBackend). It also arranges, for a client with the metadata cache, that the execute's reply
// gives the client the column definitions where it holds others (ss.exec). A refusal of the prepare is the
// client's reply (e); an I/O failure has been told the client and ends the session.
func (ss *session) onConnection(st *prepared, p []byte) (q []byte, e *mysqlwire.Error, err error) {
	be := ss.be
	bs := be.Stmt(st.query)
	if bs == nil {
		if bs, err = be.Prepare(st.query); err != nil {
			if me, ok := err.(*mysqlwire.Error); ok {
				return nil, me, nil
			}
			ss.sendErr(lostBackend(ss.user.group, err))
			return nil, nil, errSessionEnd
		}
	}
	binary.LittleEndian.PutUint32(p[1:], bs.ID) // the client's packet buffer, read again only for the flags
	ss.exec = execState{st: st, bs: bs}
	if p[0] != comStmtExecute {
		return p, nil, nil
	}
	if ss.cachesMetadata() && !bytes.Equal(bs.Defs, st.defs) {
		ss.exec.sendDefs = true
	}
	return forBackend(st, bs, p), nil, nil
}

// execState is what the relay of an execute's reply needs of the statement it runs (see onConnection).
type execState struct {
	st *prepared
	bs *backend.Stmt
	// sendDefs: the client holds other column definitions than the statement's last on the connection: the
	// reply must carry bs.Defs if the server leaves them out.
	sendDefs bool
}

// executeColumns relays the column count of an execute's result set for a client with MariaDB's metadata
// cache, when keyway must step in: the server leaves out definitions the client does not hold (they are sent, and
// the metadata-follows flag set), or sends new ones (they are kept as the statement's and the client's). It
// reports whether it relayed the column count and definitions (the caller goes on with the EOF or rows), and
// the column count packet's leading bytes.
func (r relay) executeColumns() (bool, error) {
	ss := r.ss
	be, x := r.be, ss.exec
	st := x.st
	n, hd, err := be.PeekHead(okHead)
	if err != nil || x.bs == nil || len(hd) == 0 || n >= mysqlwire.MaxPayload ||
		hd[0] == mysqlwire.HeaderOK || hd[0] == mysqlwire.HeaderERR {
		return false, err
	}
	cols, defs, ok := mysqlwire.ReadColumnCount(hd, r.ss.c.ExtCapabilities)
	if !ok || (!defs && !x.sendDefs) {
		return false, nil // the usual case: relayed as any packet
	}
	p, err := be.ReadPacket()
	if err != nil {
		return false, err
	}
	be.SpoilCapture() // read, not relayed: a reply keyway edits is not kept for the cache
	if !defs {
		_, k, _ := mysqlwire.ReadLenEnc(p)
		p[k] = 1 // metadata follows
		if err := r.ss.writeClient(p); err != nil {
			return false, err
		}
		if err := backend.Payloads(x.bs.Defs, func(d []byte) bool { err = r.ss.writeClient(d); return err == nil }); err != nil {
			return false, err
		}
		st.defs = x.bs.Defs
		return true, err
	}
	if err := r.ss.writeClient(p); err != nil {
		return false, err
	}
	var fresh []byte
	for range cols {
		d, err := be.ReadPacket()
		if err != nil {
			return false, err
		}
		fresh = append(append(fresh, byte(len(d)), byte(len(d)>>8), byte(len(d)>>16)), d...)
		if err := r.ss.writeClient(d); err != nil {
			return false, err
		}
	}
	x.bs.SetDefs(fresh)
	st.defs = fresh
	return true, nil
}

// writeClient writes one packet to where relayed replies go (nowhere while draining).
func (ss *session) writeClient(p []byte) error {
	ss.relayedPkts++
	if ss.dst == nil {
		return nil
	}
	if err := ss.dst.WritePacket(p); err != nil {
		return &mysqlwire.WriteError{Err: err}
	}
	return nil
}

// forBackend returns the execute p as the server must get it for statement bs. A client binds parameter types
// once (the first execute) and omits them after; the statement on this connection may have none, or another
// session's: when they differ from the client's, they are added (new-params-bound set, types inserted).
func forBackend(st *prepared, bs *backend.Stmt, p []byte) []byte {
	if st.params == 0 {
		return p
	}
	off := 10 + (st.params+7)/8 // cmd, id, flags, iterations, null bitmap: then the new-params-bound flag
	switch {
	case len(p) <= off:
		return p
	case p[off] == 1:
		bs.Types = append(bs.Types[:0], st.types...) // noteTypes read them from p
		return p
	case st.types == nil || bytes.Equal(bs.Types, st.types):
		return p
	}
	q := make([]byte, 0, len(p)+len(st.types))
	q = append(append(append(append(q, p[:off]...), 1), st.types...), p[off+1:]...)
	bs.Types = append(bs.Types[:0], st.types...)
	return q
}
