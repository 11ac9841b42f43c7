package container

import (
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/keywaydb/keyway/internal/testenv"
)

// TestSetOutcomeUnknown: a set whose connection breaks while its statement runs on the server (a primary that died
// under it) fails with an error saying that its outcome is unknown, which the memcache door's SERVER_ERROR
// carries; a set that could not reach the server at all says nothing of the kind.
func TestSetOutcomeUnknown(t *testing.T) {
	live := openDB(t)
	exec(t, live, "DROP TABLE IF EXISTS test.outcome")
	exec(t, live, "CREATE TABLE test.outcome (c1 VARCHAR(32) PRIMARY KEY, c2 VARCHAR(64))")
	exec(t, live, "INSERT INTO test.outcome VALUES ('k', 'old')")
	m := testenv.SharedMariaDB(t)
	r := testenv.NewRelay(t, m.Addr)
	r.Up(t)
	cfg, err := mysql.ParseDSN(m.AppDSN)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Addr = r.Addr
	db := OpenDB(cfg)
	defer db.Close()
	c, err := Open(ctx, db, Def{Name: "oc", Schema: "test", Table: "outcome", KeyColumn: "c1", ValueColumns: []string{"c2"}},
		Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	// The row is locked, so the set's statement waits on the server until the relay cuts its connection.
	lock, err := live.Begin()
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Rollback()
	if _, err := lock.Exec("SELECT * FROM test.outcome WHERE c1 = 'k' FOR UPDATE"); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := c.Set(ctx, []byte("k"), Item{Value: []byte("new")})
		done <- err
	}()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		var n int
		if err := live.QueryRow("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE INFO LIKE 'INSERT INTO%outcome%'").Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the set's statement never ran on the server")
		}
	}
	r.Cut()
	err = <-done
	if !errors.Is(err, ErrOutcomeUnknown) || !strings.Contains(err.Error(), "outcome is unknown") || !strings.Contains(err.Error(), `container "oc"`) {
		t.Fatalf("a set whose connection broke mid-statement: %v; want an error naming the container and saying its outcome is unknown", err)
	}
	t.Logf("the set's error: %v", err)
	lock.Rollback()

	// A set that never reached the server: its outcome is known.
	r.Down()
	if _, err := c.Set(ctx, []byte("k"), Item{Value: []byte("newer")}); err == nil || errors.Is(err, ErrOutcomeUnknown) {
		t.Fatalf("a set with the server unreachable: %v; want an error that does not call the outcome unknown", err)
	}
}
