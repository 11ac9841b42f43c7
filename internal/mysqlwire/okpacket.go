package mysqlwire

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/go-mysql-org/go-mysql/mysql"
)

// This file reads OK packets whole: counts, status, info and the session-state changes a server reports under
// CLIENT_SESSION_TRACK, and rewrites an OK packet for a client that did not ask for session tracking.
//
// Who uses it: the SQL door's per-statement leases (issue 39) learn each tracked variable's resulting value from the
// OK packets of a backend connection that always negotiates CLIENT_SESSION_TRACK, and strip the session state out
// before relaying an OK packet to a client that did not negotiate it; the replica work reads the GTID a write left
// (MariaDB's last_gtid system variable, MySQL's SESSION_TRACK_GTIDS). Nothing in the proxy calls it yet.
//
// Why not go-mysql's decoder: go-mysql (client/resp.go, decodeSessionTracking) parses session tracking only inside
// its own client Conn (unexported), into a map of strings (allocations per packet), indexes the packet without
// bounds checks (a short or hostile packet panics), fails on an unknown entry type instead of skipping it, and does
// not read SESSION_TRACK_STATE_CHANGE's length-encoded value. keyway takes its constants and reads the bytes itself
// with the length-encoded helpers of proto.go.

// StatusSessionStateChanged (SERVER_SESSION_STATE_CHANGED) says an OK packet carries session-state changes; servers
// set it only for a client that negotiated CLIENT_SESSION_TRACK.
const StatusSessionStateChanged = mysql.SERVER_SESSION_STATE_CHANGED

// Session-state entry types (the first byte of each entry in an OK packet's session-state block).
const (
	SessionTrackSystemVariables = mysql.SESSION_TRACK_SYSTEM_VARIABLES // name and value of a system variable
	SessionTrackSchema          = mysql.SESSION_TRACK_SCHEMA           // the default database
	// SessionTrackStateChange is session_track_state_change: "1" when any session state changed.
	SessionTrackStateChange = mysql.SESSION_TRACK_STATE_CHANGE
	// SessionTrackGTIDs is MySQL's GTID entry (session_track_gtids). MariaDB reports GTIDs as the system variable
	// last_gtid instead, when session_track_system_variables names it.
	SessionTrackGTIDs                      = mysql.SESSION_TRACK_GTIDS
	SessionTrackTransactionCharacteristics = mysql.SESSION_TRACK_TRANSACTION_CHARACTERISTICS
	SessionTrackTransactionState           = mysql.SESSION_TRACK_TRANSACTION_STATE
)

// ErrMalformedOK is wrapped by every error ParseOK and OK.SessionChanges return for bytes that are not a
// well-formed OK packet.
var ErrMalformedOK = fmt.Errorf("%w: OK packet", ErrMalformed)

// OK is an OK packet decoded by ParseOK. Its byte slices point into the packet: valid as long as the packet's
// buffer is (ReadPacket's until the next read).
type OK struct {
	Header       byte // HeaderOK, or HeaderEOF for the OK that ends a result set under CLIENT_DEPRECATE_EOF
	AffectedRows uint64
	LastInsertID uint64
	Status       uint16
	Warnings     uint16
	Info         []byte // human-readable information ("Rows matched: 1  Changed: 1  Warnings: 0"); often empty
	// SessionState is the session-state block: its entries, without the block's own length. Empty unless
	// CLIENT_SESSION_TRACK was negotiated and Status has StatusSessionStateChanged; read it with SessionChanges.
	SessionState []byte

	statusAt int // offset of the status flags in the packet
	infoEnd  int // offset just past the info field (its length prefix included); == statusAt+4 when absent
}

// SessionChange is one session-state entry of an OK packet. Its slices point into the packet.
type SessionChange struct {
	Type byte // SessionTrack*
	// Name is the system variable's name (SessionTrackSystemVariables); nil for the other types.
	Name []byte
	// Value is the variable's value, the schema's name, the state-change flag ("1"), the GTID set, the
	// transaction characteristics (statements such as "SET TRANSACTION ISOLATION LEVEL …;") or the transaction
	// state (8 characters, MySQL), as the server wrote it.
	Value []byte
}

