package sqlproxy

import (
	"errors"

	"github.com/keywaydb/keyway/internal/backend"
	"github.com/keywaydb/keyway/internal/mysqlwire"
)

// This file streams backend replies to the client: a relay reads one reply from the backend connection it was given
// (the one the statement borrowed) and writes it where the session's replies go. Each function reads exactly one reply of the kind its command
// produces and stops at its last packet, so the next command starts on a clean stream. They return the rows passed
// (counted, not decoded), whether the reply was an ERR, and an I/O or protocol error (a *mysqlwire.WriteError when
// the client side failed).

// relay streams one reply from be, the backend connection the command ran on, for session ss.
type relay struct {
	ss *session
	be *backend.Conn
}

// pkt relays one packet from the backend to ss.dst and returns its length and leading bytes. Before blocking on
// the backend it flushes what the client has not yet received, so a slow result still streams.
func (r relay) pkt() (int, []byte, error) {
	if err := r.flushBeforeWait(); err != nil {
		return 0, nil, err
	}
	r.ss.relayedPkts++
	n, h, err := r.be.RelayPacket(r.ss.dst, r.ss.head[:])
	if err != nil {
		return n, nil, err
	}
	if n == 0 {
		return 0, nil, nil
	}
	return n, r.ss.head[:h], nil
}

