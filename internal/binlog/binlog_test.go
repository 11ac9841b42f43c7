package binlog

import (
	"context"
	"database/sql"
	"encoding/json"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"

	"github.com/keywaydb/keyway/internal/testenv"
	"github.com/keywaydb/keyway/internal/validity"
)

// rig is a real MariaDB (binlog ROW), a registry watching test.kv's key k, and a follower whose dialing the
// test can cut.
type rig struct {
	db      *sql.DB
	reg     *validity.Registry
	kv      *validity.Table
	f       *Follower
	refuse  atomic.Bool // the follower's dials fail while set
	options Options
	m       *testenv.MariaDB
}

func newRig(t *testing.T) *rig {
	t.Helper()
	m := testenv.NewMariaDB(t)
	db, err := sql.Open("mysql", m.AppDSN)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	mustExec(t, db, "CREATE TABLE kv (k VARCHAR(32) PRIMARY KEY, v VARCHAR(32)) ENGINE=InnoDB")
	mustExec(t, db, "INSERT INTO kv VALUES ('a', '1'), ('b', '1')")
	r := &rig{db: db, reg: validity.NewRegistry(), m: m}
	r.kv = r.reg.Table(validity.TableID{Schema: "test", Name: "kv"})
	r.kv.WatchKey(validity.KeyWatch{Column: "k", Norm: func(dst, v []byte) []byte { return append(dst, v...) }})
	r.options = Options{
		Group: "g", User: "app", Password: "secret", ServerID: 4242,
		Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
			if r.refuse.Load() {
				return nil, &net.OpError{Op: "dial", Err: errRefused}
			}
			var d net.Dialer
			return d.DialContext(ctx, "tcp", m.Addr)
		},
		MaxStaleness: 500 * time.Millisecond,
		Registry:     r.reg,
		Logger:       slog.New(slog.DiscardHandler),
	}
	return r
}

var errRefused = &net.AddrError{Err: "refused by the test"}

func (r *rig) start(t *testing.T) {
	t.Helper()
	f, err := Start(context.Background(), r.options)
	if err != nil {
		t.Fatal(err)
	}
	r.f = f
	t.Cleanup(f.Close)
	r.waitFor(t, "the follower to vouch", r.reg.Vouched)
}

