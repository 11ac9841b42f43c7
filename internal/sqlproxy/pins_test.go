package sqlproxy

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"encoding/binary"
	"slices"
	"strings"
	"testing"

	"github.com/keywaydb/keyway/internal/mysqlwire"
)

// pinReasons reads SHOW KEYWAY SESSION's Pin_reasons on conn (answered by keyway: asking changes nothing).
func pinReasons(t *testing.T, conn *sql.Conn) string {
	t.Helper()
	rows, err := conn.QueryContext(context.Background(), "SHOW KEYWAY SESSION")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	reasons := ""
	for rows.Next() {
		var k, v string
		if err := rows.Scan(&k, &v); err != nil {
			t.Fatal(err)
		}
		if k == "Pin_reasons" {
			reasons = v
		}
	}
	return reasons
}

// TestPinsThroughKeyway: through go-sql-driver and keyway to MariaDB, each statement of the pin list pins the
// session with its reason (so neither the result cache nor freshBackend's swap touches it), the state it made is
// still there on the next statement, and the statements that end a pin end it.
func TestPinsThroughKeyway(t *testing.T) {
	db, _, _ := proxyDB(t, "")
	ctx := context.Background()
	mustExec(t, db, "CREATE TABLE IF NOT EXISTS pin_h (a int)")
	mustExec(t, db, "CREATE SEQUENCE IF NOT EXISTS pin_seq")
	mustExec(t, db, "CREATE PROCEDURE IF NOT EXISTS pin_p() SET @pv = 5") // the text names no user variable
	t.Cleanup(func() {
		db.Exec("DROP TABLE IF EXISTS pin_h")
		db.Exec("DROP SEQUENCE IF EXISTS pin_seq")
		db.Exec("DROP PROCEDURE IF EXISTS pin_p")
	})

	for _, c := range []struct {
		name   string
		do     []string
		reason string
		check  string // a query whose one value must be want, on the same session
		want   string
	}{
		{"select into", []string{"SELECT 41 + 1 INTO @v"}, "user_variable", "SELECT @v", "42"},
		{"set user variable", []string{"SET @w = 7"}, "user_variable", "SELECT @w", "7"},
		{"get_lock", []string{"SELECT GET_LOCK('keyway_pin_test', 0)"}, "user_lock", "SELECT IS_USED_LOCK('keyway_pin_test') = CONNECTION_ID()", "1"},
		{"connection_id", []string{"SELECT CONNECTION_ID()"}, "connection_id", "", ""},
		{"sequence", []string{"SELECT NEXTVAL(pin_seq)"}, "sequence", "SELECT LASTVAL(pin_seq) IS NOT NULL", "1"},
		{"temporary table", []string{"CREATE TEMPORARY TABLE pin_tmp (a int)", "INSERT INTO pin_tmp VALUES (1)"}, "temporary_table", "SELECT COUNT(*) FROM pin_tmp", "1"},
		{"handler", []string{"HANDLER pin_h OPEN"}, "handler", "", ""},
		{"lock tables", []string{"LOCK TABLES pin_h READ"}, "table_lock", "SELECT COUNT(*) >= 0 FROM pin_h", "1"},
		{"set transaction", []string{"SET TRANSACTION ISOLATION LEVEL SERIALIZABLE"}, "set_transaction", "", ""},
		{"prepare", []string{"PREPARE pin_s FROM 'SELECT 5'"}, "prepare", "", ""},
		{"session variable", []string{"SET SESSION wait_timeout = 1234"}, "variable", "SELECT @@session.wait_timeout", "1234"},
		{"user variable, told by the server", []string{"CALL pin_p()"}, "session_state", "SELECT @pv", "5"},
	} {
		t.Run(c.name, func(t *testing.T) {
			conn, err := db.Conn(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Raw(func(any) error { return driver.ErrBadConn }) // its state must not go back to the pool
			if r := pinReasons(t, conn); r != "" {
				t.Fatalf("fresh session pinned: %q", r)
			}
			for _, q := range c.do {
				if _, err := conn.ExecContext(ctx, q); err != nil {
					t.Fatalf("%s: %v", q, err)
				}
			}
			if r := pinReasons(t, conn); !slices.Contains(strings.Split(r, ","), c.reason) {
				t.Fatalf("after %q: pin reasons %q, want %s", c.do, r, c.reason)
			}
			if c.check != "" {
				var got string
				if err := conn.QueryRowContext(ctx, c.check).Scan(&got); err != nil || got != c.want {
					t.Fatalf("%s = %q, %v; want %q", c.check, got, err, c.want)
				}
			}
		})
	}

	t.Run("lock ends", func(t *testing.T) {
		conn, err := db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		for _, q := range []string{"SELECT GET_LOCK('keyway_pin_end', 0)", "SELECT RELEASE_LOCK('keyway_pin_end')"} {
			if _, err := conn.ExecContext(ctx, q); err != nil {
				t.Fatal(err)
			}
		}
		// keyway does not count named locks: RELEASE_LOCK keeps the pin, RELEASE_ALL_LOCKS ends it.
		if r := pinReasons(t, conn); r != "user_lock" {
			t.Fatalf("after RELEASE_LOCK: %q, want user_lock", r)
		}
		if _, err := conn.ExecContext(ctx, "SELECT RELEASE_ALL_LOCKS()"); err != nil {
			t.Fatal(err)
		}
		if r := pinReasons(t, conn); r != "" {
			t.Fatalf("after RELEASE_ALL_LOCKS: %q, want none", r)
		}
		if _, err := conn.ExecContext(ctx, "LOCK TABLES pin_h READ"); err != nil {
			t.Fatal(err)
		}
		if _, err := conn.ExecContext(ctx, "UNLOCK TABLES"); err != nil {
			t.Fatal(err)
		}
		if r := pinReasons(t, conn); r != "" {
			t.Fatalf("after UNLOCK TABLES: %q, want none", r)
		}
	})
}

// TestPinsLongDataAndCursor: COM_STMT_SEND_LONG_DATA pins until COM_STMT_RESET; an execute that opens a cursor
// pins until COM_STMT_CLOSE.
func TestPinsLongDataAndCursor(t *testing.T) {
	m := mariadb(t)
	_, addr := startProxy(t, testConfig(m.Addr))
	rc := newRawClient(t, addr, "app", "secret", 0)
	reasons := func() string { // SHOW KEYWAY SESSION's Pin_reasons: a text result of two columns
		t.Helper()
		if err := rc.c.WriteCommand(0x03, []byte("SHOW KEYWAY SESSION")); err != nil {
			t.Fatal(err)
		}
		for range 1 + 2 + eofCount(0) { // column count, two definitions, EOF
			if _, err := rc.c.ReadPacket(); err != nil {
				t.Fatal(err)
			}
		}
		got := ""
		for {
			p, err := rc.c.ReadPacket()
			if err != nil {
				t.Fatal(err)
			}
			if p[0] == mysqlwire.HeaderEOF {
				return got
			}
			n, k, _ := mysqlwire.ReadLenEnc(p)
			name, rest := string(p[k:k+int(n)]), p[k+int(n):]
			n, k, _ = mysqlwire.ReadLenEnc(rest)
			if name == "Pin_reasons" {
				got = string(rest[k : k+int(n)])
			}
		}
	}
	prepare := func(q string) uint32 {
		t.Helper()
		if err := rc.c.WriteCommand(0x16, []byte(q)); err != nil {
			t.Fatal(err)
		}
		p, err := rc.c.ReadPacket()
		if err != nil || p[0] != 0 {
			t.Fatalf("prepare: %x %v", p, err)
		}
		id := binary.LittleEndian.Uint32(p[1:])
		n := 0
		for _, k := range []int{int(binary.LittleEndian.Uint16(p[5:])), int(binary.LittleEndian.Uint16(p[7:]))} {
			if k > 0 { // column or parameter definitions, then an EOF (no CLIENT_DEPRECATE_EOF)
				n += k + eofCount(0)
			}
		}
		for range n {
			if _, err := rc.c.ReadPacket(); err != nil {
				t.Fatal(err)
			}
		}
		return id
	}

	id := prepare("SELECT ?")
	if err := rc.c.WriteCommand(0x18, append(binary.LittleEndian.AppendUint32(nil, id), 0, 0, 'x')); err != nil {
		t.Fatal(err)
	}
	if r := reasons(); r != "long_data" {
		t.Fatalf("after SEND_LONG_DATA: %q, want long_data", r)
	}
	if err := rc.c.WriteCommand(0x1a, binary.LittleEndian.AppendUint32(nil, id)); err != nil { // COM_STMT_RESET
		t.Fatal(err)
	}
	if p, err := rc.c.ReadPacket(); err != nil || p[0] != 0 {
		t.Fatalf("reset: %x %v", p, err)
	}
	if r := reasons(); r != "" {
		t.Fatalf("after COM_STMT_RESET: %q, want none (a prepared statement does not pin)", r)
	}

	cid := prepare("SELECT seq FROM seq_1_to_3")
	if err := rc.c.WriteCommand(0x17, stmtExecute(cid, true)); err != nil {
		t.Fatal(err)
	}
	if rows, err := rc.readResult(true); err != nil || len(rows) != 0 {
		t.Fatalf("execute with cursor: %d rows, %v", len(rows), err)
	}
	if r := reasons(); r != "cursor" {
		t.Fatalf("with a cursor open: %q, want cursor", r)
	}
	for _, id := range []uint32{cid, id} {
		if err := rc.c.WriteCommand(0x19, binary.LittleEndian.AppendUint32(nil, id)); err != nil { // COM_STMT_CLOSE
			t.Fatal(err)
		}
	}
	if r := reasons(); r != "" {
		t.Fatalf("after COM_STMT_CLOSE: %q, want none", r)
	}
}
