package sqlproxy

import (
	"encoding/binary"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/keywaydb/keyway/internal/mysqlwire"
)

// TestCursorFetch opens a read-only cursor with COM_STMT_EXECUTE and reads it with COM_STMT_FETCH, with and
// without CLIENT_DEPRECATE_EOF (go-sql-driver never uses cursors).
func TestCursorFetch(t *testing.T) {
	m := mariadb(t)
	_, addr := startProxy(t, testConfig(m.Addr))
	for _, caps := range []uint32{0, mysqlwire.ClientDeprecateEOF} {
		rc := newRawClient(t, addr, "app", "secret", caps)
		if got := rc.c.Capabilities & mysqlwire.ClientDeprecateEOF; got != caps {
			t.Fatalf("negotiated DEPRECATE_EOF %x, want %x", got, caps)
		}
		// Prepare.
		if err := rc.c.WriteCommand(0x16, []byte("SELECT seq FROM seq_1_to_10")); err != nil {
			t.Fatal(err)
		}
		p, err := rc.c.ReadPacket()
		if err != nil || p[0] != 0 {
			t.Fatalf("prepare: %x %v", p, err)
		}
		id := binary.LittleEndian.Uint32(p[1:])
		cols := binary.LittleEndian.Uint16(p[5:])
		for range int(cols) + eofCount(caps) {
			if _, err := rc.c.ReadPacket(); err != nil {
				t.Fatal(err)
			}
		}
		// Execute with a cursor: metadata, no rows.
		if err := rc.c.WriteCommand(0x17, stmtExecute(id, true)); err != nil {
			t.Fatal(err)
		}
		if caps == 0 {
			rows, err := rc.readResult(true)
			if err != nil || len(rows) != 0 {
				t.Fatalf("execute with cursor: %d rows, %v", len(rows), err)
			}
		} else {
			rows, err := rc.readResult(true)
			if err != nil || len(rows) != 0 {
				t.Fatalf("execute with cursor (deprecate EOF): %d rows, %v", len(rows), err)
			}
		}
		// Fetch 4 at a time.
		total := 0
		for i := 0; i < 5 && total < 10; i++ {
			arg := binary.LittleEndian.AppendUint32(binary.LittleEndian.AppendUint32(nil, id), 4)
			if err := rc.c.WriteCommand(0x1c, arg); err != nil {
				t.Fatal(err)
			}
			rows, err := rc.readRows(true)
			if err != nil {
				t.Fatalf("fetch: %v", err)
			}
			total += len(rows)
		}
		if total != 10 {
			t.Fatalf("fetched %d rows, want 10", total)
		}
		// Close has no reply; the connection goes on.
		if err := rc.c.WriteCommand(0x19, binary.LittleEndian.AppendUint32(nil, id)); err != nil {
			t.Fatal(err)
		}
		if res, err := rc.query("SELECT 'ok'"); err != nil || len(res) != 1 || res[0] != "ok" {
			t.Fatalf("after close: %v %v", res, err)
		}
	}
}

