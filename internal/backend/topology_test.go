package backend

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
)

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
