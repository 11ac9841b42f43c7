package sqlproxy

import (
	"errors"

	"github.com/keywaydb/keyway/internal/backend"
	"github.com/keywaydb/keyway/internal/mysqlwire"
)

// This file streams backend replies to the client. Each function reads exactly one reply of the kind its command
// produces and stops at its last packet, so the next command starts on a clean stream. They return the rows passed
// (counted, not decoded), whether the reply was an ERR, and an I/O or protocol error (a *mysqlwire.WriteError when
// the client side failed).

// pkt relays one packet from the backend to ss.dst and returns its length and leading bytes. Before blocking on
// the backend it flushes what the client has not yet received, so a slow result still streams.
func (ss *session) pkt() (int, []byte, error) {
	if err := ss.flushBeforeWait(); err != nil {
		return 0, nil, err
	}
	ss.relayedPkts++
	n, h, err := ss.be.RelayPacket(ss.dst, ss.head[:])
	if err != nil {
		return n, nil, err
	}
	if n == 0 {
		return 0, nil, nil
	}
	return n, ss.head[:h], nil
}

// flushBeforeWait flushes what the client has not yet received when the backend's next packet is not buffered.
func (ss *session) flushBeforeWait() error {
	if ss.dst != nil && ss.be.Buffered() < 4 && ss.dst.Pending() > 0 {
		if err := ss.dst.Flush(); err != nil {
			return &mysqlwire.WriteError{Err: err}
		}
	}
	return nil
}

// okHead is enough of an OK packet's leading bytes for its status flags: header, two length-encoded counts, status.
const okHead = 1 + 9 + 9 + 2

// pktOK relays the next packet where an OK packet may come: a reply's first packet (okHeader HeaderOK) or, under
// CLIENT_DEPRECATE_EOF, the packet that ends a result set's rows (HeaderEOF). An OK's session-state changes (the
// backend connection always tracks them, state.go in package backend) are recorded on the connection and in the
// session's pins (noteState), and left out for a client that did not negotiate session tracking; its insert id
// becomes the session's LAST_INSERT_ID(). Any other packet is relayed as pkt does.
func (ss *session) pktOK(okHeader byte) (int, []byte, error) {
	if err := ss.flushBeforeWait(); err != nil {
		return 0, nil, err
	}
	be := ss.be
	n, hd, err := be.PeekHead(okHead)
	if err != nil {
		return 0, nil, err
	}
	if len(hd) == 0 || hd[0] != okHeader || n >= mysqlwire.MaxPayload {
		return ss.pkt()
	}
	if st, ok := mysqlwire.OKStatus(hd); !ok || st&mysqlwire.StatusSessionStateChanged == 0 {
		n, first, err := ss.pkt()
		if err == nil {
			if ok, perr := mysqlwire.ParseOK(first, 0); perr == nil {
				be.NoteInsertID(ok.LastInsertID)
			}
		}
		return n, first, err
	}
	p, err := be.ReadPacket()
	if err != nil {
		return 0, nil, err
	}
	be.SpoilCapture() // read whole, not relayed: a reply that changes the session is not one to cache anyway
	note, err := be.NoteOK(p)
	if err != nil {
		return 0, nil, err
	}
	ss.noteState(note)
	if ss.c.Capabilities&mysqlwire.ClientSessionTrack == 0 {
		if p, err = mysqlwire.StripSessionState(p); err != nil {
			return 0, nil, err
		}
	}
	h := copy(ss.head[:], p)
	ss.relayedPkts++
	if ss.dst != nil {
		if err := ss.dst.WritePacket(p); err != nil {
			return 0, nil, &mysqlwire.WriteError{Err: err}
		}
	}
	return len(p), ss.head[:h], nil
}

// noteState pins the session for state the server reported that keyway cannot carry to another connection.
func (ss *session) noteState(n backend.Note) {
	if n.Untracked != "" {
		ss.s.log.Debug("sql: a session variable keyway does not carry was set; the session is pinned", "session", ss.id, "variable", n.Untracked)
		ss.pin.set |= pinSet(PinVariable)
	}
	if n.Unexplained {
		ss.pin.set |= pinSet(PinSessionState)
	}
}