// TestOtherCommands covers COM_PING, COM_INIT_DB, COM_FIELD_LIST, COM_STATISTICS, COM_SET_OPTION,
// COM_RESET_CONNECTION and COM_CHANGE_USER through keyway.
func TestOtherCommands(t *testing.T) {
	m := mariadb(t)
	_, addr := startProxy(t, testConfig(m.Addr))
	rc := newRawClient(t, addr, "app", "secret", mysqlwire.ClientMultiStatements)
	if _, err := rc.query("CREATE TABLE IF NOT EXISTS fl (a INT, b VARCHAR(3))"); err != nil {
		t.Fatal(err)
	}
	ok := func(what string, cmd byte, arg []byte) []byte {
		t.Helper()
		if err := rc.c.WriteCommand(cmd, arg); err != nil {
			t.Fatal(err)
		}
		p, err := rc.c.ReadPacket()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if e := parseErr(p); e != nil {
			t.Fatalf("%s: %v", what, e)
		}
		return p
	}
	ok("ping", 0x0e, nil)
	ok("init db", 0x02, []byte("mysql"))
	if res, err := rc.query("SELECT DATABASE()"); err != nil || res[0] != "mysql" {
		t.Fatalf("after init db: %v %v", res, err)
	}
	ok("init db", 0x02, []byte("test"))
	if err := rc.c.WriteCommand(0x02, []byte("no_such_db")); err != nil {
		t.Fatal(err)
	}
	if p, _ := rc.c.ReadPacket(); parseErr(p) == nil || parseErr(p).Code != 1049 {
		t.Fatalf("init db of a missing database: %x", p)
	}
	// Field list: column definitions then EOF.
	if err := rc.c.WriteCommand(0x04, []byte("fl\x00")); err != nil {
		t.Fatal(err)
	}
	n := 0
	for {
		p, err := rc.c.ReadPacket()
		if err != nil {
			t.Fatal(err)
		}
		if p[0] == 0xfe {
			break
		}
		n++
	}
	if n != 2 {
		t.Fatalf("field list: %d columns", n)
	}
	if p := ok("statistics", 0x09, nil); !strings.Contains(string(p), "Uptime") {
		t.Fatalf("statistics: %q", p)
	}
	ok("set option", 0x1b, []byte{1, 0}) // MYSQL_OPTION_MULTI_STATEMENTS_OFF
	ok("set option", 0x1b, []byte{0, 0})
	if _, err := rc.query("SET @v = 7"); err != nil {
		t.Fatal(err)
	}
	ok("reset connection", 0x1f, nil)
	if res, err := rc.query("SELECT COALESCE(@v, 'unset')"); err != nil || res[0] != "unset" {
		t.Fatalf("after reset: %v %v", res, err)
	}

	// Change user to sha (caching_sha2_password): keyway switches the plugin, then the backend connection.
	b := append([]byte("sha"), 0)
	b = append(b, 0) // empty auth response: keyway must switch to caching_sha2_password
	b = append(b, "test"...)
	b = append(b, 0, 45, 0)
	b = append(b, mysqlwire.NativePassword...)
	b = append(b, 0)
	if err := rc.c.WriteCommand(0x11, b); err != nil {
		t.Fatal(err)
	}
	p, err := rc.c.ReadPacket()
	if err != nil || p[0] != 0xfe || !strings.HasPrefix(string(p[1:]), mysqlwire.CachingSha2Password+"\x00") {
		t.Fatalf("change user: want an auth switch, got %q %v", p, err)
	}
	scramble := p[1+len(mysqlwire.CachingSha2Password)+1 : len(p)-1]
	if err := rc.c.WritePacket(mysqlwire.CachingSha2Scramble(scramble, "shapass")); err != nil {
		t.Fatal(err)
	}
	_ = rc.c.Flush()
	if p, err = rc.c.ReadPacket(); err != nil || p[0] != 1 || p[1] != 3 {
		t.Fatalf("change user: want fast auth success, got %x %v", p, err)
	}
	if p, err = rc.c.ReadPacket(); err != nil || p[0] != 0 {
		t.Fatalf("change user: want OK, got %x %v", p, err)
	}
	if res, err := rc.query("SELECT DATABASE()"); err != nil || res[0] != "test" {
		t.Fatalf("after change user: %v %v", res, err)
	}
}

