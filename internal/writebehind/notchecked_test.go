package writebehind

import (
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/keywaydb/keyway/internal/container"
	"github.com/keywaydb/keyway/internal/testenv"
)

// notCheckedTable opens a container on test.name through a relay that is
// not started: the container opens not checked and goes live once the
// relay starts.
func notCheckedTable(t *testing.T, name string) (*container.Container, *testenv.Relay) {
	t.Helper()
	m := testenv.SharedMariaDB(t)
	r := testenv.NewRelay(t, m.Addr)
	cfg, err := mysql.ParseDSN(m.AppDSN)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Addr = r.Addr
	db := container.OpenDB(cfg)
	t.Cleanup(func() { db.Close() })
	c, err := container.Open(ctx, db, container.Def{Name: name, Schema: "test", Table: name, KeyColumn: "c1",
		ValueColumns: []string{"c2"}, FlagsColumn: "c3", CASColumn: "c4", ExpiryColumn: "c5"},
		container.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if c.Checked() {
		t.Fatal("checked with its backend down")
	}
	return c, r
}

// TestNotCheckedMixedCaseKeys: a write of "K" journaled by a run that knew
// the table (case-insensitive key column: journal key "k") is found while
// the next run's container is not checked, by "K" (the row as written) and
// by "k" (its key); before, "K" missed (the queue looked up "K" in a map
// keyed "k"), so a get answered SERVER_ERROR instead of the queued value,
// and a delete of "K" did not wait for it. A row the queue cannot place
// while not checked is an error, never "no write waits".
func TestNotCheckedMixedCaseKeys(t *testing.T) {
	db := testenv.SharedDB(t)
	dead := deadTable(t, db, "wb_mixed")
	if _, err := db.Exec("INSERT INTO test.wb_mixed VALUES ('k', 'old', 0, 1, 0)"); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	s := openStore(t, dir)
	q := New(dead, s, "@@wb_mixed.", Options{Window: time.Hour, WaitTimeout: 200 * time.Millisecond})
	if err := q.Put([]byte("K"), container.Item{Value: []byte("queued"), CAS: 5}, nil); err != nil {
		t.Fatal(err)
	}
	q.Close() // the table is dead: the write stays in the journal
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = openStore(t, dir)
	defer s.Close()
	c, _ := notCheckedTable(t, "wb_mixed")
	q = New(c, s, "@@wb_mixed.", Options{Window: time.Hour, WaitTimeout: 200 * time.Millisecond})
	defer q.Close()
	for _, k := range []string{"K", "k"} {
		if it, ok, err := q.Get([]byte(k)); err != nil || !ok || string(it.Value) != "queued" {
			t.Errorf("get %q while not checked: %q %v %v, want the queued write", k, it.Value, ok, err)
		}
	}
	var nc *container.NotCheckedError
	if _, ok, err := q.Get([]byte("other")); !errors.As(err, &nc) {
		t.Errorf("get of a row the queue cannot place while not checked: ok %v err %v, want a *NotCheckedError", ok, err)
	}
	if err := q.Sync([]byte("other")); !errors.As(err, &nc) {
		t.Errorf("sync of a row the queue cannot place while not checked: %v, want a *NotCheckedError", err)
	}
	// "K" waits: Sync waits for it (and gives up, the container being not checked) instead of returning at once.
	if err := q.Sync([]byte("K")); !errors.Is(err, ErrBehind) {
		t.Errorf("sync K while not checked: %v, want ErrBehind (its write waits)", err)
	}
}

// TestGoingLiveKeysFirst: when the container goes live, the queue keys its
// waiting writes by the table's rule before anything can see the container
// live, so no command on a row acts ahead of the row's waiting write. A hook
// registered after the queue's runs in that moment (the container still
// answers "not checked") and must find a record journaled under a key the
// live rule does not make ("Q ", as written by hand) by any spelling of its
// row; afterwards Sync puts it in the table before anything else touches the
// row.
func TestGoingLiveKeysFirst(t *testing.T) {
	db := testenv.SharedDB(t)
	table(t, db, "wb_live", true)
	if _, err := db.Exec("INSERT INTO test.wb_live VALUES ('k', 'old', 0, 1, 0)"); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	s := openStore(t, dir)
	// As the run before wrote them: "K" under "k"; and a record whose key is
	// its row as written (a run whose collation did not fold case).
	if err := s.JournalPut("@@wb_live.k", encode([]byte("K"), container.Item{Value: []byte("queued"), CAS: 5}))(); err != nil {
		t.Fatal(err)
	}
	if err := s.JournalPut("@@wb_live.Q", encode([]byte("Q"), container.Item{Value: []byte("q"), CAS: 6}))(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openStore(t, dir) // the journal is taken as loaded from disk
	c, r := notCheckedTable(t, "wb_live")
	q := New(c, s, "@@wb_live.", Options{Window: time.Hour})
	defer q.Close()
	if _, ok, err := q.Get([]byte("q")); err == nil {
		t.Fatalf("get q while not checked: ok %v, want an error (the rule is unknown)", ok)
	}
	type seen struct {
		value   string
		ok      bool
		err     error
		checked bool
	}
	var inHook []seen
	if !c.OnLive(func(func(string) string) {
		for _, k := range []string{"K", "k", "q", "Q"} {
			it, ok, err := q.Get([]byte(k))
			inHook = append(inHook, seen{string(it.Value), ok, err, c.Checked()})
		}
	}) {
		t.Fatal("container live before its backend came up")
	}
	r.Up(t)
	deadline := time.Now().Add(10 * time.Second)
	for !c.Checked() {
		if time.Now().After(deadline) {
			t.Fatal("not checked 10s after the backend came up")
		}
		time.Sleep(10 * time.Millisecond)
	}
	want := []seen{{"queued", true, nil, false}, {"queued", true, nil, false}, {"q", true, nil, false}, {"q", true, nil, false}}
	if len(inHook) != len(want) {
		t.Fatalf("hook saw %+v", inHook)
	}
	for i := range want {
		if inHook[i] != want[i] {
			t.Errorf("at going live, get %d: %+v, want %+v", i, inHook[i], want[i])
		}
	}
	if err := q.Sync([]byte("k")); err != nil {
		t.Fatal(err)
	}
	if got := rows(t, db, "wb_live")["k"]; got != "queued/0/5" { // the row keeps its key "k"
		t.Fatalf("row after sync of k: %q, want the queued write", got)
	}
	if err := q.Drain(); err != nil {
		t.Fatal(err)
	}
	if got := rows(t, db, "wb_live"); len(got) != 2 || got["Q"] != "q/0/6" {
		t.Fatalf("rows after drain: %v", got)
	}
	// Re-keyed: the record of Q went under q and, written, left; nothing is left in the journal.
	q.Close()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openStore(t, dir)
	defer s.Close()
	if left := s.TakeJournal("@@wb_live."); len(left) != 0 {
		t.Fatalf("journal after drain: %q", left)
	}
}
