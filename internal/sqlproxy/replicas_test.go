package sqlproxy

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keywaydb/keyway/internal/backend"
	"github.com/keywaydb/keyway/internal/testenv"
	"github.com/keywaydb/keyway/internal/validity"
)

// replicaSetup is a primary with two replicas, each holding its own row in table whoami (written outside the
// binlog), so a statement that joins whoami says which server answered it; t1 is an ordinary replicated table.
type replicaSetup struct {
	repl  *testenv.Replication
	names map[string]string // server address → name
	group *backend.Group    // the group of the last proxy started
}

func newReplicaSetup(t *testing.T) *replicaSetup {
	t.Helper()
	return newReplicaSetupWith(t, testenv.ReplicationOptions{})
}

func newReplicaSetupWith(t *testing.T, o testenv.ReplicationOptions) *replicaSetup {
	t.Helper()
	r := testenv.NewReplication(t, o)
	ctx := context.Background()
	p := openDSN(t, r.Primary.AppDSN)
	mustExec(t, p, "CREATE TABLE whoami (id INT PRIMARY KEY, name VARCHAR(20))")
	mustExec(t, p, "CREATE TABLE t1 (id INT PRIMARY KEY, v INT)")
	mustExec(t, p, "CREATE TABLE t2 (id INT PRIMARY KEY, v INT)")
	mustExec(t, p, "CREATE TABLE acked (w INT, n INT, PRIMARY KEY (w, n))")
	mustExec(t, p, "INSERT INTO t1 VALUES (1, 0)")
	mustExec(t, p, "INSERT INTO t2 VALUES (1, 0)")
	if err := r.Sync(ctx, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	s := &replicaSetup{repl: r, names: map[string]string{}}
	for i, m := range r.Members() {
		name := "primary"
		if i > 0 {
			name = fmt.Sprintf("replica%d", i)
		}
		s.names[m.Addr] = name
		if err := m.ExecUnlogged(ctx, "REPLACE INTO test.whoami VALUES (1, '"+name+"')"); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

func openDSN(t *testing.T, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// proxy starts keyway's SQL door in front of the set with readFrom, and waits until the position watcher knows
// every member.
func (s *replicaSetup) proxy(t *testing.T, readFrom string) (db *sql.DB, addr string) {
	t.Helper()
	cfg := testConfig(s.repl.Primary.Addr)
	for _, m := range s.repl.Replicas {
		cfg.Groups[0].Replicas = append(cfg.Groups[0].Replicas, backend.Replica{Member: backend.Member{Network: "tcp", Address: m.Addr}})
	}
	cfg.Groups[0].ReadFrom = readFrom
	cfg.Groups[0].MaxReplicaLag = time.Minute // a slow machine's test must not make a stopped replica ineligible
	cfg.Groups[0].ReplicationUser, cfg.Groups[0].ReplicationPassword = "repl", "repl"
	reg := validity.NewRegistry()
	reg.Gate("main")
	srv, addr := startProxyOpts(t, cfg.with(t, func(o *Options) { o.Validity = reg }))
	s.group = srv.groups[0]
	waitMembersKnown(t, s.group)
	return open(t, "app", "secret", addr, ""), addr
}

// waitMembersKnown waits until g's position watcher knows every member of g up.
func waitMembersKnown(t *testing.T, g *backend.Group) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		known, ms := 0, g.Members()
		for _, m := range ms {
			if m.Known && m.Up {
				known++
			}
		}
		if known == len(ms) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the position watcher does not know every member of group %s: %+v", g.Name(), ms)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// who runs q (its first column is whoami's name, its second a value) through db and returns both.
func who(t *testing.T, db *sql.DB, q string) (server string, v int) {
	t.Helper()
	if err := db.QueryRow(q).Scan(&server, &v); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return server, v
}

const (
	readT1     = "SELECT w.name, t.v FROM t1 t JOIN whoami w ON w.id = 1 WHERE t.id = 1"
	readT2     = "SELECT w.name, t.v FROM t2 t JOIN whoami w ON w.id = 1 WHERE t.id = 1"
	readWhoami = "SELECT name, id FROM whoami WHERE id = 1"
)

// TestReplicaReads: reads spread over the replicas (and the primary with read_from = any, and only the primary
// with read_from = primary); writes land on the primary.
func TestReplicaReads(t *testing.T) {
	s := newReplicaSetup(t)
	for _, tc := range []struct {
		readFrom string
		want     []string // the servers that must answer some reads
		never    []string
	}{
		{backend.ReadReplicas, []string{"replica1", "replica2"}, []string{"primary"}},
		{backend.ReadAny, []string{"primary", "replica1", "replica2"}, nil},
		{backend.ReadPrimary, []string{"primary"}, []string{"replica1", "replica2"}},
	} {
		t.Run(tc.readFrom, func(t *testing.T) {
			db, _ := s.proxy(t, tc.readFrom)
			seen := map[string]int{}
			for range 90 {
				server, _ := who(t, db, readWhoami)
				seen[server]++
			}
			for _, w := range tc.want {
				if seen[w] == 0 {
					t.Errorf("%s answered no read of 90: %v", w, seen)
				}
			}
			for _, n := range tc.never {
				if seen[n] != 0 {
					t.Errorf("%s answered %d reads: %v", n, seen[n], seen)
				}
			}
			// A write goes to the primary: a replica's own write would not replicate, and v would differ there.
			mustExec(t, db, "UPDATE t2 SET v = v + 1 WHERE id = 1")
			var v int
			if err := openDSN(t, s.repl.Primary.AppDSN).QueryRow("SELECT v FROM t2 WHERE id = 1").Scan(&v); err != nil {
				t.Fatal(err)
			}
			if err := s.repl.Sync(context.Background(), 20*time.Second); err != nil {
				t.Fatalf("the replicas do not catch up (a write landed on one?): %v", err)
			}
			for _, m := range s.repl.Replicas {
				var rv int
				if err := openDSN(t, m.AppDSN).QueryRow("SELECT v FROM t2 WHERE id = 1").Scan(&rv); err != nil || rv != v {
					t.Errorf("replica %s has v = %d (err %v), the primary %d", s.names[m.Addr], rv, err, v)
				}
			}
		})
	}
}

// TestReplicaBehindGetsNoStaleReads: a replica whose SQL thread is stopped gets no reads of a table written
// through keyway since, and still gets reads of tables no one wrote; every read sees the write before it.
func TestReplicaBehindGetsNoStaleReads(t *testing.T) {
	s := newReplicaSetup(t)
	db, addr := s.proxy(t, backend.ReadReplicas)
	readers := open(t, "app", "secret", addr, "") // other clients' sessions read what db's wrote
	behind := s.repl.Replicas[0]
	if err := behind.StopSQLThread(context.Background()); err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for i := 1; i <= 60; i++ {
		mustExec(t, db, "UPDATE t1 SET v = ? WHERE id = 1", i)
		server, v := who(t, readers, readT1)
		seen[server]++
		if v != i {
			t.Fatalf("read %d after writing v = %d through keyway: v = %d, answered by %s", i, i, v, server)
		}
		if server == s.names[behind.Addr] {
			t.Fatalf("the replica with its SQL thread stopped answered a read of t1, written since")
		}
	}
	t.Logf("reads of t1 after each write: %v", seen)
	// Tables no one wrote since still go to the stopped replica too.
	seen = map[string]int{}
	for range 60 {
		server, _ := who(t, db, readT2)
		seen[server]++
	}
	if seen[s.names[behind.Addr]] == 0 {
		t.Errorf("the replica behind got no read of t2, which no one wrote: %v", seen)
	}
	if seen["primary"] != 0 {
		t.Errorf("reads of an unwritten table went to the primary: %v", seen)
	}
}

// TestTwoPrimariesFenced: a replica made writable and taken out of replication beside the primary makes keyway
// refuse the group's writes with an error naming both; once it is read-only again, writes go through.
func TestTwoPrimariesFenced(t *testing.T) {
	s := newReplicaSetup(t)
	db, _ := s.proxy(t, backend.ReadReplicas)
	ctx := context.Background()
	rogue := openDSN(t, s.repl.Replicas[0].AppDSN)
	for _, q := range []string{"STOP SLAVE", "RESET SLAVE ALL", "SET GLOBAL read_only = 0"} {
		mustExec(t, rogue, q)
	}
	var err error
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if _, err = db.ExecContext(ctx, "UPDATE t2 SET v = v + 1 WHERE id = 1"); err != nil {
			break
		}
	}
	if err == nil || !strings.Contains(err.Error(), s.repl.Primary.Addr) || !strings.Contains(err.Error(), s.repl.Replicas[0].Addr) {
		t.Fatalf("a write with two writable primaries: %v; want an error naming both", err)
	}
	// Reads a replica covers still work.
	if server, _ := who(t, db, readWhoami); server == "primary" || server == "replica1" {
		t.Errorf("a read while fenced was answered by %s", server)
	}
	mustExec(t, rogue, "SET GLOBAL read_only = 1")
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if _, err = db.ExecContext(ctx, "UPDATE t2 SET v = v + 1 WHERE id = 1"); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("writes still refused once the second primary is read-only: %v", err)
		}
	}
}

// TestPrimaryKilled: a killed primary is noticed by the position watcher: writes get an error naming the group (no
// retry), and reads replicas cover still succeed.
func TestPrimaryKilled(t *testing.T) {
	s := newReplicaSetup(t)
	db, _ := s.proxy(t, backend.ReadReplicas)
	if err := s.repl.Primary.Kill(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	_, err := db.Exec("UPDATE t2 SET v = v + 1 WHERE id = 1")
	if err == nil || !strings.Contains(err.Error(), "backend group main") {
		t.Fatalf("a write after the primary was killed: %v; want keyway's error naming the group", err)
	}
	for range 20 {
		if server, _ := who(t, db, readT2); server == "primary" {
			t.Fatal("the dead primary answered a read")
		}
	}
}

// TestReplicaPoolsInStats: the replicas' pools are reported with the group's, under their own addresses, and the
// reads are counted by the member routing sent them to.
func TestReplicaPoolsInStats(t *testing.T) {
	s := newReplicaSetup(t)
	db, _ := s.proxy(t, backend.ReadReplicas)
	for range 30 {
		who(t, db, readWhoami)
	}
	pools := map[string]int{}
	for _, p := range s.group.Stats() {
		pools[p.Address] += p.Open
	}
	reads := map[string]int64{}
	for _, m := range s.group.Members() {
		reads[m.Address] = m.Reads
	}
	for _, r := range s.repl.Replicas {
		if pools[r.Addr] == 0 || reads[r.Addr] == 0 {
			t.Errorf("replica %s: %d open connections in the group's pool stats, %d reads counted (pools %v, reads %v)",
				r.Addr, pools[r.Addr], reads[r.Addr], pools, reads)
		}
	}
	if pools[s.repl.Primary.Addr] == 0 { // the logins
		t.Errorf("no primary pool in the stats: %v", pools)
	}
}

// TestFollowPromotedPrimary: the primary dies and an operator promotes a replica and repoints the other; keyway
// follows the new primary: writes through it succeed there (a statement prepared before included) and replicate,
// and reads go on.
func TestFollowPromotedPrimary(t *testing.T) {
	s := newReplicaSetup(t)
	db, _ := s.proxy(t, backend.ReadReplicas)
	ctx := context.Background()
	upd, err := db.Prepare("UPDATE t2 SET v = ? WHERE id = 1")
	if err != nil {
		t.Fatal(err)
	}
	defer upd.Close()
	if _, err := upd.Exec(1); err != nil {
		t.Fatal(err)
	}
	if err := s.repl.Sync(ctx, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	oldPrimary, next, other := s.repl.Primary, s.repl.Replicas[0], s.repl.Replicas[1]
	if err := oldPrimary.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := s.repl.Promote(ctx, next); err != nil {
		t.Fatal(err)
	}
	if err := s.repl.Repoint(ctx, other, next); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		_, err = upd.Exec(2)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no write went through 15 s after the promotion: %v (members %+v)", err, s.group.Members())
		}
		time.Sleep(100 * time.Millisecond)
	}
	var v int
	if err := openDSN(t, next.AppDSN).QueryRow("SELECT v FROM t2 WHERE id = 1").Scan(&v); err != nil || v != 2 {
		t.Fatalf("the new primary has v = %d (err %v), want 2", v, err)
	}
	for range 20 {
		server, got := who(t, db, readT2)
		if got != 2 {
			t.Fatalf("a read after the write answered v = %d from %s", got, server)
		}
		if server == s.names[oldPrimary.Addr] {
			t.Fatal("the dead primary answered")
		}
	}
}

// writeLoad runs writers that each insert (w, n) for n = 1, 2, … through db until stop closes, and returns the
// acknowledged rows per writer and the errors they met.
func writeLoad(db *sql.DB, writers int, stop <-chan struct{}) (acked func() map[int]int, errs func() []error) {
	var mu sync.Mutex
	got := map[int]int{}
	var failed []error
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 1; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				_, err := db.Exec("INSERT INTO acked VALUES (?, ?)", w, n)
				mu.Lock()
				if err != nil {
					failed = append(failed, err)
				} else {
					got[w] = n
				}
				mu.Unlock()
				if err != nil {
					return
				}
			}
		}()
	}
	done := func() { wg.Wait() }
	return func() map[int]int { done(); return got }, func() []error { done(); return failed }
}