// isTerminator tells the EOF packet (or, under CLIENT_DEPRECATE_EOF, the OK packet with an 0xfe header) that ends
// rows or column definitions: a row starting with 0xfe would be at least 16 MiB long.
func isTerminator(n int, first []byte) bool {
	return len(first) > 0 && first[0] == mysqlwire.HeaderEOF && n < mysqlwire.MaxPayload
}

func isErr(n int, first []byte) bool {
	return len(first) > 0 && first[0] == mysqlwire.HeaderERR && n < mysqlwire.MaxPayload
}

// terminatorStatus reads the status flags of a terminator, and notes whether it carries warnings.
func (ss *session) terminatorStatus(first []byte) uint16 {
	var st, w uint16
	if ss.deprecateEOF {
		st, _ = mysqlwire.OKStatus(first)
		w, _ = mysqlwire.OKWarnings(first)
	} else {
		st, _ = mysqlwire.EOFStatus(first)
		w, _ = mysqlwire.EOFWarnings(first)
	}
	ss.warned = ss.warned || w > 0
	return st
}

// relayOne relays a one-packet reply (OK, ERR, EOF or a string).
func (ss *session) relayOne() (int64, bool, error) {
	n, first, err := ss.pktOK(mysqlwire.HeaderOK)
	if err != nil {
		return 0, false, err
	}
	switch {
	case isErr(n, first):
		return 0, true, nil
	case len(first) > 0 && first[0] == mysqlwire.HeaderOK:
		ss.be.Status, _ = mysqlwire.OKStatus(first)
	case isTerminator(n, first) && len(first) >= 5:
		ss.be.Status, _ = mysqlwire.EOFStatus(first)
	}
	return 0, false, nil
}

// relayQueryResults relays the reply to COM_QUERY: one or more results (OK, ERR, result set, LOCAL INFILE).
func (ss *session) relayQueryResults() (int64, bool, error) { return ss.relayResults(true) }

// relayExecuteResults relays the reply to COM_STMT_EXECUTE: binary result sets; a cursor's reply has no rows.
func (ss *session) relayExecuteResults() (int64, bool, error) { return ss.relayResults(false) }

func (ss *session) relayResults(query bool) (rows int64, failed bool, err error) {
	ss.warned = false
	for {
		if query {
			n, hd, err := ss.be.PeekHead(1)
			if err != nil {
				return rows, failed, err
			}
			if n > 0 && hd[0] == mysqlwire.HeaderLocalInfile {
				refused, err := ss.localInfile()
				if err != nil || refused {
					return rows, true, err
				}
				continue // the statement's OK or ERR follows
			}
		}
		relayed := false // the column count and definitions, by relayExecuteColumns
		if !query && ss.exec.bs != nil && ss.cachesMetadata() {
			if relayed, err = ss.relayExecuteColumns(); err != nil {
				return rows, failed, err
			}
		}
		if !relayed {
			n, first, err := ss.pktOK(mysqlwire.HeaderOK)
			if err != nil {
				return rows, failed, err
			}
			if len(first) == 0 {
				return rows, failed, errUnexpected("as a result header", first)
			}
			switch {
			case first[0] == mysqlwire.HeaderOK:
				st, _ := mysqlwire.OKStatus(first)
				if w, _ := mysqlwire.OKWarnings(first); w > 0 {
					ss.warned = true
				}
				ss.be.Status = st
				if st&mysqlwire.StatusMoreResultsExists != 0 {
					continue
				}
				return rows, failed, nil
			case isErr(n, first):
				return rows, true, nil
			}
			cols, defs, ok := mysqlwire.ReadColumnCount(first, ss.c.ExtCapabilities)
			if !ok || cols == 0 {
				return rows, failed, errUnexpected("as a column count", first)
			}
			if !defs {
				cols = 0 // the client has them (MariaDB's metadata cache): none follow
			}
			for i := uint64(0); i < cols; i++ {
				if _, _, err := ss.pkt(); err != nil {
					return rows, failed, err
				}
			}
		}
		if !ss.deprecateEOF {
			n, first, err := ss.pkt()
			if err != nil {
				return rows, failed, err
			}
			if !isTerminator(n, first) {
				return rows, failed, errUnexpected("after column definitions (want EOF)", first)
			}
			st := ss.terminatorStatus(first)
			if st&mysqlwire.StatusCursorExists != 0 {
				// A cursor was opened: the rows come with COM_STMT_FETCH.
				ss.be.Status = st
				if st&mysqlwire.StatusMoreResultsExists != 0 {
					continue
				}
				return rows, failed, nil
			}
		}
		r, st, bad, err := ss.relayRowsToEnd()
		rows += r
		if err != nil || bad {
			return rows, bad, err
		}
		ss.be.Status = st
		if st&mysqlwire.StatusMoreResultsExists == 0 {
			return rows, failed, nil
		}
	}
}

