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

// TestOpenWithBackendDown: a container whose backend cannot be reached opens
// anyway; every operation fails with a *NotCheckedError naming the container,
// the backend and the cause, and nothing is written; once the backend is
// reachable the container checks its table by itself and serves, logging
// each transition once.
func TestOpenWithBackendDown(t *testing.T) {
	live := openDB(t)
	exec(t, live, "DROP TABLE IF EXISTS test.degraded")
	exec(t, live, "CREATE TABLE test.degraded (c1 VARCHAR(32) PRIMARY KEY, c2 VARCHAR(64), c4 BIGINT UNSIGNED)")
	exec(t, live, "INSERT INTO test.degraded VALUES ('there', 'v', 1000000)")

	m := testenv.SharedMariaDB(t)
	r := testenv.NewRelay(t, m.Addr)
	cfg, err := mysql.ParseDSN(m.AppDSN)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Addr = r.Addr
	db := OpenDB(cfg)
	defer db.Close()
	var logs testenv.SyncBuffer
	c, err := Open(ctx, db, Def{Name: "deg", Schema: "test", Table: "degraded", KeyColumn: "c1", ValueColumns: []string{"c2"},
		CASColumn: "c4"}, Options{Backend: "group main (" + r.Addr + ")", Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatalf("Open with the backend down: %v", err)
	}
	defer c.Close()
	if c.Checked() {
		t.Fatal("checked with the backend down")
	}
	_, _, err = c.Get(ctx, []byte("there"))
	var nc *NotCheckedError
	if !errors.As(err, &nc) || !strings.Contains(err.Error(), `container "deg"`) ||
		!strings.Contains(err.Error(), "group main ("+r.Addr+") unavailable") || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("get while not checked: %v, want a *NotCheckedError naming the container, backend and cause", err)
	}
	if _, err := c.Set(ctx, []byte("k"), Item{Value: []byte("v")}); !errors.As(err, &nc) {
		t.Fatalf("set while not checked: %v", err)
	}
	if errs := c.WriteRows(ctx, []Row{{Key: []byte("k"), Item: Item{Value: []byte("v")}}}); !errors.As(errs[0], &nc) || Refused(errs[0]) {
		t.Fatalf("write-behind rows while not checked: %v, want a *NotCheckedError that is not Refused (the queue keeps them)", errs[0])
	}
	if err := c.Check([]byte("k"), Item{Value: []byte("v")}); !errors.As(err, &nc) {
		t.Fatalf("check while not checked: %v", err)
	}
	if _, err := c.Delete(ctx, []byte("there")); !errors.As(err, &nc) {
		t.Fatalf("delete while not checked: %v", err)
	}

	r.Up(t)
	deadline := time.Now().Add(10 * time.Second)
	for !c.Checked() {
		if time.Now().After(deadline) {
			t.Fatalf("not checked 10s after the backend came up; log:\n%s", logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if it, ok, err := c.Get(ctx, []byte("there")); err != nil || !ok || string(it.Value) != "v" {
		t.Fatalf("get once checked: %v %v %v", it, ok, err)
	}
	cas, err := c.Set(ctx, []byte("k"), Item{Value: []byte("new")})
	if err != nil {
		t.Fatal(err)
	}
	if cas <= 1000000 {
		t.Fatalf("cas %d after going live, want above the table's max(cas) 1000000", cas)
	}
	out := logs.String()
	if n := strings.Count(out, "container waiting for its backend"); n != 1 {
		t.Errorf("%d 'waiting' lines, want 1:\n%s", n, out)
	}
	if n := strings.Count(out, "container checked, serving"); n != 1 {
		t.Errorf("%d 'serving' lines, want 1:\n%s", n, out)
	}
}

// TestOpenBackendDownClose: Close stops the checks of a container that never
// reached its backend, promptly.
func TestOpenBackendDownClose(t *testing.T) {
	m := testenv.SharedMariaDB(t)
	r := testenv.NewRelay(t, m.Addr)
	cfg, err := mysql.ParseDSN(m.AppDSN)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Addr = r.Addr
	db := OpenDB(cfg)
	defer db.Close()
	c, err := Open(ctx, db, Def{Name: "deg", Schema: "test", Table: "degraded", KeyColumn: "c1", ValueColumns: []string{"c2"}},
		Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { c.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not return with the backend down")
	}
	if _, err := c.Set(ctx, []byte("k"), Item{Value: []byte("v")}); err == nil {
		t.Fatal("set after Close")
	}
}

// TestOpenReachableConfigErrorFails: with the backend up, a table that does
// not fit still fails Open (a configuration error is never waited out).
func TestOpenReachableConfigErrorFails(t *testing.T) {
	_, err := Open(ctx, openDB(t), Def{Name: "nope", Schema: "test", Table: "no_such_table", KeyColumn: "k", ValueColumns: []string{"v"}}, Options{})
	if err == nil || !strings.Contains(err.Error(), "table does not exist") {
		t.Fatalf("Open on a missing table: %v", err)
	}
}