// checkAcked fails the test unless every row writeLoad's writers had acknowledged is on db, once (the primary key
// (w, n) allows no second copy), and some were.
func checkAcked(t *testing.T, db *sql.DB, acked map[int]int) {
	t.Helper()
	total := 0
	for w, n := range acked {
		var c int
		if err := db.QueryRow("SELECT COUNT(*) FROM acked WHERE w = ? AND n <= ?", w, n).Scan(&c); err != nil || c != n {
			t.Errorf("writer %d: %d of its %d acknowledged rows on the new primary (err %v)", w, c, n, err)
		}
		total += n
	}
	if total == 0 {
		t.Fatal("no write was acknowledged: the load did not run")
	}
}

// TestSwitchover: under writers outside transactions, a switchover promotes a replica with no client error, every
// acknowledged write on the new primary once, and the former primary replicating from it.
func TestSwitchover(t *testing.T) {
	s := newReplicaSetup(t)
	db, _ := s.proxy(t, backend.ReadReplicas)
	db.SetMaxOpenConns(8)
	stop := make(chan struct{})
	acked, errs := writeLoad(db, 4, stop)
	time.Sleep(300 * time.Millisecond)
	ctx := context.Background()
	rep, err := s.group.Switchover(ctx, "", 2*time.Second)
	if err != nil {
		close(stop)
		t.Fatalf("switchover: %v", err)
	}
	time.Sleep(300 * time.Millisecond)
	close(stop)
	if e := errs(); len(e) > 0 {
		t.Fatalf("%d writes failed during the switchover, the first: %v (report %+v)", len(e), e[0], rep)
	}
	t.Logf("switchover: %+v", rep) // how long writes waited is keyway bench replicas' figure, not a test's
	if s.group.Addr() != rep.New || rep.New == s.repl.Primary.Addr {
		t.Fatalf("the group's primary is %s after a switchover to %s", s.group.Addr(), rep.New)
	}
	newPrimary := openDSN(t, "app:secret@tcp("+rep.New+")/test")
	checkAcked(t, newPrimary, acked())
	// The former primary replicates from the new one and catches up.
	var pos string
	if err := newPrimary.QueryRow("SELECT @@gtid_binlog_pos").Scan(&pos); err != nil {
		t.Fatal(err)
	}
	if err := s.repl.Primary.WaitCaughtUp(ctx, pos, 20*time.Second); err != nil {
		t.Errorf("the former primary does not catch up with the new one: %v", err)
	}
}

