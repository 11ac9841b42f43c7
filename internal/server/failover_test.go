package server

// Failover and switchover through a whole keyway (Start: the SQL door, the memcache door, containers, the binlog
// follower, the admin listener), in front of a MariaDB primary with two replicas, under load: sysbench through the
// SQL door, and writers that remember every id keyway acknowledged.

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bradfitz/gomemcache/memcache"

	"github.com/keywaydb/keyway/internal/config"
	"github.com/keywaydb/keyway/internal/testenv"
)

// promoteEnv is a whole keyway serving group main: a primary and two replicas, read_from = "replicas". Table acked
// takes the writers' rows (an AUTO_INCREMENT key, so a row applied twice would show as two rows, not as an error);
// table kv backs containers sync and async (db_only, write = "sync" and "async").
type promoteEnv struct {
	repl      *testenv.Replication
	srv       *Server
	admin     string
	sqlAddr   string
	sql       *sql.DB
	mc        *memcache.Client
	logs      *testenv.SyncBuffer // keyway's log, JSON lines
	sysbenchN int                 // sbtest1's rows, when sysbench tables were prepared
}

func newPromoteEnv(t *testing.T, o testenv.ReplicationOptions, sysbench bool) *promoteEnv {
	t.Helper()
	r := testenv.NewReplication(t, o)
	ctx := context.Background()
	p := openTestDB(t, r.Primary.AppDSN)
	for _, q := range []string{
		"CREATE TABLE acked (id BIGINT AUTO_INCREMENT PRIMARY KEY, w INT NOT NULL, n INT NOT NULL, KEY (w, n))",
		"CREATE TABLE kv (k VARCHAR(64) PRIMARY KEY, v VARCHAR(255) NOT NULL)",
		"CREATE TABLE cached (id INT PRIMARY KEY, v INT NOT NULL)",
		"INSERT INTO cached VALUES (1, 0)",
	} {
		if _, err := p.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	e := &promoteEnv{repl: r, logs: &testenv.SyncBuffer{}}
	if sysbench {
		testenv.Need(t, "sysbench")
		e.sysbenchN = 1000
		out, err := exec.Command("sysbench", append([]string{"oltp_common"}, e.sysbenchArgs(r.Primary.Addr, "prepare")...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("sysbench prepare: %v\n%s", err, out)
		}
	}
	if err := r.Sync(ctx, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	toml := fmt.Sprintf(`
[memcache]
listen = "127.0.0.1:0"

[sql]
listen = "127.0.0.1:0"

[[sql.users]]
name = "app"
password = "secret"
auth_plugin = "mysql_native_password"

[admin]
listen = "127.0.0.1:0"

[[groups]]
name = "main"
primary = %q
replicas = [%q, %q]
read_from = "replicas"
max_replica_lag = "1m"
user = "app"
password = "secret"
health_interval = "200ms"

[[containers]]
name = "sync"
table = "test.kv"
key = "k"
values = ["v"]
get = "db_only"
set = "db_only"
delete = "db_only"
write = "sync"

[[containers]]
name = "async"
table = "test.kv"
key = "k"
values = ["v"]
get = "db_only"
set = "db_only"
delete = "db_only"
write = "async"
write_window = "50ms"
`, r.Primary.Addr, r.Replicas[0].Addr, r.Replicas[1].Addr)
	cfg, err := config.Parse([]byte(toml))
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewJSONHandler(io.MultiWriter(e.logs, verboseLog{t}), &slog.HandlerOptions{Level: slog.LevelInfo}))
	s, err := Start(cfg, Options{Logger: log})
	if err != nil {
		t.Fatalf("keyway: %v\n%s", err, e.logs)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		s.Stop(ctx)
	})
	e.srv, e.admin, e.sqlAddr = s, s.adminLn.Addr().String(), s.SQLAddr().String()
	e.sql = openTestDB(t, "app:secret@tcp("+e.sqlAddr+")/test")
	e.mc = memcache.New(s.MemcacheAddr().String())
	e.mc.Timeout = 10 * time.Second
	g := s.topo.Group("main")
	deadline := time.Now().Add(15 * time.Second)
	for {
		known := 0
		for _, m := range g.Members() {
			if m.Known && m.Up {
				known++
			}
		}
		if known == 3 && s.followers[0].Status().Fresh {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("keyway does not know every member, or its binlog follower is not fresh: %+v %+v", g.Members(), s.followers[0].Status())
		}
		time.Sleep(20 * time.Millisecond)
	}
	return e
}

// verboseLog copies keyway's log into the test's with -v.
type verboseLog struct{ t *testing.T }

func (w verboseLog) Write(p []byte) (int, error) {
	if testing.Verbose() {
		w.t.Log(strings.TrimSpace(string(p)))
	}
	return len(p), nil
}

// sysbenchArgs are sysbench's options for the server at addr, then extra.
func (e *promoteEnv) sysbenchArgs(addr string, extra ...string) []string {
	host, port, _ := strings.Cut(addr, ":")
	return append([]string{"--db-driver=mysql", "--mysql-host=" + host, "--mysql-port=" + port,
		"--mysql-user=app", "--mysql-password=secret", "--mysql-db=test",
		"--tables=1", "--table-size=" + strconv.Itoa(max(e.sysbenchN, 1000))}, extra...)
}

// sysbench runs oltp_read_write through keyway's SQL door for d with threads threads, its statements outside
// transactions (skip_trx: a session in a transaction on the dead primary is closed, and sysbench 1.0.20 crashes
// when it reconnects, even to MariaDB itself), retrying every statement that fails, as an application that rides
// out a failover would. So sysbench runs to its end only if keyway never closes a session outside a transaction.
// wait returns its output once it ended, and fails the test if it did not run to the end.
func (e *promoteEnv) sysbench(t *testing.T, threads int, d time.Duration) (wait func() string) {
	t.Helper()
	cmd := exec.Command("sysbench", append([]string{"oltp_read_write"}, e.sysbenchArgs(e.sqlAddr,
		"--threads="+strconv.Itoa(threads), "--time="+strconv.Itoa(int(d/time.Second)), "--report-interval=0", "--skip_trx=on",
		"--mysql-ignore-errors=all", "run")...)...)
	out := &testenv.SyncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		select {
		case <-done:
		default:
			_ = cmd.Process.Kill()
			<-done
		}
	})
	return func() string {
		t.Helper()
		select {
		case err := <-done:
			done <- err
			if err != nil {
				t.Fatalf("sysbench oltp_read_write through keyway: %v\n%s", err, out)
			}
		case <-time.After(d + 30*time.Second):
			t.Fatalf("sysbench oltp_read_write did not end\n%s", out)
		}
		return out.String()
	}
}

