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
}