// ParseOK decodes an OK payload (starting with HeaderOK, or HeaderEOF for the result-set terminator under
// CLIENT_DEPRECATE_EOF: the caller tells that one from a classic EOF) for a connection with capabilities caps
// (CLIENT_PROTOCOL_41 assumed, as keyway always negotiates it). It allocates nothing; malformed input is an error
// wrapping ErrMalformedOK, never a panic.
//
// The info field: with CLIENT_SESSION_TRACK it is a length-encoded string, present when the server has a message or
// session state follows. Without it the protocol documentation calls it string<EOF>, but MariaDB and MySQL both write
// it length-encoded (net_send_ok's net_store_data) and libmariadb and libmysqlclient read it so; ParseOK reads it
// length-encoded when the rest of the packet is exactly one such string, and otherwise takes the rest as the info.
func ParseOK(p []byte, caps uint32) (OK, error) {
	var ok OK
	if len(p) == 0 || (p[0] != HeaderOK && p[0] != HeaderEOF) {
		return ok, fmt.Errorf("%w: no OK header", ErrMalformedOK)
	}
	ok.Header = p[0]
	at := 1
	var k int
	var fine bool
	if ok.AffectedRows, k, fine = ReadLenEnc(p[at:]); !fine {
		return ok, fmt.Errorf("%w: affected rows", ErrMalformedOK)
	}
	at += k
	if ok.LastInsertID, k, fine = ReadLenEnc(p[at:]); !fine {
		return ok, fmt.Errorf("%w: last insert id", ErrMalformedOK)
	}
	at += k
	if len(p)-at < 4 {
		return ok, fmt.Errorf("%w: status and warnings", ErrMalformedOK)
	}
	ok.statusAt = at
	ok.Status = binary.LittleEndian.Uint16(p[at:])
	ok.Warnings = binary.LittleEndian.Uint16(p[at+2:])
	at += 4
	ok.infoEnd = at
	rest := p[at:]
	if len(rest) == 0 {
		return ok, nil
	}
	if caps&ClientSessionTrack == 0 {
		info, after, fine := readLenEncString(rest)
		if fine && len(after) == 0 {
			ok.Info = info
		} else {
			ok.Info = rest
		}
		ok.infoEnd = len(p)
		return ok, nil
	}
	info, after, fine := readLenEncString(rest)
	if !fine {
		return ok, fmt.Errorf("%w: info", ErrMalformedOK)
	}
	ok.Info = info
	ok.infoEnd = len(p) - len(after)
	if ok.Status&StatusSessionStateChanged == 0 {
		if len(after) != 0 {
			return ok, fmt.Errorf("%w: %d bytes after the info", ErrMalformedOK, len(after))
		}
		return ok, nil
	}
	if len(after) == 0 { // the flag without a block: nothing changed that the client tracks
		return ok, nil
	}
	state, after, fine := readLenEncString(after)
	if !fine {
		return ok, fmt.Errorf("%w: session-state length", ErrMalformedOK)
	}
	if len(after) != 0 {
		return ok, fmt.Errorf("%w: %d bytes after the session state", ErrMalformedOK, len(after))
	}
	ok.SessionState = state
	return ok, nil
}

// errStop ends SessionChanges early when fn returns false.
var errStop = errors.New("stop")

// SessionChanges calls fn for each session-state entry of the packet, in the server's order, until fn returns
// false. Entries of types keyway does not know are skipped by their length. A system-variable entry holding several
// name/value pairs gives one call per pair. Malformed entries are an error wrapping ErrMalformedOK (the entries
// before it have been visited). It allocates nothing.
func (ok *OK) SessionChanges(fn func(SessionChange) bool) error {
	b := ok.SessionState
	for len(b) > 0 {
		typ := b[0]
		data, rest, fine := readLenEncString(b[1:])
		if !fine {
			return fmt.Errorf("%w: session-state entry of type %d overruns the block", ErrMalformedOK, typ)
		}
		b = rest
		if err := visitEntry(typ, data, fn); err != nil {
			if err == errStop {
				return nil
			}
			return err
		}
	}
	return nil
}

// visitEntry decodes one session-state entry's data and hands its values to fn.
func visitEntry(typ byte, data []byte, fn func(SessionChange) bool) error {
	switch typ {
	case SessionTrackSystemVariables:
		for len(data) > 0 {
			name, rest, fine := readLenEncString(data)
			if !fine {
				return fmt.Errorf("%w: system variable name", ErrMalformedOK)
			}
			value, rest, fine := readLenEncString(rest)
			if !fine {
				return fmt.Errorf("%w: value of system variable %q", ErrMalformedOK, name)
			}
			data = rest
			if !fn(SessionChange{Type: typ, Name: name, Value: value}) {
				return errStop
			}
		}
		return nil
	case SessionTrackGTIDs:
		// One byte of encoding specification (0: the GTID set as text), then the set.
		if len(data) == 0 || data[0] != 0 {
			return fmt.Errorf("%w: GTID entry without encoding 0", ErrMalformedOK)
		}
		data = data[1:]
	case SessionTrackSchema, SessionTrackStateChange, SessionTrackTransactionCharacteristics,
		SessionTrackTransactionState:
	default:
		return nil // unknown: skipped by its length
	}
	value, rest, fine := readLenEncString(data)
	if typ == SessionTrackStateChange && (!fine || len(rest) != 0) {
		value, fine, rest = data, true, nil // MariaDB writes the flag ("1") bare, without a length
	}
	if !fine || len(rest) != 0 {
		return fmt.Errorf("%w: session-state entry of type %d", ErrMalformedOK, typ)
	}
	if !fn(SessionChange{Type: typ, Value: value}) {
		return errStop
	}
	return nil
}

// StripSessionState rewrites, in place, an OK payload that a server sent on a connection with CLIENT_SESSION_TRACK
// into the one it sends a client without it: the session-state block and the StatusSessionStateChanged flag go;
// header, counts, the other status flags, warnings and the info (length-encoded, as servers write it either way; left
// out when empty) stay byte for byte. It returns p shortened (no allocation, no copy), or an error wrapping
// ErrMalformedOK with p untouched. A packet without session state comes back as it was, but for an empty info that a
// server writes only when session state follows.
//
// The SQL door calls it on OK packets it relays from a tracking backend connection to a client that did not
// negotiate CLIENT_SESSION_TRACK (issue 39).
func StripSessionState(p []byte) ([]byte, error) {
	ok, err := ParseOK(p, ClientSessionTrack)
	if err != nil {
		return p, err
	}
	binary.LittleEndian.PutUint16(p[ok.statusAt:], ok.Status&^StatusSessionStateChanged)
	if len(ok.Info) == 0 {
		return p[:ok.statusAt+4], nil
	}
	return p[:ok.infoEnd], nil
}