// promote asks keyway's admin listener for op ("failover", "switchover") on group main, as keyway failover and
// keyway switchover do, and returns the new primary.
func (e *promoteEnv) promote(t *testing.T, op string) (newPrimary string) {
	t.Helper()
	resp, err := (&http.Client{Timeout: time.Minute}).Post("http://"+e.admin+"/groups/main/"+op, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s: %s: %s", op, resp.Status, body)
	}
	var rep struct{ New string }
	if err := json.Unmarshal(body, &rep); err != nil || rep.New == "" {
		t.Fatalf("%s report %s: %v", op, body, err)
	}
	return rep.New
}

// member is the member of the replication at addr.
func (e *promoteEnv) member(t *testing.T, addr string) *testenv.MariaDB {
	t.Helper()
	for _, m := range e.repl.Members() {
		if m.Addr == addr {
			return m
		}
	}
	t.Fatalf("no member at %s", addr)
	return nil
}

// ackWriters insert rows (w, n), n = 1, 2, … for each writer w, through keyway's SQL door, until stopped: every
// write acknowledged is remembered, and every failed one with when it started and ended. A writer goes on after
// an error (with the next n: the failed one's outcome is unknown).
type ackWriters struct {
	mu     sync.Mutex
	acked  map[[2]int]bool
	failed []failedWrite
	stopc  chan struct{}
	wg     sync.WaitGroup
}

