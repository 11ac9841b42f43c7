package mysqlwire

import (
	"encoding/binary"
	"fmt"
	"strconv"

	"github.com/go-mysql-org/go-mysql/mysql"
)

// Capability flags keyway cares about, under the protocol's names (from go-mysql).
const (
	ClientLongPassword      = mysql.CLIENT_LONG_PASSWORD
	ClientFoundRows         = mysql.CLIENT_FOUND_ROWS
	ClientLongFlag          = mysql.CLIENT_LONG_FLAG
	ClientConnectWithDB     = mysql.CLIENT_CONNECT_WITH_DB
	ClientLocalFiles        = mysql.CLIENT_LOCAL_FILES
	ClientIgnoreSpace       = mysql.CLIENT_IGNORE_SPACE
	ClientProtocol41        = mysql.CLIENT_PROTOCOL_41
	ClientInteractive       = mysql.CLIENT_INTERACTIVE
	ClientSSL               = mysql.CLIENT_SSL
	ClientTransactions      = mysql.CLIENT_TRANSACTIONS
	ClientSecureConnection  = mysql.CLIENT_SECURE_CONNECTION
	ClientMultiStatements   = mysql.CLIENT_MULTI_STATEMENTS
	ClientMultiResults      = mysql.CLIENT_MULTI_RESULTS
	ClientPSMultiResults    = mysql.CLIENT_PS_MULTI_RESULTS
	ClientPluginAuth        = mysql.CLIENT_PLUGIN_AUTH
	ClientConnectAttrs      = mysql.CLIENT_CONNECT_ATTRS
	ClientPluginAuthLenenc  = mysql.CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA
	ClientSessionTrack      = mysql.CLIENT_SESSION_TRACK
	ClientDeprecateEOF      = mysql.CLIENT_DEPRECATE_EOF
	ClientCanHandleExpired  = mysql.CLIENT_CAN_HANDLE_EXPIRED_PASSWORDS
	ClientRememberOptions   = mysql.CLIENT_REMEMBER_OPTIONS
	ClientSSLVerifyServerCt = mysql.CLIENT_SSL_VERIFY_SERVER_CERT
)

// MariaDB's extended capabilities: the upper half of its 64-bit capability flags, exchanged in reserved bytes of
// the handshake by a server and a client that both leave out CLIENT_MYSQL (MariaDB's name for ClientLongPassword,
// which no MariaDB server sets). keyway negotiates only those that change what travels on the wire (ExtProtocolCaps).
const (
	// MariaCacheMetadata (MARIADB_CLIENT_CACHE_METADATA): every result set's column count is followed by a byte
	// that says whether the column definitions follow; the execute of a prepared statement leaves them out when the
	// client has them already (from the prepare or an earlier execute), which saves the server, the wire and the
	// client the columns' descriptions on every execute. libmariadb (sysbench, the mariadb CLI, MariaDB
	// Connector/C) asks for it.
	MariaCacheMetadata = 1 << (36 - 32)
)

// ExtProtocolCaps are the extended capabilities keyway negotiates, on both sides of a session alike.
const ExtProtocolCaps = MariaCacheMetadata

// ProtocolCaps are the capability flags that change what travels on the wire after the handshake. A backend
// connection can serve a client only if both negotiated the same subset of these; pools are keyed by it.
const ProtocolCaps = ClientDeprecateEOF | ClientMultiStatements | ClientMultiResults | ClientPSMultiResults |
	ClientFoundRows | ClientLocalFiles | ClientSessionTrack | ClientIgnoreSpace | ClientInteractive

// BaseCaps are the flags keyway always needs: the 4.1 protocol with plugin authentication.
const BaseCaps = ClientLongPassword | ClientLongFlag | ClientProtocol41 | ClientTransactions |
	ClientSecureConnection | ClientPluginAuth | ClientPluginAuthLenenc

