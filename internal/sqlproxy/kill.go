package sqlproxy

// This file maps KILL statements from keyway's session ids to backend threads.
//
// A client learns its connection id from keyway's handshake (the session id), and that is the id it names in KILL:
// the mariadb client's Ctrl-C opens a second connection and sends KILL QUERY <id>. Relayed unchanged, the id would
// name whatever MariaDB thread has that number — another client's, since every session of a keyway user shares one
// backend user. So keyway, as ProxySQL does, treats the id as a session id:
//
//   - KILL [CONNECTION | QUERY] id names a keyway session. It is allowed when that session is logged in as the same
//     keyway user (MariaDB lets a user kill its own threads); otherwise, or when no session has that id, the answer
//     is ER_NO_SUCH_THREAD, exactly as MariaDB words it, so ids of other users' sessions are not revealed.
//   - Allowed, it runs on the killer's own backend connection as KILL [CONNECTION | QUERY] <backend thread id of the
//     target's current backend connection>, and MariaDB's reply is relayed. The target cannot release that backend
//     connection (to the pool, where another session could take it) while the KILL runs: both hold the target's
//     killMu, so a KILL never reaches a thread that has meanwhile started serving someone else.
//   - A target without a backend connection checked out has no statement to interrupt: KILL QUERY is an OK no-op.
//     KILL CONNECTION also ends the target's client connection, as MariaDB closes a killed connection.
//   - KILL forms keyway cannot map to one session (KILL USER, KILL HARD/SOFT, KILL QUERY ID, a computed id, KILL
//     inside a multi-statement, KILL prepared with COM_STMT_PREPARE) are refused and never relayed.
//
// Not covered: dynamic SQL that reaches KILL inside the backend (PREPARE s FROM 'KILL …', EXECUTE IMMEDIATE, stored
// procedures) still names MariaDB thread ids. Giving each keyway user its own backend user confines that to the
// user's own threads.

import (
	"strconv"

	"github.com/keywaydb/keyway/internal/mysqlwire"
)

// errKillRefused is the answer to a KILL form keyway does not map.
func errKillRefused() *mysqlwire.Error {
	return mysqlwire.NewError(mysqlwire.ERNotSupportedYet, "42000",
		"keyway: this KILL form is refused: keyway maps only KILL [CONNECTION | QUERY] <id> sent alone, where id is a connection id keyway gave (not KILL USER, HARD/SOFT, QUERY ID, a computed id, or KILL among other statements)")
}

func errNoSuchThread(id uint64) *mysqlwire.Error {
	return mysqlwire.NewError(mysqlwire.ERNoSuchThread, "HY000", "Unknown thread id: %d", id)
}

// kill runs a KILL statement (COM_QUERY packet p, plan with Kill set): see the file comment.
func (ss *session) kill(p []byte, plan *Plan) error {
	if plan.Kill == KillRefused {
		return ss.reply(errKillRefused())
	}
	id, ok := ss.s.plans.KillID(string(p[1:]))
	if !ok {
		return ss.reply(errKillRefused())
	}
	t := ss.s.session(id)
	if t == nil {
		return ss.reply(errNoSuchThread(id))
	}
	// The connection the KILL runs on is borrowed before the target is locked: a borrow may wait for the pool, and
	// the target may be about to give its own connection back (which takes its killMu).
	if e, err := ss.lease(nil); err != nil || e != nil {
		if err != nil {
			return err
		}
		return ss.reply(e)
	}
	t.killMu.Lock()
	defer t.killMu.Unlock()
	if t.killUser == "" || t.killUser != ss.hs.User {
		return ss.reply(errNoSuchThread(id))
	}
	if plan.Kill == KillConnection {
		// The target's next read of its client fails and its session ends (a command in flight finishes first:
		// its backend thread is killed just below).
		t.interrupt()
	}
	tbe := t.killBE
	if tbe == nil {
		return ss.reply(nil)
	}
	if tbe.NetConn().RemoteAddr().String() != ss.be.NetConn().RemoteAddr().String() {
		return ss.reply(mysqlwire.NewError(mysqlwire.ERUnknownError, "HY000",
			"keyway: session %d runs on another backend server than this session: KILL it from a session on %s", id, tbe.NetConn().RemoteAddr()))
	}
	q := "KILL CONNECTION "
	if plan.Kill == KillQuery {
		q = "KILL QUERY "
	}
	cmd := strconv.AppendUint(append([]byte{comQuery}, q...), uint64(tbe.Info.ConnectionID), 10)
	_, _, err := ss.exchange(cmd, nil, nil, relay.queryResults, toClient)
	return err
}

// reply answers the command in flight with e, or with OK when e is nil.
func (ss *session) reply(e *mysqlwire.Error) error {
	if e == nil {
		return ss.c.WriteOK(ss.status)
	}
	return ss.c.WriteError(e)
}