type failedWrite struct {
	id         [2]int
	start, end time.Time
	err        error
}

func startAckWriters(db *sql.DB, writers int) *ackWriters {
	a := &ackWriters{acked: map[[2]int]bool{}, stopc: make(chan struct{})}
	for w := range writers {
		a.wg.Go(func() {
			for n := 1; ; n++ {
				select {
				case <-a.stopc:
					return
				default:
				}
				start := time.Now()
				_, err := db.Exec("INSERT INTO acked (w, n) VALUES (?, ?)", w, n)
				a.mu.Lock()
				if err == nil {
					a.acked[[2]int{w, n}] = true
				} else {
					a.failed = append(a.failed, failedWrite{[2]int{w, n}, start, time.Now(), err})
				}
				a.mu.Unlock()
				if err != nil {
					time.Sleep(5 * time.Millisecond)
				}
			}
		})
	}
	return a
}

// count is how many writes were acknowledged so far.
func (a *ackWriters) count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.acked)
}

// waitAcked waits until n more writes than now were acknowledged.
func (a *ackWriters) waitAcked(t *testing.T, n int) {
	t.Helper()
	want := a.count() + n
	for deadline := time.Now().Add(20 * time.Second); a.count() < want; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the writers got %d of %d more acknowledgements in 20 s; failures: %d", a.count()+n-want, n, len(a.failed))
		}
	}
}

func (a *ackWriters) stop() {
	close(a.stopc)
	a.wg.Wait()
}

// checkWindow fails the test for a write that failed outside [from, to]: one that ended before from, or started
// after to.
func (a *ackWriters) checkWindow(t *testing.T, from, to time.Time) {
	t.Helper()
	for _, f := range a.failed {
		if f.end.Before(from) || f.start.After(to) {
			t.Errorf("write %v failed outside the failover (started %v after the kill, ended %v after it; the promotion took %v): %v",
				f.id, f.start.Sub(from), f.end.Sub(from), to.Sub(from), f.err)
		}
	}
}