// Status flags (server → client, in OK and EOF packets).
const (
	StatusInTrans           = mysql.SERVER_STATUS_IN_TRANS
	StatusAutocommit        = mysql.SERVER_STATUS_AUTOCOMMIT
	StatusMoreResultsExists = mysql.SERVER_MORE_RESULTS_EXISTS
	StatusCursorExists      = mysql.SERVER_STATUS_CURSOR_EXISTS
	StatusLastRowSent       = mysql.SERVER_STATUS_LAST_ROW_SEND
)

// Packet headers (the first payload byte of a reply).
const (
	HeaderOK          = 0x00
	HeaderAuthMore    = 0x01
	HeaderLocalInfile = 0xfb
	HeaderEOF         = 0xfe
	HeaderERR         = 0xff
)

// Auth plugin names.
const (
	NativePassword      = mysql.AUTH_NATIVE_PASSWORD
	CachingSha2Password = mysql.AUTH_CACHING_SHA2_PASSWORD
	ClearPassword       = mysql.AUTH_CLEAR_PASSWORD
)

// MySQL/MariaDB error codes: keyway's one list of them, for the errors it sends and those it looks for in a
// server's (from go-sql-driver or mysqlwire). Under go-mysql's names where go-mysql has the code; the three it lacks
// (MariaDB's 1927 and 4151, MySQL's 3118) are numbers here.
const (
	// Sent by keyway.
	ERConCount             = mysql.ER_CON_COUNT_ERROR                 // 1040
	ERHandshake            = mysql.ER_HANDSHAKE_ERROR                 // 1043
	ERAccessDenied         = mysql.ER_ACCESS_DENIED_ERROR             // 1045
	ERNoSuchThread         = mysql.ER_NO_SUCH_THREAD                  // 1094
	ERUnknownCom           = mysql.ER_UNKNOWN_COM_ERROR               // 1047
	ERUnknownError         = mysql.ER_UNKNOWN_ERROR                   // 1105
	ERNotAllowedCommand    = mysql.ER_NOT_ALLOWED_COMMAND             // 1148
	ERNetPacketTooLarge    = mysql.ER_NET_PACKET_TOO_LARGE            // 1153
	ERNetPacketsOutOfOrder = mysql.ER_NET_PACKETS_OUT_OF_ORDER        // 1156
	ERNetReadInterrupted   = mysql.ER_NET_READ_INTERRUPTED            // 1159
	ERHostIsBlocked        = mysql.ER_HOST_IS_BLOCKED                 // 1129
	ERNotSupportedYet      = mysql.ER_NOT_SUPPORTED_YET               // 1235
	ERUnknownStmtHandler   = mysql.ER_UNKNOWN_STMT_HANDLER            // 1243
	ERStmtHasNoOpenCursor  = mysql.ER_STMT_HAS_NO_OPEN_CURSOR         // 1421
	ERMaxPreparedStmtCount = mysql.ER_MAX_PREPARED_STMT_COUNT_REACHED // 1461
	ERUnsupportedPS        = mysql.ER_UNSUPPORTED_PS                  // 1295
	ERMalformedPacket      = mysql.ER_MALFORMED_PACKET                // 1835
	ERParseError           = mysql.ER_PARSE_ERROR                     // 1064
	// ERConnectionKilled is MariaDB's "Connection was killed" (1927, SQLSTATE 70100): keyway sends it when a
	// session's backend connection is lost in the middle of a command.
	ERConnectionKilled = 1927
	// CRServerLost is the client library's "Lost connection to server during query" (2013). keyway never sends it
	// in an ERR: MariaDB's client library (libmariadb: the mariadb CLI, sysbench) reports an ERR carrying a client
	// error number (2000-2999) as "Received malformed packet" (2027). A connection lost mid-statement is
	// ERConnectionKilled.
	CRServerLost = 2013

	// A server refusing an account (check's login problems).
	ERAccessDeniedNoPassword  = mysql.ER_ACCESS_DENIED_NO_PASSWORD_ERROR // 1698
	ERNotSupportedAuthMode    = mysql.ER_NOT_SUPPORTED_AUTH_MODE         // 1251
	ERMustChangePassword      = mysql.ER_MUST_CHANGE_PASSWORD            // 1820
	ERMustChangePasswordLogin = mysql.ER_MUST_CHANGE_PASSWORD_LOGIN      // 1862
	ERAccountLockedMySQL      = 3118                                     // MySQL's ER_ACCOUNT_HAS_BEEN_LOCKED
	ERAccountLockedMariaDB    = 4151                                     // MariaDB's ER_ACCOUNT_HAS_BEEN_LOCKED

	// A server refusing a statement for want of a privilege.
	ERDBAccessDenied     = mysql.ER_DBACCESS_DENIED_ERROR     // 1044
	ERTableAccessDenied  = mysql.ER_TABLEACCESS_DENIED_ERROR  // 1142
	ERColumnAccessDenied = mysql.ER_COLUMNACCESS_DENIED_ERROR // 1143

	// A server that is there but cannot serve yet.
	ERServerShutdown = mysql.ER_SERVER_SHUTDOWN // 1053

	// A server refusing a row's data.
	ERBadNull                     = mysql.ER_BAD_NULL_ERROR                  // 1048: column cannot be null
	ERDupEntry                    = mysql.ER_DUP_ENTRY                       // 1062
	ERWarnDataOutOfRange          = mysql.ER_WARN_DATA_OUT_OF_RANGE          // 1264
	ERDataTruncated               = mysql.WARN_DATA_TRUNCATED                // 1265
	ERTruncatedWrongValue         = mysql.ER_TRUNCATED_WRONG_VALUE           // 1292: incorrect value
	ERTruncatedWrongValueForField = mysql.ER_TRUNCATED_WRONG_VALUE_FOR_FIELD // 1366: incorrect string value
	ERDataTooLong                 = mysql.ER_DATA_TOO_LONG                   // 1406
	ERRowIsReferenced             = mysql.ER_ROW_IS_REFERENCED_2             // 1451: foreign key: row is referenced
	ERNoReferencedRow             = mysql.ER_NO_REFERENCED_ROW_2             // 1452: foreign key: parent row missing

	// A statement rolled back that may pass when run again.
	ERLockWaitTimeout = mysql.ER_LOCK_WAIT_TIMEOUT // 1205
	ERLockDeadlock    = mysql.ER_LOCK_DEADLOCK     // 1213
)

