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
	"github.com/keywaydb/keyway/internal/validity"
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
// With --verbosity=5 sysbench names each error it retried, which a failure prints. It returns once sysbench's
// threads started; wait returns its output once it ended, and fails the test if it did
// not run to the end.
func (e *promoteEnv) sysbench(t *testing.T, threads int, d time.Duration) (wait func() string) {
	t.Helper()
	cmd := exec.Command("sysbench", append([]string{"oltp_read_write"}, e.sysbenchArgs(e.sqlAddr,
		"--threads="+strconv.Itoa(threads), "--time="+strconv.Itoa(int(d/time.Second)), "--report-interval=0", "--skip_trx=on", "--verbosity=5",
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
	// Its threads prepare their statements as they start, and a failure there ends sysbench: the load is on
	// once they have.
	for deadline := time.Now().Add(time.Minute); !strings.Contains(out.String(), "Threads started!"); {
		select {
		case err := <-done:
			t.Fatalf("sysbench oltp_read_write through keyway: %v\n%s", err, out)
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("sysbench's threads did not start\n%s", out)
		}
	}
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
// Afterwards the binlog follower reads the new primary (a direct write there invalidates a cached reply).
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
	e.checkDirectWriteSeen(t, newAddr, 7) // the binlog follower follows the new primary
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
// The binlog follower, which had read those commits, restarts on the new primary as after a gap.
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
	// The binlog follower has read commits the replicas lack (so it must restart on the new primary as after a gap).
	pos, err := old.GTIDs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want, err := validity.ParsePosition(pos.Binlog)
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if got, err := validity.ParsePosition(e.srv.followers[0].Status().GTID); err == nil && got.Covers(want) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the binlog follower did not read the primary's commits up to %s: %+v", want, e.srv.followers[0].Status())
		}
	}
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
	// The binlog follower applied commits the new primary lacks: a gap, after which it follows the new primary.
	if st := e.srv.followers[0].Status(); st.Gaps != 1 {
		t.Errorf("the binlog follower counted %d gaps, want 1 (it had applied commits the new primary lacks): %+v", st.Gaps, st)
	}
	e.checkDirectWriteSeen(t, newAddr, 7)
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

// mcWriters set unique keys through the memcache door, each writer its own, until stopped, and remember every
// set acknowledged (STORED) and the errors.
type mcWriters struct {
	mu     sync.Mutex
	acked  map[string]string // "@@container.key" → value
	errs   []error
	stopc  chan struct{}
	wg     sync.WaitGroup
	counts map[string]int // acknowledged sets by container
}

func startMCWriters(mc *memcache.Client, containers ...string) *mcWriters {
	m := &mcWriters{acked: map[string]string{}, stopc: make(chan struct{}), counts: map[string]int{}}
	for _, c := range containers {
		m.counts[c] = 0
	}
	for i, c := range containers {
		m.wg.Go(func() {
			for n := 1; ; n++ {
				select {
				case <-m.stopc:
					return
				default:
				}
				key := fmt.Sprintf("@@%s.w%d-%d", c, i, n)
				val := fmt.Sprintf("v%d-%d", i, n)
				err := mc.Set(&memcache.Item{Key: key, Value: []byte(val)})
				m.mu.Lock()
				if err == nil {
					m.acked[key] = val
					m.counts[c]++
				} else {
					m.errs = append(m.errs, err)
				}
				m.mu.Unlock()
				time.Sleep(time.Millisecond) // write-behind sets are acknowledged from memory: not tens of thousands
			}
		})
	}
	return m
}

// waitAcked waits until every container has n more acknowledged sets than now.
func (m *mcWriters) waitAcked(t *testing.T, n int) {
	t.Helper()
	m.mu.Lock()
	want := map[string]int{}
	for c, k := range m.counts {
		want[c] = k + n
	}
	m.mu.Unlock()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		m.mu.Lock()
		done := true
		for c, k := range want {
			done = done && m.counts[c] >= k
		}
		counts, errs := fmt.Sprint(m.counts), len(m.errs)
		m.mu.Unlock()
		if done {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("memcache sets acknowledged: %s, want %d more each; %d errors", counts, n, errs)
		}
	}
}

func (m *mcWriters) stop() {
	close(m.stopc)
	m.wg.Wait()
}

// TestFailoverPreparedAndContainers: with semi-synchronous replication, across a kill -9 of the primary and keyway
// failover: a statement prepared through go-sql-driver's pool, and one prepared on one client connection and kept
// (keyway re-prepares it on the new primary behind the same id), run on the new primary afterwards; a session that
// prepared with SQL PREPARE (state on the dead primary) is ended, not silently moved; containers (the memcache
// door on a table, write = "sync" and write-behind) write to the new primary, and no set acknowledged through the
// memcache door is lost; a set in flight at the kill hears that its outcome is unknown.
func TestFailoverPreparedAndContainers(t *testing.T) {
	e := newPromoteEnv(t, testenv.ReplicationOptions{SemiSync: true}, false)
	ctx := context.Background()
	pooled, err := e.sql.Prepare("INSERT INTO acked (w, n) VALUES (?, ?)")
	if err != nil {
		t.Fatal(err)
	}
	defer pooled.Close()
	conn, err := e.sql.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	kept, err := conn.PrepareContext(ctx, "INSERT INTO acked (w, n) VALUES (?, ?)")
	if err != nil {
		t.Fatal(err)
	}
	defer kept.Close()
	sqlPrepared, err := e.sql.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer sqlPrepared.Close()
	for _, q := range []string{"PREPARE up FROM 'UPDATE cached SET v = v + 1 WHERE id = 1'", "EXECUTE up"} {
		if _, err := sqlPrepared.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if _, err := pooled.Exec(100, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := kept.Exec(101, 1); err != nil {
		t.Fatal(err)
	}

	mw := startMCWriters(e.mc, "sync", "sync", "async")
	mw.waitAcked(t, 50)
	if err := e.repl.Primary.Kill(); err != nil {
		t.Fatal(err)
	}
	newAddr := e.promote(t, "failover")
	mw.waitAcked(t, 50)
	mw.stop()
	t.Logf("memcache sets acknowledged %v, failed %d", mw.counts, len(mw.errs))
	// A set in flight when the primary died says its outcome is unknown; one that found no primary, that the group
	// was unavailable (it was not sent).
	unknown := 0
	for _, err := range mw.errs {
		if strings.Contains(err.Error(), "outcome is unknown") {
			unknown++
		}
		if msg := err.Error(); !strings.Contains(msg, "SERVER_ERROR") ||
			!strings.Contains(msg, "outcome is unknown") && !strings.Contains(msg, "unavailable") {
			t.Errorf("a set failed during the failover with %q: want a SERVER_ERROR saying the outcome is unknown, or that the group was unavailable", msg)
		}
	}
	t.Logf("%d sets in flight at the kill said their outcome is unknown", unknown)

	// Prepared statements, first try: the failover is over.
	if _, err := pooled.Exec(100, 2); err != nil {
		t.Errorf("a pooled prepared statement after the failover: %v", err)
	}
	if _, err := kept.Exec(101, 2); err != nil {
		t.Errorf("a statement prepared on one connection before the failover, executed after it: %v", err)
	}
	var v int
	if err := conn.QueryRowContext(ctx, "SELECT v FROM cached WHERE id = ?", 1).Scan(&v); err != nil {
		t.Errorf("a prepared read on that connection after the failover: %v", err)
	}
	if _, err := sqlPrepared.ExecContext(ctx, "EXECUTE up"); err == nil {
		t.Errorf("EXECUTE of a statement that SQL PREPARE made on the dead primary succeeded after the failover")
	} else {
		t.Logf("EXECUTE of the SQL PREPARE statement after the failover: %v", err)
	}
	newPrimary := openTestDB(t, "app:secret@tcp("+newAddr+")/test")
	have := onServer(t, newPrimary)
	for _, k := range [][2]int{{100, 1}, {100, 2}, {101, 1}, {101, 2}} {
		if have[k] != 1 {
			t.Errorf("row %v is %d times on the new primary, want once", k, have[k])
		}
	}

	// Every acknowledged set is on the new primary; the write-behind ones once the queue wrote them.
	var missing []string
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		rows := map[string]string{}
		rs, err := newPrimary.Query("SELECT k, v FROM kv")
		if err != nil {
			t.Fatal(err)
		}
		for rs.Next() {
			var k, v string
			if err := rs.Scan(&k, &v); err != nil {
				t.Fatal(err)
			}
			rows[k] = v
		}
		rs.Close()
		missing = missing[:0]
		for key, val := range mw.acked {
			_, k, _ := strings.Cut(key, ".")
			if rows[k] != val {
				missing = append(missing, key)
			}
		}
		if len(missing) == 0 || time.Now().After(deadline) {
			break
		}
	}
	if len(missing) > 0 {
		slices.Sort(missing)
		t.Errorf("%d of %d sets acknowledged through the memcache door are not on the new primary: %v", len(missing), len(mw.acked), missing)
	}
	// The containers read and write the new primary.
	if err := e.mc.Set(&memcache.Item{Key: "@@sync.after", Value: []byte("new")}); err != nil {
		t.Fatal(err)
	}
	var got string
	if err := newPrimary.QueryRow("SELECT v FROM kv WHERE k = 'after'").Scan(&got); err != nil || got != "new" {
		t.Errorf("a set after the failover: the new primary has %q (%v)", got, err)
	}
	if it, err := e.mc.Get("@@sync.after"); err != nil || string(it.Value) != "new" {
		t.Errorf("a get after the failover: %v %v", it, err)
	}
}

// readCached reads cached's row through keyway's SQL door (a point select the result cache answers while the
// binlog follower vouches) and reports whether the cache answered it.
func (e *promoteEnv) readCached(t *testing.T) (v int, hit bool) {
	t.Helper()
	before := e.srv.sqlCache.Stats().Hits
	if err := e.sql.QueryRow("SELECT v FROM cached WHERE id = 1").Scan(&v); err != nil {
		t.Fatal(err)
	}
	return v, e.srv.sqlCache.Stats().Hits > before
}

// checkDirectWriteSeen: a direct write on the primary at addr is seen through keyway (its binlog follower reads
// that primary's binlog and invalidates the cached reply), and the result cache answers again afterwards (the
// follower vouches on that primary). want is the value to write.
func (e *promoteEnv) checkDirectWriteSeen(t *testing.T, addr string, want int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, hit := e.readCached(t); hit {
			break // filled, and served from the cache: the follower vouches
		}
		if time.Now().After(deadline) {
			t.Fatalf("the result cache does not answer the point select: %+v", e.srv.followers[0].Status())
		}
	}
	if _, err := openTestDB(t, "app:secret@tcp("+addr+")/test").Exec("UPDATE cached SET v = ? WHERE id = 1", want); err != nil {
		t.Fatal(err)
	}
	// max_staleness is 1 s; a follower that does not read this primary never sees the write.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if v, _ := e.readCached(t); v == want {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a direct write on the primary %s is not seen through keyway: the binlog follower does not follow it (%+v)", addr, e.srv.followers[0].Status())
		}
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		v, hit := e.readCached(t)
		if v != want {
			t.Fatalf("read %d after %d was seen", v, want)
		}
		if hit {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the result cache no longer answers after the primary changed: %+v", e.srv.followers[0].Status())
		}
	}
}

// TestSwitchoverFollowerMovesToNewPrimary: after keyway switchover, the binlog follower reads the new primary:
// a direct write there invalidates a reply the result cache holds, even once the former primary stops relaying
// the new one's commits (STOP SLAVE on it), and the cache answers again, with no gap (copies kept).
func TestSwitchoverFollowerMovesToNewPrimary(t *testing.T) {
	e := newPromoteEnv(t, testenv.ReplicationOptions{}, false)
	e.checkDirectWriteSeen(t, e.repl.Primary.Addr, 1)
	former := e.repl.Primary
	newAddr := e.promote(t, "switchover")
	if err := former.ExecUnlogged(context.Background(), "STOP SLAVE"); err != nil {
		t.Fatal(err)
	}
	e.checkDirectWriteSeen(t, newAddr, 2)
	if st := e.srv.followers[0].Status(); st.Gaps != 0 {
		t.Errorf("the follower counted %d gaps across a switchover, want none (copies kept): %+v", st.Gaps, st)
	}
	if !strings.Contains(e.logs.String(), "binlog follower follows the group's new primary") {
		t.Errorf("the follower did not log that it follows the new primary\n%s", e.logs)
	}
}