// flushBeforeWait flushes what the client has not yet received when the backend's next packet is not buffered.
func (r relay) flushBeforeWait() error {
	if r.ss.dst != nil && r.be.Buffered() < 4 && r.ss.dst.Pending() > 0 {
		if err := r.ss.dst.Flush(); err != nil {
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
func (r relay) pktOK(okHeader byte) (int, []byte, error) {
	if err := r.flushBeforeWait(); err != nil {
		return 0, nil, err
	}
	be := r.be
	n, hd, err := be.PeekHead(okHead)
	if err != nil {
		return 0, nil, err
	}
	if len(hd) == 0 || hd[0] != okHeader || n >= mysqlwire.MaxPayload {
		return r.pkt()
	}
	if st, ok := mysqlwire.OKStatus(hd); !ok || st&mysqlwire.StatusSessionStateChanged == 0 {
		n, first, err := r.pkt()
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
	r.ss.noteState(note)
	if r.ss.c.Capabilities&mysqlwire.ClientSessionTrack == 0 {
		if p, err = mysqlwire.StripSessionState(p); err != nil {
			return 0, nil, err
		}
	}
	h := copy(r.ss.head[:], p)
	r.ss.relayedPkts++
	if r.ss.dst != nil {
		if err := r.ss.dst.WritePacket(p); err != nil {
			return 0, nil, &mysqlwire.WriteError{Err: err}
		}
	}
	return len(p), r.ss.head[:h], nil
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
func (r relay) terminatorStatus(first []byte) uint16 {
	var st, w uint16
	if r.ss.deprecateEOF {
		st, _ = mysqlwire.OKStatus(first)
		w, _ = mysqlwire.OKWarnings(first)
	} else {
		st, _ = mysqlwire.EOFStatus(first)
		w, _ = mysqlwire.EOFWarnings(first)
	}
	r.ss.warned = r.ss.warned || w > 0
	return st
}

// one relays a one-packet reply (OK, ERR, EOF or a string).
func (r relay) one() (int64, bool, error) {
	n, first, err := r.pktOK(mysqlwire.HeaderOK)
	if err != nil {
		return 0, false, err
	}
	switch {
	case isErr(n, first):
		return 0, true, nil
	case len(first) > 0 && first[0] == mysqlwire.HeaderOK:
		r.be.Status, _ = mysqlwire.OKStatus(first)
	case isTerminator(n, first) && len(first) >= 5:
		r.be.Status, _ = mysqlwire.EOFStatus(first)
	}
	return 0, false, nil
}

// queryResults relays the reply to COM_QUERY: one or more results (OK, ERR, result set, LOCAL INFILE).
func (r relay) queryResults() (int64, bool, error) { return r.results(true) }

// executeResults relays the reply to COM_STMT_EXECUTE: binary result sets; a cursor's reply has no rows.
func (r relay) executeResults() (int64, bool, error) { return r.results(false) }

func (r relay) results(query bool) (rows int64, failed bool, err error) {
	r.ss.warned = false
	for {
		if query {
			n, hd, err := r.be.PeekHead(1)
			if err != nil {
				return rows, failed, err
			}
			if n > 0 && hd[0] == mysqlwire.HeaderLocalInfile {
				refused, err := r.localInfile()
				if err != nil || refused {
					return rows, true, err
				}
				continue // the statement's OK or ERR follows
			}
		}
		relayed := false // the column count and definitions, by relay.executeColumns
		if !query && r.ss.exec.bs != nil && r.ss.cachesMetadata() {
			if relayed, err = r.executeColumns(); err != nil {
				return rows, failed, err
			}
		}
		if !relayed {
			n, first, err := r.pktOK(mysqlwire.HeaderOK)
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
					r.ss.warned = true
				}
				r.be.Status = st
				if st&mysqlwire.StatusMoreResultsExists != 0 {
					continue
				}
				return rows, failed, nil
			case isErr(n, first):
				return rows, true, nil
			}
			cols, defs, ok := mysqlwire.ReadColumnCount(first, r.ss.c.ExtCapabilities)
			if !ok || cols == 0 {
				return rows, failed, errUnexpected("as a column count", first)
			}
			if !defs {
				cols = 0 // the client has them (MariaDB's metadata cache): none follow
			}
			for i := uint64(0); i < cols; i++ {
				if _, _, err := r.pkt(); err != nil {
					return rows, failed, err
				}
			}
		}
		if !r.ss.deprecateEOF {
			n, first, err := r.pkt()
			if err != nil {
				return rows, failed, err
			}
			if !isTerminator(n, first) {
				return rows, failed, errUnexpected("after column definitions (want EOF)", first)
			}
			st := r.terminatorStatus(first)
			if st&mysqlwire.StatusCursorExists != 0 {
				// A cursor was opened: the rows come with COM_STMT_FETCH.
				r.be.Status = st
				if st&mysqlwire.StatusMoreResultsExists != 0 {
					continue
				}
				return rows, failed, nil
			}
		}
		n, st, bad, err := r.rowsToEnd()
		rows += n
		if err != nil || bad {
			return rows, bad, err
		}
		r.be.Status = st
		if st&mysqlwire.StatusMoreResultsExists == 0 {
			return rows, failed, nil
		}
	}
}

// scatterPart relays one shard's reply to a SELECT that runs on every shard (shardroute.go, scatter): the result
// header and column definitions only from the first shard (the others are read and dropped: every shard has the
// same table), the rows of every shard, the terminator only from the last, so the client sees one result set. An
// ERR from any shard goes to the client and ends the reply.
func (r relay) scatterPart(first, last bool) (rows int64, failed bool, err error) {
	client := r.ss.dst
	defer func() { r.ss.dst = client }()
	n, hd, err := r.be.PeekHead(okHead)
	if err != nil {
		return 0, false, err
	}
	if isErr(n, hd) {
		_, _, err = r.pkt()
		return 0, true, err
	}
	if !first {
		r.ss.dst = nil
	}
	_, head, err := r.pktOK(mysqlwire.HeaderOK)
	if err != nil {
		return 0, false, err
	}
	cols, defs, ok := mysqlwire.ReadColumnCount(head, r.ss.c.ExtCapabilities)
	if !ok || cols == 0 {
		return 0, false, errUnexpected("as a scattered SELECT's column count", head)
	}
	if !defs {
		cols = 0 // the client has them (MariaDB's metadata cache): none follow, as in results
	}
	for i := uint64(0); i < cols; i++ {
		if _, _, err := r.pkt(); err != nil {
			return 0, false, err
		}
	}
	if !r.ss.deprecateEOF {
		if n, first, err := r.pkt(); err != nil || !isTerminator(n, first) {
			return 0, false, cmpErr(err, errUnexpected("after column definitions (want EOF)", first))
		}
	}
	r.ss.dst = client
	for {
		n, hd, err := r.be.PeekHead(okHead)
		if err != nil {
			return rows, false, err
		}
		term := isTerminator(n, hd)
		if term && !last {
			r.ss.dst = nil
		}
		if term && r.ss.deprecateEOF {
			_, hd, err = r.pktOK(mysqlwire.HeaderEOF)
		} else {
			_, hd, err = r.pkt()
		}
		switch {
		case err != nil:
			return rows, false, err
		case term:
			r.be.Status = r.terminatorStatus(hd)
			return rows, false, nil
		case isErr(n, hd):
			return rows, true, nil
		}
		rows++
	}
}

// cmpErr is err, else alt.
func cmpErr(err, alt error) error {
	if err != nil {
		return err
	}
	return alt
}

// rowsToEnd relays rows until the terminator (returning its status) or an ERR (bad).
func (r relay) rowsToEnd() (rows int64, status uint16, bad bool, err error) {
	for {
		var n int
		var first []byte
		if r.ss.deprecateEOF {
			n, first, err = r.pktOK(mysqlwire.HeaderEOF) // the terminator is an OK
		} else {
			n, first, err = r.pkt()
		}
		if err != nil {
			return rows, 0, false, err
		}
		if isTerminator(n, first) {
			return rows, r.terminatorStatus(first), false, nil
		}
		if isErr(n, first) {
			return rows, 0, true, nil
		}
		rows++
	}
}

// rows relays the reply to COM_STMT_FETCH: rows, then a terminator (or an ERR).
func (r relay) rows() (int64, bool, error) {
	rows, st, bad, err := r.rowsToEnd()
	if err == nil && !bad {
		r.be.Status = st
	}
	return rows, bad, err
}

// fieldList relays the reply to COM_FIELD_LIST: column definitions, then EOF (or an ERR).
func (r relay) fieldList() (int64, bool, error) {
	for {
		n, first, err := r.pkt()
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
func (r relay) localInfile() (refused bool, err error) {
	if r.ss.s.opts.AllowLocalInfile && r.ss.dst != nil {
		if _, _, err := r.pkt(); err != nil {
			return false, err
		}
		if err := r.ss.c.Flush(); err != nil {
			return false, &mysqlwire.WriteError{Err: err}
		}
		for {
			n, _, err := r.ss.c.RelayPacket(r.be.Conn, nil) // client → backend
			if err != nil {
				r.be.MarkBroken()
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
		if err := r.be.Flush(); err != nil {
			return false, err
		}
		return false, nil
	}
	saved := r.ss.dst
	r.ss.dst = discard.conn(r.ss) // the client must not see what the backend sends for the refused transfer
	defer func() { r.ss.dst = saved }()
	if _, _, err := r.pkt(); err != nil { // consume the request
		return true, err
	}
	if err := r.be.WritePacket(nil); err != nil {
		return true, err
	}
	if err := r.be.Flush(); err != nil {
		return true, err
	}
	if _, _, err := r.results(true); err != nil {
		return true, err
	}
	r.ss.dst = saved
	if saved != nil {
		if err := saved.Finish(mysqlwire.AppendError(saved.Begin(), mysqlwire.NewError(mysqlwire.ERNotAllowedCommand, "42000",
			"keyway: LOAD DATA LOCAL INFILE is refused: set allow_local_infile = true in [sql] to let keyway relay it"))); err != nil {
			return true, &mysqlwire.WriteError{Err: err}
		}
	}
	return true, nil
}