// TestBadPackets: lying lengths and out-of-order sequence ids get an ERR and a closed connection; keyway serves
// others meanwhile.
func TestBadPackets(t *testing.T) {
	m := mariadb(t)
	_, addr := startProxy(t, testConfig(m.Addr))
	other := newRawClient(t, addr, "app", "secret", 0)

	// A header announcing 5 bytes in front of a longer query: the first 5 bytes reach the backend as a (bad)
	// query, then the rest of the text is read as a header whose sequence id is wrong.
	rc := newRawClient(t, addr, "app", "secret", 0)
	raw := rc.c.NetConn()
	q := "\x03SELECT 1"
	if _, err := raw.Write(append([]byte{5, 0, 0, 0}, q...)); err != nil {
		t.Fatal(err)
	}
	if e := readErrRaw(t, raw); e == nil || e.Code != 1064 { // the backend's syntax error for "SELE"
		t.Fatalf("truncated query: want ERR 1064, got %v", e)
	}
	if e := readErrRaw(t, raw); e == nil || e.Code != mysqlwire.ERNetPacketsOutOfOrder {
		t.Fatalf("want ERR 1156, got %v", e)
	}
	expectClosed(t, raw)

	// Sequence id 3 on a new command.
	rc = newRawClient(t, addr, "app", "secret", 0)
	raw = rc.c.NetConn()
	if _, err := raw.Write([]byte{1, 0, 0, 3, 0x0e}); err != nil {
		t.Fatal(err)
	}
	if e := readErrRaw(t, raw); e == nil || e.Code != mysqlwire.ERNetPacketsOutOfOrder {
		t.Fatalf("want ERR 1156, got %v", e)
	}
	expectClosed(t, raw)

	// An empty command.
	rc2 := newRawClient(t, addr, "app", "secret", 0)
	if _, err := rc2.c.NetConn().Write([]byte{0, 0, 0, 0}); err != nil {
		t.Fatal(err)
	}
	if e := readErrRaw(t, rc2.c.NetConn()); e == nil || e.Code != mysqlwire.ERMalformedPacket {
		t.Fatalf("empty command: want ERR 1835, got %v", e)
	}
	expectClosed(t, rc2.c.NetConn())

	if res, err := other.query("SELECT 'still here'"); err != nil || res[0] != "still here" {
		t.Fatalf("other client: %v %v", res, err)
	}
}

// readErrRaw reads one packet (any sequence id) and parses it as an ERR.
func readErrRaw(t *testing.T, nc net.Conn) *mysqlwire.Error {
	t.Helper()
	_ = nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	var h [4]byte
	if _, err := readFull(nc, h[:]); err != nil {
		t.Fatalf("read ERR header: %v", err)
	}
	n := int(h[0]) | int(h[1])<<8 | int(h[2])<<16
	p := make([]byte, n)
	if _, err := readFull(nc, p); err != nil {
		t.Fatalf("read ERR: %v", err)
	}
	return parseErr(p)
}

func readFull(nc net.Conn, b []byte) (int, error) {
	n := 0
	for n < len(b) {
		k, err := nc.Read(b[n:])
		n += k
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

func expectClosed(t *testing.T, nc net.Conn) {
	t.Helper()
	_ = nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	var b [1]byte
	_, err := nc.Read(b[:])
	var ne net.Error
	if err == nil || (errors.As(err, &ne) && ne.Timeout()) {
		t.Fatalf("connection not closed: %v", err)
	}
}

// TestClientVanishesMidResult: a client that disconnects while a large result streams must not leave its backend
// connection in the pool.
func TestClientVanishesMidResult(t *testing.T) {
	m := mariadb(t)
	cfg := testConfig(m.Addr)
	cfg.Groups[0].MaxOpen = 1
	s, addr := startProxy(t, cfg)
	rc := newRawClient(t, addr, "app", "secret", 0)
	if err := rc.c.WriteCommand(0x03, []byte("SELECT REPEAT('x', 1000) FROM seq_1_to_100000")); err != nil {
		t.Fatal(err)
	}
	for range 10 {
		if _, err := rc.c.ReadPacket(); err != nil {
			t.Fatal(err)
		}
	}
	rc.c.Close()
	waitFor(t, func() bool {
		for _, st := range s.PoolStats() {
			if st.InUse != 0 || st.Idle != 0 {
				return false
			}
		}
		return true
	})
	other := newRawClient(t, addr, "app", "secret", 0)
	if res, err := other.query("SELECT 'clean'"); err != nil || res[0] != "clean" {
		t.Fatalf("next session: %v %v", res, err)
	}
}

// eofCount is 1 when an EOF follows column definitions (no CLIENT_DEPRECATE_EOF).
func eofCount(caps uint32) int {
	if caps&mysqlwire.ClientDeprecateEOF == 0 {
		return 1
	}
	return 0
}
