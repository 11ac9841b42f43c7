package sqlproxy

import (
	"testing"

	"github.com/keywaydb/keyway/internal/backend"
	"github.com/keywaydb/keyway/internal/mysqlwire"
)

// TestPinned: a session is pinned to its backend connection by the backend's own transaction flags and by the
// session state its statements changed, and a reset connection is free again.
func TestPinned(t *testing.T) {
	pc := NewPlanCache(10)
	ss := &session{be: &backend.Conn{Status: mysqlwire.StatusAutocommit}}
	if pinned, why := ss.pinned(); pinned {
		t.Fatalf("fresh session pinned: %s", why)
	}
	ss.be.Status = mysqlwire.StatusAutocommit | mysqlwire.StatusInTrans // after BEGIN
	if pinned, why := ss.pinned(); !pinned || why != "inside a transaction" {
		t.Fatalf("in a transaction: %v %q", pinned, why)
	}
	ss.be.Status = 0 // SET autocommit = 0, then COMMIT: no transaction flag, autocommit off
	if pinned, why := ss.pinned(); !pinned || why != "autocommit is off" {
		t.Fatalf("autocommit off: %v %q", pinned, why)
	}
	ss.be.Status = mysqlwire.StatusAutocommit
	ss.pin.note(pc.Plan("SELECT * FROM t WHERE id = 1"), false)
	ss.pin.note(pc.Plan("SET @a = 1"), true) // refused by the server: changed nothing
	if pinned, _ := ss.pinned(); pinned {
		t.Fatal("pinned by a read or a failed SET")
	}
	ss.pin.note(pc.Plan("CREATE TEMPORARY TABLE tmp (a int)"), false)
	if pinned, why := ss.pinned(); !pinned || why == "" {
		t.Fatal("a temporary table does not pin the session")
	}
	ss.pin = pinState{}
	ss.pin.note(pc.Plan("SET @a = 1; SELECT nosuch FROM nowhere"), true) // the SET ran before the failure
	if got := ss.pins(); got != pinSet(PinUserVariable) {
		t.Fatalf("failed multi-statement: pins %q", got)
	}
	ss.pin = pinState{}
	ss.pin.note(pc.Plan("LOCK TABLES t WRITE"), false)
	ss.pin.note(pc.Plan("SELECT GET_LOCK('x', 0)"), false)
	ss.pin.note(pc.Plan("UNLOCK TABLES"), false)
	ss.pin.note(pc.Plan("SELECT RELEASE_LOCK('x')"), false)
	if got := ss.pins(); got != pinSet(PinUserLock) {
		t.Fatalf("after UNLOCK TABLES and RELEASE_LOCK: pins %q, want user_lock only", got)
	}
	ss.pin.note(pc.Plan("SELECT RELEASE_ALL_LOCKS()"), false)
	if pinned, why := ss.pinned(); pinned {
		t.Fatalf("pinned after RELEASE_ALL_LOCKS: %s", why)
	}
}

// TestPlanPins: each statement of pinTable's list pins with its reason, found once per digest (a parse, or the
// words of a statement the grammar rejects), and the statements that end a pin say so.
func TestPlanPins(t *testing.T) {
	pc := NewPlanCache(100)
	for _, c := range []struct {
		sql          string
		pins, unpins PinSet
	}{
		{"SELECT * FROM t WHERE id = 1", 0, 0},
		{"SET autocommit = 0", 0, 0}, // the status flags say it
		{"SET GLOBAL max_connections = 10", 0, 0},
		{"SET TRANSACTION ISOLATION LEVEL READ COMMITTED", pinSet(PinSetTransaction), 0},
		{"SET TRANSACTION READ ONLY", pinSet(PinSetTransaction), 0},
		{"SET NAMES utf8mb4", 0, 0},         // carried: the server reports what it set
		{"SET SESSION sql_mode = ''", 0, 0}, // carried (an untracked variable pins when the server reports it)
		{"SELECT LAST_INSERT_ID(5)", pinSet(PinLastInsertID), 0},
		{"SELECT LAST_INSERT_ID()", 0, 0},
		{"SET @v = 1", pinSet(PinUserVariable), 0},
		{"SELECT @v := 1", pinSet(PinUserVariable), 0},
		{"SELECT 1 INTO @v", pinSet(PinUserVariable), 0},
		{"SELECT a FROM t WHERE id = 1 INTO @v", pinSet(PinUserVariable), 0},
		{"SELECT a FROM t INTO OUTFILE '/tmp/x'", 0, 0},
		{"USE db", 0, 0}, // carried: the server reports the database
		{"CREATE TEMPORARY TABLE tmp (a int)", pinSet(PinTemporaryTable), 0},
		{"LOCK TABLES t READ", pinSet(PinTableLock), 0},
		{"UNLOCK TABLES", 0, pinSet(PinTableLock, PinGlobalReadLock)},
		{"FLUSH TABLES WITH READ LOCK", pinSet(PinGlobalReadLock), 0},
		{"FLUSH TABLES t FOR EXPORT", pinSet(PinTableLock), 0},
		{"HANDLER t OPEN", pinSet(PinHandler), 0},
		{"SELECT GET_LOCK('x', 0)", pinSet(PinUserLock), 0},
		{"DO GET_LOCK('x', 0)", pinSet(PinUserLock), 0},
		{"SELECT RELEASE_LOCK('x')", 0, 0}, // keyway does not count locks: kept until RELEASE_ALL_LOCKS or reset
		{"SELECT RELEASE_ALL_LOCKS()", 0, pinSet(PinUserLock)},
		{"PREPARE s FROM 'SELECT 1'", pinSet(PinPrepare), 0},
		{"SELECT NEXTVAL(s)", pinSet(PinSequence), 0},
		{"SELECT NEXT VALUE FOR s", pinSet(PinSequence), 0},
		{"SELECT LASTVAL(s)", pinSet(PinSequence), 0},
		{"SELECT PREVIOUS VALUE FOR s", pinSet(PinSequence), 0},
		{"SELECT CONNECTION_ID()", pinSet(PinConnectionID), 0},
		{"SET @a = 1; SELECT GET_LOCK('x', 0)", pinSet(PinUserVariable, PinUserLock), 0},
	} {
		p := pc.Plan(c.sql)
		if p.Pins != c.pins || p.Unpins != c.unpins {
			t.Errorf("%s: pins %q unpins %q, want %q %q (parse error %q)", c.sql, p.Pins, p.Unpins, c.pins, c.unpins, p.ParseError)
		}
	}
	for r := PinReason(0); r < numPinReasons; r++ {
		if pinTable[r].name == "" || pinTable[r].why == "" || pinTable[r].ends == "" {
			t.Errorf("pinTable lacks reason %d", r)
		}
	}
}
