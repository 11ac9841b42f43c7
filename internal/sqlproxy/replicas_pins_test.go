package sqlproxy

import (
	"context"
	"testing"

	"github.com/keywaydb/keyway/internal/backend"
)

// TestReplicaPinnedReadsStayOnPrimary: with read_from = "replicas", the reads of a transaction, of a session holding
// user variables or a temporary table, and locking reads run on the primary; the same read outside them goes to a
// replica, and the session reads replicas again once a transaction ends. Each case is a session of its own.
func TestReplicaPinnedReadsStayOnPrimary(t *testing.T) {
	s := newReplicaSetup(t)
	db, _ := s.proxy(t, backend.ReadReplicas)
	db.SetMaxIdleConns(0) // a case's session ends with it, pins and all
	ctx := context.Background()
	session := func(t *testing.T) (read func(q string) string, exec func(q string)) {
		t.Helper()
		conn, err := db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		read = func(q string) string {
			t.Helper()
			var name string
			var id int
			if err := conn.QueryRowContext(ctx, q).Scan(&name, &id); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
			return name
		}
		exec = func(q string) {
			t.Helper()
			if _, err := conn.ExecContext(ctx, q); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
		return read, exec
	}
	unpinned := func(t *testing.T, read func(string) string) {
		t.Helper()
		for range 10 {
			if on := read(readWhoami); on == "primary" {
				t.Fatal("an unpinned read ran on the primary (read_from = replicas)")
			}
		}
	}
	for _, c := range []struct{ name, begin, end, query string }{
		{"transaction", "BEGIN", "COMMIT", readWhoami},
		{"user variable", "SET @v = 1", "", readWhoami},
		{"user variable by SELECT INTO", "SELECT 1 INTO @w", "", readWhoami},
		{"temporary table", "CREATE TEMPORARY TABLE tmp_pin (a INT)", "", readWhoami}, // pinned until the session ends
		{"locking read", "", "", readWhoami + " FOR UPDATE"},
		{"shared lock", "", "", readWhoami + " LOCK IN SHARE MODE"},
	} {
		t.Run(c.name, func(t *testing.T) {
			read, exec := session(t)
			unpinned(t, read)
			if c.begin != "" {
				exec(c.begin)
			}
			for range 5 {
				if on := read(c.query); on != "primary" {
					t.Fatalf("a read ran on %s, want the primary", on)
				}
			}
			if c.end != "" {
				exec(c.end)
				unpinned(t, read)
			}
		})
	}
}