// onServer returns how many times each (w, n) is in acked on db.
func onServer(t *testing.T, db *sql.DB) map[[2]int]int {
	t.Helper()
	rows, err := db.Query("SELECT w, n FROM acked")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[[2]int]int{}
	for rows.Next() {
		var k [2]int
		if err := rows.Scan(&k[0], &k[1]); err != nil {
			t.Fatal(err)
		}
		out[k]++
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// checkNoneTwice fails the test for a row applied more than once.
func checkNoneTwice(t *testing.T, have map[[2]int]int) {
	t.Helper()
	for k, c := range have {
		if c > 1 {
			t.Errorf("row %v applied %d times", k, c)
		}
	}
}

// TestFailoverUnderLoadSemiSync: semi-synchronous replication (AFTER_SYNC); sysbench oltp_read_write and writers
// that remember every acknowledged id run through keyway; the primary is killed (-9) and keyway failover promotes
// a replica. Writes fail only between the kill and the end of the promotion, every acknowledged id is on the new
// primary, no row is applied twice, and sysbench runs to its end (its errors retried, as an application would).
func TestFailoverUnderLoadSemiSync(t *testing.T) {
	e := newPromoteEnv(t, testenv.ReplicationOptions{SemiSync: true}, true)
	waitSysbench := e.sysbench(t, 2, 6*time.Second)
	w := startAckWriters(e.sql, 3)
	w.waitAcked(t, 100)
	killed := time.Now()
	if err := e.repl.Primary.Kill(); err != nil {
		t.Fatal(err)
	}
	newAddr := e.promote(t, "failover")
	promoted := time.Now()
	w.waitAcked(t, 100) // writes go on, on the new primary
	w.stop()
	out := waitSysbench()
	t.Logf("failover in %v; %d writes acknowledged, %d failed inside it; sysbench: %s", promoted.Sub(killed),
		len(w.acked), len(w.failed), sysbenchLine(out))
	w.checkWindow(t, killed, promoted)
	have := onServer(t, openTestDB(t, "app:secret@tcp("+newAddr+")/test"))
	lost := 0
	for k := range w.acked {
		if have[k] == 0 {
			lost++
		}
	}
	if lost > 0 {
		t.Errorf("%d of %d acknowledged rows are not on the new primary, with semi-synchronous replication", lost, len(w.acked))
	}
	checkNoneTwice(t, have)
}

// sysbenchLine is sysbench's count of queries and errors, for the log.
func sysbenchLine(out string) string {
	var parts []string
	for _, l := range strings.Split(out, "\n") {
		l = strings.TrimSpace(l)
		for _, p := range []string{"queries:", "ignored errors:", "reconnects:"} {
			if strings.HasPrefix(l, p) {
				parts = append(parts, strings.Join(strings.Fields(l), " "))
			}
		}
	}
	return strings.Join(parts, "; ")
}

// TestFailoverUnderLoadAsync: asynchronous replication; the replicas stop receiving (IO threads stopped) while
// writers and sysbench go on through keyway, so the primary acknowledges commits no replica has; kill -9, keyway
// failover. The acknowledged ids the new primary lacks are exactly those of the transactions keyway logged as
// missing (their GTIDs read from the dead primary's binary log), and some are missing; none is applied twice.
func TestFailoverUnderLoadAsync(t *testing.T) {
	testenv.Need(t, "mariadb-binlog")
	e := newPromoteEnv(t, testenv.ReplicationOptions{}, true)
	ctx := context.Background()
	waitSysbench := e.sysbench(t, 2, 5*time.Second)
	w := startAckWriters(e.sql, 3)
	w.waitAcked(t, 100)
	for _, r := range e.repl.Replicas {
		if err := r.ExecUnlogged(ctx, "STOP SLAVE IO_THREAD"); err != nil {
			t.Fatal(err)
		}
	}
	w.waitAcked(t, 50) // acknowledged by the primary alone
	old := e.repl.Primary
	killed := time.Now()
	if err := old.Kill(); err != nil {
		t.Fatal(err)
	}
	newAddr := e.promote(t, "failover")
	promoted := time.Now()
	w.waitAcked(t, 50)
	w.stop()
	waitSysbench()
	w.checkWindow(t, killed, promoted)

	missing := loggedMissing(t, e.logs.String())
	if len(missing) == 0 {
		t.Fatalf("keyway logged no acknowledged commit missing on the new primary\n%s", e.logs)
	}
	byGTID := binlogRows(t, old.DataDir)
	have := onServer(t, openTestDB(t, "app:secret@tcp("+newAddr+")/test"))
	checkNoneTwice(t, have)
	var absent, inLogged []string
	for k := range w.acked {
		if have[k] == 0 {
			absent = append(absent, fmt.Sprint(k))
		}
	}
	for g, ids := range byGTID {
		if missing.has(g) {
			for _, k := range ids {
				if w.acked[k] {
					inLogged = append(inLogged, fmt.Sprint(k))
				}
			}
		}
	}
	slices.Sort(absent)
	slices.Sort(inLogged)
	t.Logf("failover in %v; %d writes acknowledged; keyway logged missing %v; %d acknowledged rows absent", promoted.Sub(killed), len(w.acked), missing, len(absent))
	if len(absent) == 0 {
		t.Fatal("no acknowledged row is missing on the new primary: the test did not make the replicas miss any")
	}
	if !slices.Equal(absent, inLogged) {
		t.Errorf("acknowledged rows absent on the new primary: %v\nacknowledged rows in the transactions keyway logged as missing: %v", absent, inLogged)
	}
}

// gtid is a MariaDB GTID.
type gtid struct{ domain, server, seq uint64 }

// missingSet is what keyway logged as acknowledged and missing on the new primary: per GTID domain, the sequence
// numbers after the new primary's, up to the newest acknowledged.
type missingSet map[uint64][2]uint64 // domain → (new primary has up to, acknowledged up to]

func (m missingSet) has(g gtid) bool {
	r, ok := m[g.domain]
	return ok && g.seq > r[0] && g.seq <= r[1]
}

// loggedMissing reads keyway's log lines about acknowledged commits the new primary lacks.
func loggedMissing(t *testing.T, logs string) missingSet {
	t.Helper()
	out := missingSet{}
	for _, l := range strings.Split(logs, "\n") {
		var rec struct {
			Msg    string `json:"msg"`
			Domain uint64 `json:"domain"`
			Have   uint64 `json:"new_primary_has_up_to"`
			Acked  uint64 `json:"acknowledged_up_to"`
		}
		if json.Unmarshal([]byte(l), &rec) != nil || !strings.HasPrefix(rec.Msg, "failover: acknowledged commits the new primary does not have") {
			continue
		}
		out[rec.Domain] = [2]uint64{rec.Have, rec.Acked}
	}
	return out
}

var (
	binlogGTIDRE = regexp.MustCompile(`\bGTID (\d+)-(\d+)-(\d+)\b`)
	binlogColRE  = regexp.MustCompile(`^###\s+@(\d+)=(-?\d+)`)
)

// binlogRows reads the binary logs in a (dead) server's data directory with mariadb-binlog and returns the rows
// (w, n) inserted into test.acked, by the GTID of their transaction.
func binlogRows(t *testing.T, dataDir string) map[gtid][][2]int {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dataDir, "*-bin.[0-9][0-9][0-9][0-9][0-9][0-9]"))
	if err != nil {
		t.Fatal(err)
	}
	files = slices.DeleteFunc(files, func(f string) bool { return strings.HasPrefix(filepath.Base(f), "relay-bin.") })
	if len(files) == 0 {
		t.Fatalf("no binary log in %s", dataDir)
	}
	slices.Sort(files)
	cmd := exec.Command("mariadb-binlog", append([]string{"--no-defaults", "--verbose", "--base64-output=DECODE-ROWS"}, files...)...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	out := map[gtid][][2]int{}
	var cur gtid
	inAcked := false
	var row [2]int
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		l := sc.Text()
		if m := binlogGTIDRE.FindStringSubmatch(l); m != nil && !strings.HasPrefix(l, "###") {
			d, _ := strconv.ParseUint(m[1], 10, 64)
			s, _ := strconv.ParseUint(m[2], 10, 64)
			q, _ := strconv.ParseUint(m[3], 10, 64)
			cur, inAcked = gtid{d, s, q}, false
			continue
		}
		if strings.HasPrefix(l, "### INSERT INTO ") || strings.HasPrefix(l, "### UPDATE ") || strings.HasPrefix(l, "### DELETE FROM ") {
			inAcked = l == "### INSERT INTO `test`.`acked`"
			continue
		}
		if m := binlogColRE.FindStringSubmatch(l); m != nil && inAcked {
			v, _ := strconv.Atoi(m[2])
			switch m[1] { // acked is (id, w, n)
			case "2":
				row[0] = v
			case "3":
				row[1] = v
				out[cur] = append(out[cur], row)
			}
		}
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("mariadb-binlog: %v\n%s", err, stderr.String())
	}
	if len(out) == 0 {
		t.Fatalf("no row of test.acked in the binary logs %v", files)
	}
	return out
}