func (r *rig) waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s; follower: %+v", what, r.f.Status())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func mustExec(t *testing.T, db interface {
	Exec(string, ...any) (sql.Result, error)
}, q string, args ...any) {
	t.Helper()
	if _, err := db.Exec(q, args...); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

// TestFollowerInvalidatesCommits: a direct write invalidates the keys it changed once it commits, not before,
// and leaves other keys alone; a rolled-back transaction invalidates nothing; and the follower's proof of
// freshness means every commit made before the gate is checked is applied once it is open.
func TestFollowerInvalidatesCommits(t *testing.T) {
	r := newRig(t)
	r.start(t)
	a, b := []byte("a"), []byte("b")

	stamp := r.kv.Stamp()
	tx, err := r.db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	mustExec(t, tx, "UPDATE kv SET v = '2' WHERE k = 'a'")
	time.Sleep(300 * time.Millisecond) // time enough for the follower to see an uncommitted event, were it logged
	if !r.kv.KeyValid(a, stamp) {
		t.Fatal("a row change of an open transaction invalidated the copy")
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	r.waitFor(t, "the commit to invalidate a", func() bool { return !r.kv.KeyValid(a, stamp) })
	if !r.kv.KeyValid(b, stamp) {
		t.Fatal("the write of a invalidated b")
	}

	stamp = r.kv.Stamp()
	tx, err = r.db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	mustExec(t, tx, "UPDATE kv SET v = '3' WHERE k = 'b'")
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	mustExec(t, r.db, "UPDATE kv SET v = '9' WHERE k = 'a'") // a later commit: once it is applied, so is anything before
	r.waitFor(t, "the later commit", func() bool { return !r.kv.KeyValid(a, stamp) })
	if !r.kv.KeyValid(b, stamp) {
		t.Fatal("a rolled-back write invalidated b")
	}

	// A key that changes in an UPDATE invalidates both its old and its new value.
	stamp = r.kv.Stamp()
	mustExec(t, r.db, "UPDATE kv SET k = 'c' WHERE k = 'b'")
	r.waitFor(t, "the renamed key", func() bool { return !r.kv.KeyValid(b, stamp) && !r.kv.KeyValid([]byte("c"), stamp) })

	// DDL drops every copy of the table, and a table-wide copy goes with any row write.
	stamp = r.kv.Stamp()
	mustExec(t, r.db, "TRUNCATE TABLE kv")
	r.waitFor(t, "TRUNCATE to invalidate the table", func() bool { return !r.kv.KeyValid([]byte("zzz"), stamp) })
	st := r.f.Status()
	if st.State != Following || st.Commits == 0 || st.Keys == 0 || st.Tables == 0 || st.GTID == "" {
		t.Fatalf("status %+v", st)
	}
}

// TestFollowerDisconnected: while the follower cannot reach the primary the gate closes within max_staleness
// (reads bypass copies), a write made meanwhile is applied once it reconnects, and the gate opens again.
func TestFollowerDisconnected(t *testing.T) {
	r := newRig(t)
	r.start(t)
	r.refuse.Store(true)
	var id int64
	if err := r.db.QueryRow("SELECT ID FROM information_schema.PROCESSLIST WHERE COMMAND LIKE 'Binlog Dump%'").Scan(&id); err != nil {
		t.Fatalf("finding the follower's connection: %v", err)
	}
	mustExec(t, r.db, "KILL ?", id)
	r.waitFor(t, "the gate to close", func() bool { return !r.reg.Vouched() })
	stamp := r.kv.Stamp()
	mustExec(t, r.db, "UPDATE kv SET v = 'x' WHERE k = 'a'")
	time.Sleep(2 * r.options.MaxStaleness)
	if r.reg.Vouched() {
		t.Fatal("vouched while disconnected")
	}
	if s := r.f.Status(); s.State != Reconnecting || s.Reconn == 0 {
		t.Fatalf("status while cut off: %+v", s)
	}
	r.refuse.Store(false)
	r.waitFor(t, "the write made while disconnected", func() bool { return !r.kv.KeyValid([]byte("a"), stamp) })
	r.waitFor(t, "the gate to open", r.reg.Vouched)
}

// TestCheckSaysHowToFix: an account without replication grants is refused with the GRANT to run.
func TestCheckSaysHowToFix(t *testing.T) {
	r := newRig(t)
	mustExec(t, r.db, "CREATE USER 'plain'@'%' IDENTIFIED BY 'pw'")
	mustExec(t, r.db, "GRANT SELECT ON test.* TO 'plain'@'%'")
	o := r.options
	o.User, o.Password = "plain", "pw"
	_, err := Check(context.Background(), o)
	if err == nil || !strings.Contains(err.Error(), "REPLICATION SLAVE") || !strings.Contains(err.Error(), "GRANT") {
		t.Fatalf("Check = %v, want the missing grant named", err)
	}
	mustExec(t, r.db, "SET GLOBAL binlog_format = 'STATEMENT'")
	defer mustExec(t, r.db, "SET GLOBAL binlog_format = 'ROW'")
	_, err = Check(context.Background(), r.options)
	if err == nil || !strings.Contains(err.Error(), "binlog_format=ROW") {
		t.Fatalf("Check = %v, want binlog_format named", err)
	}
}

// TestOutageLogs: an outage is logged as its changes of state, each once with the error's message: disconnected,
// cannot reconnect, reconnected (the failed attempts counted), however many attempts fail in between; the same
// when the server is stopped for good.
func TestOutageLogs(t *testing.T) {
	r := newRig(t)
	relay := testenv.NewRelay(t, r.m.Addr)
	relay.Up(t)
	var logs testenv.SyncBuffer
	r.options.Logger = slog.New(slog.NewJSONHandler(&logs, nil))
	r.options.RetryMax = 20 * time.Millisecond // many attempts in a short test
	r.options.Dial = func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", relay.Addr)
	}
	r.start(t)
	type line struct {
		Level, Msg, Err string
		Failed          int `json:"failed_attempts"`
	}
	// since returns the lines logged after the first n, and how many there are now.
	since := func(n int) ([]line, int) {
		all := strings.Split(strings.TrimSpace(logs.String()), "\n")
		var out []line
		for _, l := range all[n:] {
			var x line
			if err := json.Unmarshal([]byte(l), &x); err != nil {
				t.Fatalf("log line %q: %v", l, err)
			}
			out = append(out, x)
		}
		return out, len(all)
	}
	_, mark := since(0)
	before := r.f.Status().Reconn

	// The primary goes away (as a killed server does: connections cut, connections refused) for many attempts.
	relay.Down()
	r.waitFor(t, "ten failed attempts and the gate closed", func() bool {
		got, _ := since(mark)
		return r.f.Status().Reconn >= before+10 &&
			slices.ContainsFunc(got, func(l line) bool { return strings.HasPrefix(l.Msg, "binlog follower is behind") })
	})
	relay.Up(t)
	r.waitFor(t, "the follower to say it caught up", func() bool {
		got, _ := since(mark)
		return slices.ContainsFunc(got, func(l line) bool { return strings.HasPrefix(l.Msg, "binlog follower caught up") })
	})
	failures := r.f.Status().Reconn - before // the disconnection and each failed attempt
	got, mark := since(mark)
	var msgs []string
	for _, l := range got {
		msgs = append(msgs, l.Level+" "+l.Msg)
	}
	want := []string{
		"WARN binlog follower disconnected",
		"WARN binlog follower is behind max_staleness or disconnected",
		"WARN binlog follower cannot reconnect",
		"INFO binlog follower reconnected",
		"INFO binlog follower caught up",
	}
	// The freshness lines come from the probe loop: in their order, but not in a fixed order with the others.
	if len(got) != len(want) || !containsInOrder(msgs, want[0], want[2], want[3]) || !containsInOrder(msgs, want[1], want[4]) {
		t.Fatalf("logged in the outage:\n%s\nwant these lines once each:\n%s", strings.Join(msgs, "\n"), strings.Join(want, "\n"))
	}
	for _, l := range got {
		switch {
		case strings.HasPrefix(l.Msg, "binlog follower disconnected"), strings.HasPrefix(l.Msg, "binlog follower cannot reconnect"):
			if l.Err == "" {
				t.Errorf("%q without the error's message", l.Msg)
			}
		case strings.HasPrefix(l.Msg, "binlog follower reconnected"):
			if uint64(l.Failed) != failures-1 {
				t.Errorf("reconnected after failed_attempts=%d, want %d (every attempt after the disconnection)", l.Failed, failures-1)
			}
		}
	}

	// Stopped for good: many attempts, three lines.
	before = r.f.Status().Reconn
	if err := r.m.Stop(); err != nil {
		t.Fatal(err)
	}
	r.waitFor(t, "ten failed attempts and the gate closed", func() bool { return r.f.Status().Reconn >= before+10 && !r.reg.Vouched() })
	r.waitFor(t, "the probe loop to see the gate closed", func() bool { got, _ := since(mark); return len(got) >= 3 })
	time.Sleep(100 * time.Millisecond) // ten more attempts at most: none may log
	got, _ = since(mark)
	msgs = msgs[:0]
	for _, l := range got {
		msgs = append(msgs, l.Level+" "+l.Msg)
	}
	if len(got) != 3 || !containsInOrder(msgs, want[0], want[2]) || !containsInOrder(msgs, want[1]) {
		t.Fatalf("logged with the server stopped:\n%s\nwant:\n%s", strings.Join(msgs, "\n"), strings.Join(want[:3], "\n"))
	}
}

// containsInOrder reports whether lines has a line starting with each of prefixes, in their order.
func containsInOrder(lines []string, prefixes ...string) bool {
	for _, l := range lines {
		if len(prefixes) > 0 && strings.HasPrefix(l, prefixes[0]) {
			prefixes = prefixes[1:]
		}
	}
	return len(prefixes) == 0
}

func TestBefore(t *testing.T) {
	for _, c := range []struct {
		f1   string
		p1   uint32
		f2   string
		p2   uint32
		want bool
	}{
		{"bin.000001", 10, "bin.000001", 20, true},
		{"bin.000001", 20, "bin.000001", 20, false},
		{"bin.000002", 4, "bin.000001", 900, false},
		{"bin.999999", 4, "bin.1000000", 4, true},
	} {
		if got := before(c.f1, c.p1, c.f2, c.p2); got != c.want {
			t.Errorf("before(%s:%d, %s:%d) = %v", c.f1, c.p1, c.f2, c.p2, got)
		}
	}
}

// TestFollowerLostPosition: while the follower is cut off the primary purges the binlog past its checkpoint. On
// reconnecting it cannot account for what changed, so it drops every copy and follows from the primary's
// current position.
func TestFollowerLostPosition(t *testing.T) {
	r := newRig(t)
	r.start(t)
	stamp := r.kv.Stamp()
	r.refuse.Store(true)
	var id int64
	if err := r.db.QueryRow("SELECT ID FROM information_schema.PROCESSLIST WHERE COMMAND LIKE 'Binlog Dump%'").Scan(&id); err != nil {
		t.Fatalf("finding the follower's connection: %v", err)
	}
	mustExec(t, r.db, "KILL ?", id)
	r.waitFor(t, "the follower to notice", func() bool { return r.f.Status().State == Reconnecting })
	r.waitFor(t, "the dump thread to end (the server keeps a log a dump thread reads)", func() bool {
		var n int
		return r.db.QueryRow("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE COMMAND LIKE 'Binlog Dump%'").Scan(&n) == nil && n == 0
	})
	// Changes the follower will never see: a row of a table nobody watches, then the logs go.
	mustExec(t, r.db, "CREATE TABLE other (k INT PRIMARY KEY)")
	unseen := gtidOf(t, r.db, "INSERT INTO other VALUES (1)")
	mustExec(t, r.db, "FLUSH BINARY LOGS")
	var file string
	var pos int64
	var a, b, c any
	if err := r.db.QueryRow("SHOW MASTER STATUS").Scan(&file, &pos, &a, &b); err != nil {
		if err := r.db.QueryRow("SHOW MASTER STATUS").Scan(&file, &pos, &a, &b, &c); err != nil {
			t.Fatal(err)
		}
	}
	// MariaDB purges a log only once its binlog checkpoint is written, which follows FLUSH in the background.
	r.waitFor(t, "PURGE to remove the old log", func() bool {
		mustExec(t, r.db, "PURGE BINARY LOGS TO '"+file+"'")
		var first string
		return r.db.QueryRow("SHOW BINARY LOGS").Scan(&first, &a) == nil && first == file
	})
	r.refuse.Store(false)
	r.waitFor(t, "the gap to be noticed", func() bool { return r.f.Status().Gaps > 0 })
	if r.kv.KeyValid([]byte("zzz"), stamp) {
		t.Fatal("a lost position must drop every copy")
	}
	r.waitFor(t, "following again", func() bool { return r.f.Status().State == Following && r.reg.Vouched() })
	// The insert the follower never saw is covered by every table's position: it restarted after it.
	if got := r.reg.Gate("g").Needs([]validity.TableID{{Schema: "test", Name: "other"}}); !got.Covers(unseen) {
		t.Errorf("after the gap, Needs(other) = %v, before the commit the follower never saw (%v)", got, unseen)
	}
	stamp = r.kv.Stamp()
	mustExec(t, r.db, "UPDATE kv SET v = 'after' WHERE k = 'a'")
	r.waitFor(t, "a write after the gap", func() bool { return !r.kv.KeyValid([]byte("a"), stamp) })
}

// TestCommitsInvalidateTwice: a copy stamped after a commit's invalidation was applied (a fill that may have read
// the row before the storage engine made the commit visible) is dropped by the second application, recheckDelay
// later; a copy of another key is not.
func TestCommitsInvalidateTwice(t *testing.T) {
	r := newRig(t)
	r.start(t)
	a, b := []byte("a"), []byte("b")
	stamp := r.kv.Stamp()
	mustExec(t, r.db, "UPDATE kv SET v = '2' WHERE k = 'a'")
	r.waitFor(t, "the commit to invalidate a", func() bool { return !r.kv.KeyValid(a, stamp) })
	late := r.kv.Stamp() // a fill that started right after the first invalidation
	r.waitFor(t, "the second invalidation of a", func() bool { return !r.kv.KeyValid(a, late) })
	if !r.kv.KeyValid(b, late) {
		t.Fatal("the second invalidation of a dropped b")
	}
}

// TestSettledAnswerIsNotAskedAgain: a watch whose first answer kept the copy and was settled is not asked again at
// the second application while its Settling count stands; it is asked again when the count moved in between, or
// when the first answer was not settled. Every key stays valid (Touched, not changed).
func TestSettledAnswerIsNotAskedAgain(t *testing.T) {
	r := newRig(t)
	mustExec(t, r.db, "CREATE TABLE echo (k VARCHAR(32) PRIMARY KEY, v VARCHAR(32)) ENGINE=InnoDB")
	echo := r.reg.Table(validity.TableID{Schema: "test", Name: "echo"})
	var settling atomic.Uint64
	var mu sync.Mutex
	asked := map[string][]bool{} // key → the first flag of each question
	echo.WatchKey(validity.KeyWatch{Column: "k", Norm: func(dst, v []byte) []byte { return append(dst, v...) },
		Holds: func(key []byte, _ validity.RowImage, first bool) (bool, bool) {
			mu.Lock()
			defer mu.Unlock()
			asked[string(key)] = append(asked[string(key)], first)
			return true, string(key) != "unsettled"
		},
		Settling: settling.Load})
	questions := func(key string) []bool {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(asked[key])
	}
	r.start(t)
	stamp := echo.Stamp()

	mustExec(t, r.db, "INSERT INTO echo VALUES ('moved', '1')")
	r.waitFor(t, "the first application", func() bool { return len(questions("moved")) == 1 })
	settling.Add(1) // something that may store an older copy started after the first look
	r.waitFor(t, "the second application", func() bool { return len(questions("moved")) == 2 })

	mustExec(t, r.db, "INSERT INTO echo VALUES ('quiet', '1'), ('unsettled', '1')")
	r.waitFor(t, "the unsettled answer's second application", func() bool { return len(questions("unsettled")) == 2 })
	// The quiet key's commit is the same: its second application is over, and it was not asked.
	if got := questions("quiet"); !slices.Equal(got, []bool{true}) {
		t.Errorf("settled, nothing started since: asked %v, want only the first application", got)
	}
	if got := questions("moved"); !slices.Equal(got, []bool{true, false}) {
		t.Errorf("settled, then Settling moved: asked %v, want both applications", got)
	}
	for _, k := range []string{"moved", "quiet", "unsettled"} {
		if !echo.KeyValid([]byte(k), stamp) {
			t.Errorf("%s: a change the watch held invalidated the key", k)
		}
	}
}

// gtidOf runs stmts on one connection of db (a plain go-sql-driver session on the primary), in one transaction
// when there are several, and returns the GTID the server gave the last commit (@@last_gtid), as a position.
func gtidOf(t *testing.T, db *sql.DB, stmts ...string) validity.Position {
	t.Helper()
	ctx := context.Background()
	c, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if len(stmts) > 1 {
		stmts = append(append([]string{"BEGIN"}, stmts...), "COMMIT")
	}
	for _, q := range stmts {
		if _, err := c.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	var s string
	if err := c.QueryRowContext(ctx, "SELECT @@last_gtid").Scan(&s); err != nil {
		t.Fatal(err)
	}
	p, err := validity.ParsePosition(s)
	if err != nil || p.IsZero() {
		t.Fatalf("@@last_gtid %q: %v", s, err)
	}
	return p
}

// binlogPos is the primary's @@gtid_binlog_pos.
func binlogPos(t *testing.T, db *sql.DB) validity.Position {
	t.Helper()
	var s string
	if err := db.QueryRow("SELECT @@gtid_binlog_pos").Scan(&s); err != nil {
		t.Fatal(err)
	}
	p, err := validity.ParsePosition(s)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestFollowerNotesPositions: every commit the follower applies becomes the position of the tables it changed,
// registered in the registry or not, on the group's gate: a write made directly on the primary, once applied,
// is its table's position (the primary's gtid_binlog_pos in its domain) and no other table's; a transaction's
// tables all get its GTID; DDL raises the tables it names, and a DDL that does not parse every table; the group's
// newest position follows every commit; and a commit's position is noted by the time its invalidation is seen.
func TestFollowerNotesPositions(t *testing.T) {
	r := newRig(t)
	for _, tbl := range []string{"p1", "p2", "p3"} {
		mustExec(t, r.db, "CREATE TABLE "+tbl+" (k INT PRIMARY KEY) ENGINE=InnoDB")
	}
	start := binlogPos(t, r.db) // the follower starts here: every table may have changed up to it
	r.start(t)
	g := r.reg.Gate("g")
	id := func(name string) validity.TableID { return validity.TableID{Schema: "test", Name: name} }
	needs := func(names ...string) validity.Position {
		ids := make([]validity.TableID, len(names))
		for i, n := range names {
			ids[i] = id(n)
		}
		return g.Needs(ids)
	}
	if got := needs("p1"); !got.Equal(start) || !g.Newest().Equal(start) {
		t.Fatalf("before any commit: Needs(p1) = %v, Newest = %v, want the start position %v", got, g.Newest(), start)
	}

	w1 := gtidOf(t, r.db, "INSERT INTO p1 VALUES (1)")
	r.waitFor(t, "p1's commit to be noted", func() bool { return needs("p1").Covers(w1) })
	primary := binlogPos(t, r.db)
	d := w1.GTIDs()[0].Domain
	if got := needs("p1"); !got.Equal(w1.Merge(start)) || got.Seq(d) != primary.Seq(d) {
		t.Errorf("Needs(p1) = %v, want %v: the write's GTID, the primary's gtid_binlog_pos %v in its domain", got, w1, primary)
	}
	for _, other := range []string{"p2", "p3", "kv", "never_written"} {
		if got := needs(other); !got.Equal(start) {
			t.Errorf("a write of p1 moved Needs(%s) to %v (want the start position %v)", other, got, start)
		}
	}
	if !g.Newest().Covers(w1) {
		t.Errorf("Newest %v is before the write %v", g.Newest(), w1)
	}

	w2 := gtidOf(t, r.db, "INSERT INTO p2 VALUES (1)", "INSERT INTO p3 VALUES (1)", "INSERT INTO p2 VALUES (2)")
	r.waitFor(t, "the transaction to be noted", func() bool { return needs("p3").Covers(w2) })
	for _, c := range []struct {
		names []string
		want  validity.Position
	}{
		{[]string{"p2"}, w2}, {[]string{"p3"}, w2}, {[]string{"p1"}, w1}, {[]string{"p1", "p2"}, w2}, {[]string{"kv"}, start},
	} {
		if got := needs(c.names...); !got.Equal(c.want.Merge(start)) {
			t.Errorf("Needs(%v) = %v, want %v", c.names, got, c.want)
		}
	}
	if got := g.Newest(); !got.Equal(binlogPos(t, r.db)) {
		t.Errorf("Newest = %v, want the primary's gtid_binlog_pos %v", got, binlogPos(t, r.db))
	}

	// A registered table: its position is noted before its invalidation is applied.
	stamp := r.kv.Stamp()
	w3 := gtidOf(t, r.db, "UPDATE kv SET v = 'p' WHERE k = 'a'")
	r.waitFor(t, "the commit to invalidate a", func() bool { return !r.kv.KeyValid([]byte("a"), stamp) })
	if got := needs("kv"); !got.Covers(w3) {
		t.Errorf("a's invalidation was applied with Needs(kv) = %v, before the commit's %v", got, w3)
	}

	// DDL raises the tables it names; a DDL that does not parse (CREATE OR REPLACE TABLE is MariaDB's own) every one.
	w4 := gtidOf(t, r.db, "ALTER TABLE p1 ADD COLUMN x INT")
	r.waitFor(t, "the DDL to be noted", func() bool { return needs("p1").Covers(w4) })
	if got := needs("p2"); !got.Equal(w2) {
		t.Errorf("DDL of p1 moved Needs(p2) to %v", got)
	}
	w5 := gtidOf(t, r.db, "CREATE OR REPLACE TABLE p9 (k INT PRIMARY KEY)")
	r.waitFor(t, "the unparsed DDL to be noted", func() bool { return g.Newest().Covers(w5) })
	for _, n := range []string{"p2", "kv", "p9", "never_written"} {
		if got := needs(n); !got.Covers(w5) {
			t.Errorf("after a DDL whose tables keyway cannot name, Needs(%s) = %v, before it (%v)", n, got, w5)
		}
	}
	if other := r.reg.Gate("other"); !other.Newest().IsZero() || !other.Needs([]validity.TableID{id("p1")}).IsZero() {
		t.Error("the follower noted positions on another group's gate")
	}
}