// Codes from 2000 up are the client library's own (CR_*): a client library that finds one in a server's ERR packet
// may take the packet for garbage (libmariadb answers 2027 "Received malformed packet" and drops the message), so
// keyway's own errors use server codes only.

// Error is a MySQL ERR packet: from a backend, or built by keyway for a client.
type Error struct {
	Code    uint16
	State   string // SQLSTATE, 5 characters
	Message string
}

func (e *Error) Error() string {
	return "ERROR " + strconv.Itoa(int(e.Code)) + " (" + e.State + "): " + e.Message
}

// NewError builds an Error; state "" means HY000.
func NewError(code uint16, state, format string, args ...any) *Error {
	if state == "" {
		state = "HY000"
	}
	return &Error{Code: code, State: state, Message: fmt.Sprintf(format, args...)}
}

// ParseError decodes an ERR packet payload (starting with 0xff), for a connection with CLIENT_PROTOCOL_41.
func ParseError(p []byte) *Error {
	if len(p) < 3 || p[0] != HeaderERR {
		return &Error{Code: ERUnknownError, State: "HY000", Message: "malformed ERR packet"}
	}
	e := &Error{Code: binary.LittleEndian.Uint16(p[1:]), State: "HY000"}
	rest := p[3:]
	if len(rest) >= 6 && rest[0] == '#' {
		e.State = string(rest[1:6])
		rest = rest[6:]
	}
	e.Message = string(rest)
	return e
}

// AppendError appends an ERR payload.
func AppendError(b []byte, e *Error) []byte {
	b = append(b, HeaderERR, byte(e.Code), byte(e.Code>>8), '#')
	state := e.State
	if len(state) != 5 {
		state = "HY000"
	}
	b = append(b, state...)
	return append(b, e.Message...)
}

