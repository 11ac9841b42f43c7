package testenv

import (
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
)

// open is a pool on dsn, closed when the test ends.
func open(t *testing.T, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func mustExec(t *testing.T, db *sql.DB, q string, args ...any) {
	t.Helper()
	if _, err := db.ExecContext(t.Context(), q, args...); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

// value reads t.v for k on m ("" when the row is missing), as app.
func value(t *testing.T, m *MariaDB, k int) string {
	t.Helper()
	db, err := sql.Open("mysql", m.AppDSN)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var v string
	err = db.QueryRowContext(t.Context(), "SELECT v FROM test.t WHERE k = ?", k).Scan(&v)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		t.Fatalf("read k=%d on %s: %v", k, m.Addr, err)
	}
	return v
}

// binlogPos is m's gtid_binlog_pos.
func binlogPos(t *testing.T, m *MariaDB) string {
	t.Helper()
	p, err := m.GTIDs(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return p.Binlog
}

func check(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestReplication: one primary, two replicas; writes flow, replicas are read-only, a replica can be held back.
func TestReplication(t *testing.T) {
	start := time.Now()
	r := NewReplication(t, ReplicationOptions{})
	t.Logf("primary + 2 replicas started in %v", time.Since(start))
	ctx := t.Context()
	p, a, b := r.Primary, r.Replicas[0], r.Replicas[1]
	primary := open(t, p.AppDSN)

	t.Run("roles", func(t *testing.T) {
		for i, m := range r.Members() {
			var id, ro, lsu int
			var user string
			db := open(t, m.KwDSN)
			if err := db.QueryRowContext(ctx, "SELECT @@server_id, @@read_only, @@log_slave_updates, CURRENT_USER()").
				Scan(&id, &ro, &lsu, &user); err != nil {
				t.Fatal(err)
			}
			st, err := m.SlaveStatus(ctx)
			check(t, err)
			if id != i+1 || ro != min(i, 1) || lsu != 1 || user != "kw@%" || (st == nil) != (i == 0) {
				t.Errorf("member %d: server_id %d read_only %d log_slave_updates %d user %s replica %v", i, id, ro, lsu, user, st != nil)
			}
		}
		if pos := binlogPos(t, p); pos != "" {
			t.Errorf("primary's gtid_binlog_pos %q after start, want empty: setup stays out of the binlog", pos)
		}
	})

	t.Run("write reaches both replicas", func(t *testing.T) {
		mustExec(t, primary, "CREATE TABLE t (k INT PRIMARY KEY, v VARCHAR(20))")
		mustExec(t, primary, "INSERT INTO t VALUES (1, 'one')")
		check(t, r.Sync(ctx, 10*time.Second))
		for _, m := range r.Replicas {
			if v := value(t, m, 1); v != "one" {
				t.Errorf("replica %s has k=1 %q, want one", m.Addr, v)
			}
		}
		pp, err := p.GTIDs(ctx)
		check(t, err)
		ap, err := a.GTIDs(ctx)
		check(t, err)
		if pp.Binlog == "" || ap.Slave != pp.Binlog || ap.Binlog != pp.Binlog || ap.Current != pp.Binlog {
			t.Errorf("primary %+v, replica %+v: want the replica's positions equal to the primary's binlog position", pp, ap)
		}
	})

	t.Run("replicas are read-only for kw", func(t *testing.T) {
		_, err := open(t, a.KwDSN).ExecContext(ctx, "INSERT INTO t VALUES (100, 'no')")
		var me *mysql.MySQLError
		if !errors.As(err, &me) || me.Number != 1290 {
			t.Fatalf("kw's insert on a read-only replica: %v, want error 1290 (--read-only)", err)
		}
		mustExec(t, open(t, p.KwDSN), "INSERT INTO t VALUES (2, 'two')")
	})

	t.Run("stopped SQL thread falls behind, then catches up", func(t *testing.T) {
		check(t, a.StopSQLThread(ctx))
		mustExec(t, primary, "INSERT INTO t VALUES (3, 'three')")
		pos := binlogPos(t, p)
		check(t, b.WaitCaughtUp(ctx, pos, 10*time.Second))
		if err := a.WaitCaughtUp(ctx, pos, 200*time.Millisecond); err == nil {
			t.Fatal("a replica with its SQL thread stopped caught up")
		}
		if v := value(t, a, 3); v != "" {
			t.Fatalf("stopped replica has k=3 %q", v)
		}
		check(t, a.StartSQLThread(ctx))
		check(t, a.WaitCaughtUp(ctx, pos, 10*time.Second))
		if v := value(t, a, 3); v != "three" {
			t.Fatalf("caught-up replica has k=3 %q, want three", v)
		}
	})

	t.Run("MASTER_DELAY", func(t *testing.T) {
		check(t, a.SetDelay(ctx, 2))
		mustExec(t, primary, "INSERT INTO t VALUES (4, 'four')")
		pos := binlogPos(t, p)
		// Timestamps have whole seconds: a delay of 2 s holds a write back for more than 1 s.
		if err := a.WaitCaughtUp(ctx, pos, 500*time.Millisecond); err == nil {
			t.Fatal("a replica with MASTER_DELAY = 2 applied a write within 500ms")
		}
		check(t, b.WaitCaughtUp(ctx, pos, 10*time.Second))
		check(t, a.WaitCaughtUp(ctx, pos, 10*time.Second))
		check(t, a.SetDelay(ctx, 0))
	})
}

// TestReplicationFailover: kill -9 the primary, promote a replica (which first applies what it received), repoint
// the other; the old primary restarts with its data and rejoins as a replica; a killed replica restarts and resumes.
func TestReplicationFailover(t *testing.T) {
	r := NewReplication(t, ReplicationOptions{})
	ctx := t.Context()
	old, a, b := r.Primary, r.Replicas[0], r.Replicas[1]
	mustExec(t, open(t, old.AppDSN), "CREATE TABLE t (k INT PRIMARY KEY, v VARCHAR(20))")
	check(t, r.Sync(ctx, 10*time.Second))

	// a receives k=1 but does not apply it before the primary dies; Promote applies it.
	check(t, a.StopSQLThread(ctx))
	mustExec(t, open(t, old.AppDSN), "INSERT INTO t VALUES (1, 'one')")
	pos := binlogPos(t, old)
	check(t, b.WaitCaughtUp(ctx, pos, 10*time.Second))
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		st, err := a.SlaveStatus(ctx)
		check(t, err)
		if st["Gtid_IO_Pos"] == pos {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("replica a received %s, want %s", st["Gtid_IO_Pos"], pos)
		}
	}
	check(t, old.Kill())
	if old.Running() {
		t.Fatal("killed primary still running")
	}
	check(t, r.Promote(ctx, a))
	if r.Primary != a || len(r.Replicas) != 2 || r.Replicas[0] != old || r.Replicas[1] != b {
		t.Fatalf("after Promote: primary %s replicas %v", r.Primary.Addr, r.Replicas)
	}
	if v := value(t, a, 1); v != "one" {
		t.Fatalf("k=1 on the promoted replica: %q, want one", v)
	}
	check(t, r.Repoint(ctx, b, a))
	mustExec(t, open(t, a.KwDSN), "INSERT INTO t VALUES (2, 'two')")
	check(t, b.WaitCaughtUp(ctx, binlogPos(t, a), 10*time.Second))
	if v := value(t, b, 2); v != "two" {
		t.Fatalf("k=2 on the repointed replica: %q, want two", v)
	}

	// The old primary restarts on its own data and port, writable and not replicating, as it was.
	addr := old.Addr
	check(t, old.Start(ctx))
	if old.Addr != addr {
		t.Fatalf("restarted on %s, want %s", old.Addr, addr)
	}
	if v := value(t, old, 1); v != "one" {
		t.Fatalf("k=1 on the restarted old primary: %q, want one", v)
	}
	if st, err := old.SlaveStatus(ctx); err != nil || st != nil {
		t.Fatalf("restarted old primary replicates (%v, %v)", st, err)
	}
	check(t, r.Repoint(ctx, old, a))
	check(t, r.Sync(ctx, 10*time.Second))
	if v := value(t, old, 2); v != "two" {
		t.Fatalf("k=2 on the repointed old primary: %q, want two", v)
	}

	// A killed replica restarts read-only and resumes replicating by itself.
	check(t, b.Kill())
	mustExec(t, open(t, a.AppDSN), "INSERT INTO t VALUES (3, 'three')")
	check(t, b.Start(ctx))
	check(t, b.WaitCaughtUp(ctx, binlogPos(t, a), 10*time.Second))
	var ro int
	if err := open(t, b.AppDSN).QueryRowContext(ctx, "SELECT @@read_only").Scan(&ro); err != nil || ro != 1 {
		t.Fatalf("restarted replica: read_only %d (%v), want 1", ro, err)
	}
	if v := value(t, b, 3); v != "three" {
		t.Fatalf("k=3 on the restarted replica: %q, want three", v)
	}
}

// TestReplicationSemiSync: with semi-sync (AFTER_SYNC) the primary waits for a replica's acknowledgement, and a
// promoted replica does too.
func TestReplicationSemiSync(t *testing.T) {
	r := NewReplication(t, ReplicationOptions{SemiSync: true})
	ctx := t.Context()
	p := r.Primary
	status := func(name string) string {
		t.Helper()
		v, err := p.GlobalStatus(ctx, name)
		check(t, err)
		return v
	}
	before := status("Rpl_semi_sync_master_yes_tx")
	primary := open(t, p.AppDSN)
	mustExec(t, primary, "CREATE TABLE t (k INT PRIMARY KEY, v VARCHAR(20))")
	mustExec(t, primary, "INSERT INTO t VALUES (1, 'one')")
	var wait string
	if err := primary.QueryRowContext(ctx, "SELECT @@rpl_semi_sync_master_wait_point").Scan(&wait); err != nil {
		t.Fatal(err)
	}
	st, clients, yes := status("Rpl_semi_sync_master_status"), status("Rpl_semi_sync_master_clients"), status("Rpl_semi_sync_master_yes_tx")
	if wait != "AFTER_SYNC" || st != "ON" || clients != "2" || before != "0" || yes != "2" {
		t.Fatalf("wait point %s, status %s, clients %s, acknowledged transactions %s → %s; want AFTER_SYNC, ON, 2, 0 → 2",
			wait, st, clients, before, yes)
	}
	for _, m := range r.Replicas {
		if v, err := m.GlobalStatus(ctx, "Rpl_semi_sync_slave_status"); err != nil || v != "ON" {
			t.Errorf("replica %s: Rpl_semi_sync_slave_status %q (%v), want ON", m.Addr, v, err)
		}
	}

	check(t, p.Kill())
	a, b := r.Replicas[0], r.Replicas[1]
	check(t, r.Promote(ctx, a))
	check(t, r.Repoint(ctx, b, a))
	mustExec(t, open(t, a.AppDSN), "INSERT INTO t VALUES (2, 'two')")
	if v, err := a.GlobalStatus(ctx, "Rpl_semi_sync_master_yes_tx"); err != nil || v != "1" {
		t.Fatalf("new primary: Rpl_semi_sync_master_yes_tx %q (%v), want 1", v, err)
	}
	// The acknowledgement says b received the insert, not that it applied it.
	check(t, b.WaitCaughtUp(ctx, binlogPos(t, a), 10*time.Second))
	if v := value(t, b, 2); v != "two" {
		t.Fatalf("k=2 on the semi-sync replica: %q, want two", v)
	}
}
