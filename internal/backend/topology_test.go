package backend

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
)

// TestSQLConfigRetriesAConnectionKilledWhileIdle: a pool connection the server closed while it sat idle (KILL, a
// wait_timeout, a restart) is found out before the next statement is sent on it, and the statement runs on a new
// connection (the pool's connections check themselves: sockio.WrapPooled), instead of failing with go-sql-driver's
// "invalid connection".
func TestSQLConfigRetriesAConnectionKilledWhileIdle(t *testing.T) {
	m := mariadb(t)
	g := newGroup(t, m.Addr, nil)
	db := sql.OpenDB(mustConnector(t, g.SQLConfig()))
	defer db.Close()
	db.SetMaxOpenConns(1)
	root, err := sql.Open("mysql", m.RootDSN)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	for round := range 3 {
		var id int64
		if err := db.QueryRow("SELECT CONNECTION_ID()").Scan(&id); err != nil {
			t.Fatal(err)
		}
		if _, err := root.Exec(fmt.Sprintf("KILL CONNECTION %d", id)); err != nil {
			t.Fatal(err)
		}
		// Once the server has ended the thread, it has closed the socket (over loopback its end reaches the pool's
		// side with the close; the short sleep is a margin, not what the test measures).
		eventually(t, 10*time.Second, func() bool {
			var n int
			if err := root.QueryRow("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = ?", id).Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n == 0
		})
		time.Sleep(20 * time.Millisecond)
		var next int64
		if err := db.QueryRow("SELECT CONNECTION_ID()").Scan(&next); err != nil {
			t.Fatalf("round %d: a statement after the idle connection %d was killed: %v", round, id, err)
		}
		if next == id {
			t.Fatalf("round %d: the statement ran on the killed connection %d", round, id)
		}
	}
}

// TestSQLConfigDialsThroughGroup: a database/sql pool built on Group.SQLConfig reaches the group's primary with
// keyway's own account, and shares the group's health: a refused dial marks the group down (the SQL door's pools
// then fail fast too), and while the group fails fast the pool gets the group's *UnavailableError.
func TestSQLConfigDialsThroughGroup(t *testing.T) {
	m := mariadb(t)
	g := newGroup(t, m.Addr, nil)
	db := sql.OpenDB(mustConnector(t, g.SQLConfig()))
	defer db.Close()
	var user string
	if err := db.QueryRow("SELECT SUBSTRING_INDEX(CURRENT_USER(), '@', 1)").Scan(&user); err != nil || user != "app" {
		t.Fatalf("through the group: user %q, err %v", user, err)
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	dg := newGroup(t, dead, func(o *GroupOptions) { o.HealthInterval = time.Hour })
	ddb := sql.OpenDB(mustConnector(t, dg.SQLConfig()))
	defer ddb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	err = ddb.PingContext(ctx)
	var ue *UnavailableError
	if !errors.As(err, &ue) || ue.Group != "main" || ue.Addr != dead {
		t.Fatalf("ping through a dead group: %v", err)
	}
	if ok, _ := dg.Healthy(); ok {
		t.Fatal("group healthy after its pool could not dial")
	}
	// The SQL door's side of the same group now fails fast with the same error.
	_, err = dg.Pool(PoolKey{User: "app"}, "secret").Get(context.Background())
	if !errors.As(err, &ue) {
		t.Fatalf("SQL door pool on the dead group: %v", err)
	}
}

func mustConnector(t *testing.T, cfg *mysql.Config) driver.Connector {
	t.Helper()
	c, err := mysql.NewConnector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