// WriteError buffers an ERR packet and flushes it.
func (c *Conn) WriteError(e *Error) error {
	if err := c.Finish(AppendError(c.Begin(), e)); err != nil {
		return err
	}
	return c.Flush()
}

// AppendOK appends an OK payload with the given status and no info. With CLIENT_SESSION_TRACK the info string is
// length-encoded (here: empty), as the protocol requires.
func AppendOK(b []byte, caps uint32, affected, lastID uint64, status, warnings uint16) []byte {
	b = append(b, HeaderOK)
	b = AppendLenEnc(b, affected)
	b = AppendLenEnc(b, lastID)
	b = append(b, byte(status), byte(status>>8), byte(warnings), byte(warnings>>8))
	if caps&ClientSessionTrack != 0 {
		b = append(b, 0)
	}
	return b
}

// WriteOK buffers an OK packet and flushes it.
func (c *Conn) WriteOK(status uint16) error {
	if err := c.Finish(AppendOK(c.Begin(), c.Capabilities, 0, 0, status, 0)); err != nil {
		return err
	}
	return c.Flush()
}

// AppendLenEnc appends a length-encoded integer.
func AppendLenEnc(b []byte, n uint64) []byte {
	switch {
	case n < 251:
		return append(b, byte(n))
	case n < 1<<16:
		return append(b, 0xfc, byte(n), byte(n>>8))
	case n < 1<<24:
		return append(b, 0xfd, byte(n), byte(n>>8), byte(n>>16))
	}
	return binary.LittleEndian.AppendUint64(append(b, 0xfe), n)
}

// ReadLenEnc decodes a length-encoded integer at the start of p and returns it with its size; ok is false when p is
// too short or starts with a byte that is not an integer prefix (0xfb NULL, 0xff).
func ReadLenEnc(p []byte) (n uint64, size int, ok bool) {
	if len(p) == 0 {
		return 0, 0, false
	}
	switch p[0] {
	case 0xfb, 0xff:
		return 0, 0, false
	case 0xfc:
		if len(p) < 3 {
			return 0, 0, false
		}
		return uint64(binary.LittleEndian.Uint16(p[1:])), 3, true
	case 0xfd:
		if len(p) < 4 {
			return 0, 0, false
		}
		return uint64(p[1]) | uint64(p[2])<<8 | uint64(p[3])<<16, 4, true
	case 0xfe:
		if len(p) < 9 {
			return 0, 0, false
		}
		return binary.LittleEndian.Uint64(p[1:]), 9, true
	}
	return uint64(p[0]), 1, true
}

// OKStatus returns the status flags of an OK payload (header 0x00, or 0xfe under CLIENT_DEPRECATE_EOF) given its
// leading bytes; ok is false when they are too short to hold them.
func OKStatus(p []byte) (status uint16, ok bool) {
	p, ok = okTail(p)
	if !ok || len(p) < 2 {
		return 0, false
	}
	return binary.LittleEndian.Uint16(p), true
}

// okTail returns what follows an OK payload's header, affected rows and last insert id: status flags, warnings,
// then the optional info.
func okTail(p []byte) ([]byte, bool) {
	if len(p) < 1 {
		return nil, false
	}
	p = p[1:]
	for i := 0; i < 2; i++ { // affected rows, last insert id
		_, k, ok := ReadLenEnc(p)
		if !ok {
			return nil, false
		}
		p = p[k:]
	}
	return p, true
}

// OKWarnings returns the warning count of an OK payload (header, affected rows, last insert id, status, warnings).
func OKWarnings(p []byte) (warnings uint16, ok bool) {
	p, ok = okTail(p)
	if !ok || len(p) < 4 {
		return 0, false
	}
	return binary.LittleEndian.Uint16(p[2:]), true
}