// relayRowsToEnd relays rows until the terminator (returning its status) or an ERR (bad).
func (ss *session) relayRowsToEnd() (rows int64, status uint16, bad bool, err error) {
	for {
		var n int
		var first []byte
		if ss.deprecateEOF {
			n, first, err = ss.pktOK(mysqlwire.HeaderEOF) // the terminator is an OK
		} else {
			n, first, err = ss.pkt()
		}
		if err != nil {
			return rows, 0, false, err
		}
		if isTerminator(n, first) {
			return rows, ss.terminatorStatus(first), false, nil
		}
		if isErr(n, first) {
			return rows, 0, true, nil
		}
		rows++
	}
}

// relayRows relays the reply to COM_STMT_FETCH: rows, then a terminator (or an ERR).
func (ss *session) relayRows() (int64, bool, error) {
	rows, st, bad, err := ss.relayRowsToEnd()
	if err == nil && !bad {
		ss.be.Status = st
	}
	return rows, bad, err
}

// relayFieldList relays the reply to COM_FIELD_LIST: column definitions, then EOF (or an ERR).
func (ss *session) relayFieldList() (int64, bool, error) {
	for {
		n, first, err := ss.pkt()
		if err != nil {
			return 0, false, err
		}
		if isTerminator(n, first) {
			return 0, false, nil
		}
		if isErr(n, first) {
			return 0, true, nil
		}
	}
}

// localInfile handles the backend's LOCAL INFILE request (0xfb + file name). Allowed, the request goes to the
// client and the file's packets back to the backend, ending with the client's empty packet; the statement's OK or
// ERR then follows on the backend. Refused, keyway ends the transfer itself (an empty packet: "no data"), drains
// whatever the backend still sends for this command, and answers the client with an ERR instead.
func (ss *session) localInfile() (refused bool, err error) {
	if ss.s.opts.AllowLocalInfile && ss.dst != nil {
		if _, _, err := ss.pkt(); err != nil {
			return false, err
		}
		if err := ss.c.Flush(); err != nil {
			return false, &mysqlwire.WriteError{Err: err}
		}
		for {
			n, _, err := ss.c.RelayPacket(ss.be.Conn, nil) // client → backend
			if err != nil {
				ss.be.MarkBroken()
				var we *mysqlwire.WriteError
				if errors.As(err, &we) {
					return false, we.Err // the backend failed
				}
				return false, errSessionEnd // the client failed mid-file
			}
			if n == 0 {
				break
			}
		}
		if err := ss.be.Flush(); err != nil {
			return false, err
		}
		return false, nil
	}
	saved := ss.dst
	ss.dst = discard.conn(ss) // the client must not see what the backend sends for the refused transfer
	defer func() { ss.dst = saved }()
	if _, _, err := ss.pkt(); err != nil { // consume the request
		return true, err
	}
	if err := ss.be.WritePacket(nil); err != nil {
		return true, err
	}
	if err := ss.be.Flush(); err != nil {
		return true, err
	}
	if _, _, err := ss.relayResults(true); err != nil {
		return true, err
	}
	ss.dst = saved
	if saved != nil {
		if err := saved.Finish(mysqlwire.AppendError(saved.Begin(), mysqlwire.NewError(mysqlwire.ERNotAllowedCommand, "42000",
			"keyway: LOAD DATA LOCAL INFILE is refused: set allow_local_infile = true in [sql] to let keyway relay it"))); err != nil {
			return true, &mysqlwire.WriteError{Err: err}
		}
	}
	return true, nil
}
