package sqlproxy

import (
	"encoding/binary"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/keywaydb/keyway/internal/mysqlwire"
)

// rawClient is a protocol-level client (keyway's own client side) for what go-sql-driver cannot do.
type rawClient struct {
	t    *testing.T
	c    *mysqlwire.Conn
	info *mysqlwire.ServerInfo // keyway's handshake: ConnectionID is the session's keyway id
	// lastDefs says whether the last result set read came with its column definitions (see MariaCacheMetadata).
	lastDefs bool
	// lastCols is the column count of the last result set read.
	lastCols int
}

func newRawClient(t *testing.T, addr, user, password string, caps uint32) *rawClient {
	t.Helper()
	return newRawClientExt(t, addr, user, password, caps, 0)
}

// newRawClientExt is newRawClient asking also for MariaDB extended capabilities ext.
func newRawClientExt(t *testing.T, addr, user, password string, caps, ext uint32) *rawClient {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	_ = nc.SetDeadline(time.Now().Add(30 * time.Second))
	c := mysqlwire.NewConn(nc)
	t.Cleanup(func() { c.Close() })
	info, err := mysqlwire.ClientHandshake(c, &mysqlwire.ClientConfig{User: user, Password: password, DB: "test", Capabilities: caps, ExtCapabilities: ext})
	if err != nil {
		t.Fatalf("handshake: %v", err)
	}
	return &rawClient{t: t, c: c, info: info}
}

func parseErr(p []byte) *mysqlwire.Error {
	if len(p) > 0 && p[0] == mysqlwire.HeaderERR {
		return mysqlwire.ParseError(p)
	}
	return nil
}

// query runs a text query and returns the first column of each row of a result set (nil for OK).
func (rc *rawClient) query(q string) ([]string, error) {
	if err := rc.c.WriteCommand(0x03, []byte(q)); err != nil {
		return nil, err
	}
	return rc.readResult(false)
}

// readResult reads one result (OK, ERR or a result set whose rows are text or binary).
func (rc *rawClient) readResult(binaryRows bool) ([]string, error) {
	c := rc.c
	deprecate := c.Capabilities&mysqlwire.ClientDeprecateEOF != 0
	p, err := c.ReadPacket()
	if err != nil {
		return nil, err
	}
	if e := parseErr(p); e != nil {
		return nil, e
	}
	if p[0] == mysqlwire.HeaderOK {
		return nil, nil
	}
	cols, defs, ok := mysqlwire.ReadColumnCount(p, c.ExtCapabilities)
	if !ok {
		return nil, errors.New("bad column count")
	}
	rc.lastDefs, rc.lastCols = defs, int(cols)
	if !defs {
		cols = 0
	}
	for range cols {
		if _, err := c.ReadPacket(); err != nil {
			return nil, err
		}
	}
	if !deprecate {
		p, err := c.ReadPacket()
		if err != nil {
			return nil, err
		}
		if st, _ := mysqlwire.EOFStatus(p); st&mysqlwire.StatusCursorExists != 0 {
			return []string{}, nil
		}
	}
	return rc.readRows(binaryRows)
}

// readRows reads rows until the terminator.
func (rc *rawClient) readRows(binaryRows bool) ([]string, error) {
	var out []string
	for {
		p, err := rc.c.ReadPacket()
		if err != nil {
			return nil, err
		}
		if e := parseErr(p); e != nil {
			return nil, e
		}
		if p[0] == mysqlwire.HeaderEOF && len(p) < 0xffffff {
			return out, nil
		}
		if binaryRows {
			out = append(out, string(p))
			continue
		}
		n, k, ok := mysqlwire.ReadLenEnc(p)
		if !ok || len(p) < k+int(n) {
			return nil, errors.New("bad text row")
		}
		out = append(out, string(p[k:k+int(n)]))
	}
}

// queryRaw runs a text query and returns every packet of its reply, as the client received them (one result:
// an OK, an ERR, or a result set read to its terminator; the client negotiated no CLIENT_DEPRECATE_EOF).
func (rc *rawClient) queryRaw(q string) ([]byte, error) {
	c := rc.c
	if err := c.WriteCommand(0x03, []byte(q)); err != nil {
		return nil, err
	}
	var out []byte
	next := func() ([]byte, error) {
		p, err := c.ReadPacket()
		if err == nil {
			out = append(append(out, '|'), p...)
		}
		return p, err
	}
	p, err := next()
	if err != nil || p[0] == mysqlwire.HeaderOK || p[0] == mysqlwire.HeaderERR {
		return out, err
	}
	for eofs := 0; eofs < 2; { // the definitions' EOF, then the rows' (or an ERR)
		p, err := next()
		if err != nil {
			return out, err
		}
		if p[0] == mysqlwire.HeaderERR {
			break
		}
		if p[0] == mysqlwire.HeaderEOF && len(p) < 9 {
			eofs++
		}
	}
	return out, nil
}

func listenLoopback() (net.Listener, error) { return net.Listen("tcp", "127.0.0.1:0") }

// stmtExecute builds a COM_STMT_EXECUTE payload without parameters.
func stmtExecute(id uint32, cursor bool) []byte {
	flags := byte(0)
	if cursor {
		flags = 1 // CURSOR_TYPE_READ_ONLY
	}
	b := binary.LittleEndian.AppendUint32(nil, id)
	b = append(b, flags)
	return binary.LittleEndian.AppendUint32(b, 1)
}