// EOFWarnings returns the warning count of an EOF payload (0xfe, warnings, status).
func EOFWarnings(p []byte) (warnings uint16, ok bool) {
	if len(p) < 5 {
		return 0, false
	}
	return binary.LittleEndian.Uint16(p[1:]), true
}

// EOFStatus returns the status flags of an EOF payload (0xfe, warnings, status).
func EOFStatus(p []byte) (status uint16, ok bool) {
	if len(p) < 5 {
		return 0, false
	}
	return binary.LittleEndian.Uint16(p[3:]), true
}

// readNul returns the NUL-terminated string at the start of p and the rest after the NUL.
func readNul(p []byte) (s, rest []byte, ok bool) {
	for i, b := range p {
		if b == 0 {
			return p[:i], p[i+1:], true
		}
	}
	return nil, nil, false
}

// ReadColumnCount decodes the first packet of a result set: its number of columns, and whether their definitions
// follow (always, unless MariaCacheMetadata is among ext, the connection's negotiated extended capabilities, and the
// server left them out for a client that has them). ok is false for a malformed packet.
func ReadColumnCount(p []byte, ext uint32) (cols uint64, defs, ok bool) {
	cols, k, ok := ReadLenEnc(p)
	switch {
	case !ok:
		return 0, false, false
	case ext&MariaCacheMetadata == 0:
		return cols, true, true
	case len(p) <= k:
		return 0, false, false
	}
	return cols, p[k] != 0, true
}

// readLenEncString returns the length-encoded string at the start of p and the rest.
func readLenEncString(p []byte) (s, rest []byte, ok bool) {
	n, k, ok := ReadLenEnc(p)
	if !ok || uint64(len(p)-k) < n {
		return nil, nil, false
	}
	return p[k : k+int(n)], p[k+int(n):], true
}

// WriteTextResult buffers a text result set of string columns (keyway's own answers, such as SHOW KEYWAY CACHE)
// and flushes it: column count, definitions, rows, and the terminator, an EOF or, under CLIENT_DEPRECATE_EOF, an
// OK with the EOF header. A nil value in a row is NULL.
func (c *Conn) WriteTextResult(columns []string, rows [][]*string, status uint16) error {
	deprecateEOF := c.Capabilities&ClientDeprecateEOF != 0
	lenStr := func(b []byte, s string) []byte { return append(AppendLenEnc(b, uint64(len(s))), s...) }
	count := AppendLenEnc(nil, uint64(len(columns)))
	if c.ExtCapabilities&MariaCacheMetadata != 0 {
		count = append(count, 1) // the definitions follow
	}
	if err := c.WritePacket(count); err != nil {
		return err
	}
	for _, name := range columns {
		b := lenStr(c.Begin(), "def")
		b = lenStr(lenStr(lenStr(b, ""), ""), "") // schema, table, org_table
		b = lenStr(lenStr(b, name), name)
		b = append(b, 0x0c, 45, 0) // fixed-length fields; utf8mb4_general_ci
		b = append(b, 0, 4, 0, 0)  // column length 1024
		b = append(b, 0xfd, 0, 0)  // MYSQL_TYPE_VAR_STRING, no flags
		b = append(b, 0, 0, 0)     // decimals, filler
		if err := c.Finish(b); err != nil {
			return err
		}
	}
	eof := []byte{HeaderEOF, 0, 0, byte(status), byte(status >> 8)}
	if !deprecateEOF {
		if err := c.WritePacket(eof); err != nil {
			return err
		}
	}
	for _, row := range rows {
		b := c.Begin()
		for _, v := range row {
			if v == nil {
				b = append(b, 0xfb)
				continue
			}
			b = lenStr(b, *v)
		}
		if err := c.Finish(b); err != nil {
			return err
		}
	}
	if deprecateEOF {
		ok := AppendOK(nil, c.Capabilities, 0, 0, status, 0)
		ok[0] = HeaderEOF
		eof = ok
	}
	if err := c.WritePacket(eof); err != nil {
		return err
	}
	return c.Flush()
}