// TestFailover: with semi-synchronous replication, writers through keyway, kill -9 the primary, keyway failover:
// writes fail only between the kill and the promotion, and every acknowledged write is on the new primary, once.
func TestFailover(t *testing.T) {
	s := newReplicaSetupWith(t, testenv.ReplicationOptions{SemiSync: true})
	db, _ := s.proxy(t, backend.ReadReplicas)
	db.SetMaxOpenConns(8)
	stop := make(chan struct{})
	acked, errs := writeLoad(db, 4, stop)
	time.Sleep(300 * time.Millisecond)
	if err := s.repl.Primary.Kill(); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	rep, err := s.group.Failover(ctx)
	close(stop)
	if err != nil {
		t.Fatalf("failover: %v", err)
	}
	t.Logf("failover: %+v; writers' errors (inside the window): %d", rep, len(errs()))
	newPrimary := openDSN(t, "app:secret@tcp("+rep.New+")/test")
	checkAcked(t, newPrimary, acked())
	// Writes go through again, to the new primary.
	if _, err := db.Exec("INSERT INTO acked VALUES (99, 1)"); err != nil {
		t.Fatalf("a write after the failover: %v", err)
	}
	var c int
	if err := newPrimary.QueryRow("SELECT COUNT(*) FROM acked WHERE w = 99").Scan(&c); err != nil || c != 1 {
		t.Fatalf("the write after the failover is not on the new primary: %d (err %v)", c, err)
	}
}
