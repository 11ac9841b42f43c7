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

	// The row is locked, so each write's statement waits on the server until the relay cuts its connection: a set,
	// an add (its duplicate check waits on the lock too) and a delete, each an autocommit statement.
	writes := []struct {
		name, running string
		do            func() error
	}{
		{"set", "INSERT INTO%outcome%", func() error { _, err := c.Set(ctx, []byte("k"), Item{Value: []byte("new")}); return err }},
		{"add", "INSERT INTO%outcome%", func() error { _, _, err := c.Add(ctx, []byte("k"), Item{Value: []byte("new")}); return err }},
		{"delete", "DELETE FROM%outcome%", func() error { _, err := c.Delete(ctx, []byte("k")); return err }},
	}
	for _, w := range writes {
		lock, err := live.Begin()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := lock.Exec("SELECT * FROM test.outcome WHERE c1 = 'k' FOR UPDATE"); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- w.do() }()
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			var n int
			if err := live.QueryRow("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE INFO LIKE ?", w.running).Scan(&n); err != nil {
				t.Fatal(err)
			}
			if n > 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the %s's statement never ran on the server", w.name)
			}
		}
		r.Cut()
		err = <-done
		if !errors.Is(err, ErrOutcomeUnknown) || !strings.Contains(err.Error(), "outcome is unknown") || !strings.Contains(err.Error(), `container "oc"`) {
			t.Fatalf("a %s whose connection broke mid-statement: %v; want an error naming the container and saying its outcome is unknown", w.name, err)
		}
		t.Logf("the %s's error: %v", w.name, err)
		lock.Rollback()
	}

	// A set that never reached the server: its outcome is known.
	r.Down()
	if _, err := c.Set(ctx, []byte("k"), Item{Value: []byte("newer")}); err == nil || errors.Is(err, ErrOutcomeUnknown) {
		t.Fatalf("a set with the server unreachable: %v; want an error that does not call the outcome unknown", err)
	}
}
