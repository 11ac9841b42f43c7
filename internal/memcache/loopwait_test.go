package memcache

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keywaydb/keyway/internal/container"
	"github.com/keywaydb/keyway/internal/engine"
	"github.com/keywaydb/keyway/internal/testenv"
	"github.com/keywaydb/keyway/internal/writebehind"
)

// waitDoor is a door with one event loop over a private MariaDB: container "t" writes test.lw with every set
// (db_only), and its gets keep copies (caching). Keys without "@@" are the local store's.
type waitDoor struct {
	srv  *Server
	root *sql.DB
	addr string
}

func newWaitDoor(t *testing.T, threads bool) *waitDoor {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("event loops are Linux's")
	}
	root, db, eng := newTableRig(t,
		"CREATE TABLE test.lw (k VARCHAR(64) PRIMARY KEY, v TEXT)",
		"INSERT INTO test.lw VALUES ('locked', 'old'), ('cached', 'c')")
	c, err := container.Open(context.Background(), db, container.Def{Name: "t", Schema: "test", Table: "lw",
		KeyColumn: "k", ValueColumns: []string{"v"}}, container.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	eng.SetContainers([]*engine.Table{eng.NewContainer(engine.ContainerOptions{Container: c,
		Policies: container.Policies{Get: container.Caching, Set: container.DBOnly, Delete: container.DBOnly, Flush: container.CacheOnly}})}, "")
	srv := NewServer(eng, Options{EventLoops: 1, LoopThreads: threads})
	d := &waitDoor{srv: srv, root: root, addr: serveTest(t, srv)}
	probe := dialTest(t, d.addr)
	probe.send("version\r\n")
	probe.expect("VERSION ")
	if n := srv.eventLoops(); n != 1 {
		t.Fatalf("the door runs %d event loops, want 1 (containers are served by loops too)", n)
	}
	checkWait(t, srv, threads)
	return d
}

// expectStepsAway fails t unless want commands have been answered away from the loop so far (why says which).
func (d *waitDoor) expectStepsAway(t *testing.T, want uint64, why string) {
	t.Helper()
	if n := d.srv.stepsAway(); n != want {
		t.Fatalf("%d commands answered away from the loop, want %d: %s", n, want, why)
	}
}

// lockRow holds a write lock on test.lw's row k in an open transaction until the returned function rolls it back.
func (d *waitDoor) lockRow(t *testing.T, k string) (release func()) {
	t.Helper()
	tx, err := d.root.Begin()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec("UPDATE test.lw SET v = 'locker' WHERE k = ?", k); err != nil {
		tx.Rollback()
		t.Fatal(err)
	}
	var once bool
	release = func() {
		if !once {
			once = true
			tx.Rollback()
		}
	}
	t.Cleanup(release)
	return release
}

// waitForLockWait returns once the door's write of test.lw is in MariaDB, where the row lock holds it.
func (d *waitDoor) waitForLockWait(t *testing.T) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		var n int
		if err := d.root.QueryRow("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE INFO LIKE 'INSERT INTO `test`.`lw`%'").Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the set did not reach the table")
		}
	}
}

// TestEventLoopContainerWaitHoldsUpNobody: a set that waits for MySQL (here for a row lock) does not hold up the
// event loop: the loop's other connections are answered while it waits, cached rows included. Once the set
// returns, its connection answers the rest of its batch in order and is back on the loop.
func TestEventLoopContainerWaitHoldsUpNobody(t *testing.T) {
	eachWait(t, testEventLoopContainerWaitHoldsUpNobody)
}

func testEventLoopContainerWaitHoldsUpNobody(t *testing.T, threads bool) {
	d := newWaitDoor(t, threads)
	other := dialTest(t, d.addr)
	other.send("get @@t.cached\r\n") // fills the copy; later gets of it are answered from the loop
	other.expect("VALUE @@t.cached 0 1\r\nc\r\nEND\r\n")
	d.expectStepsAway(t, 1, "the get that read the table")

	release := d.lockRow(t, "locked")
	waiter := dialTest(t, d.addr)
	waiter.send("set @@t.locked 0 0 3\r\nnew\r\nget @@t.locked\r\nset local 0 0 1\r\nw\r\n")
	d.waitForLockWait(t)
	if n := d.srv.loopConns(); n != 3 { // other, waiter (away) and newWaitDoor's probe
		t.Fatalf("the loop has %d connections, want 3", n)
	}

	// The set waits on the row lock until release: everything the loop answers now, it answers while the set waits.
	for range 3 {
		other.send("set k 0 0 1\r\nx\r\nget k\r\nget @@t.cached\r\n")
		other.expect("STORED\r\nVALUE k 0 1\r\nx\r\nEND\r\nVALUE @@t.cached 0 1\r\nc\r\nEND\r\n")
	}
	late := dialTest(t, d.addr) // a connection accepted meanwhile joins the loop and is answered too
	late.send("get k\r\n")
	late.expect("VALUE k 0 1\r\nx\r\nEND\r\n")
	// Input from the waiter while it is away is answered after its batch, in order.
	waiter.send("get k\r\n")
	other.send("get k\r\n")
	other.expect("VALUE k 0 1\r\nx\r\nEND\r\n")

	release()
	waiter.expect("STORED\r\nVALUE @@t.locked 0 3\r\nnew\r\nEND\r\nSTORED\r\nVALUE k 0 1\r\nx\r\nEND\r\n")
	// Back on the loop: it goes on being answered there.
	waiter.send("get local\r\n")
	waiter.expect("VALUE local 0 1\r\nw\r\nEND\r\n")
	if n := d.srv.loopConns(); n != 4 {
		t.Fatalf("the loop has %d connections after the set, want 4: the waiter did not come back", n)
	}
	// Away from the loop: the first get of the cached row and the waiter's batch; the gets of the copy were not.
	d.expectStepsAway(t, 2, "the first get of the cached row and the waiter's batch")
}

// TestEventLoopShutdownWhileAway: Shutdown while a connection is away from its loop, waiting for MySQL, lets that
// request finish: its client gets the reply, then the connection closes, and Shutdown returns with none left.
func TestEventLoopShutdownWhileAway(t *testing.T) { eachWait(t, testEventLoopShutdownWhileAway) }

func testEventLoopShutdownWhileAway(t *testing.T, threads bool) {
	d := newWaitDoor(t, threads)
	idle := dialTest(t, d.addr)
	idle.send("set k 0 0 1\r\nx\r\n")
	idle.expect("STORED\r\n")
	release := d.lockRow(t, "locked")
	waiter := dialTest(t, d.addr)
	waiter.send("set @@t.locked 0 0 3\r\nnew\r\n")
	d.waitForLockWait(t)

	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		done <- d.srv.Shutdown(ctx)
	}()
	idle.expectClosed() // the loop closes its idle connections at once
	select {
	case err := <-done:
		t.Fatalf("Shutdown returned (%v) while a request was still waiting", err)
	case <-time.After(100 * time.Millisecond):
	}
	release()
	waiter.expect("STORED\r\n")
	waiter.expectClosed()
	if err := <-done; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	var v string
	if err := d.root.QueryRow("SELECT v FROM test.lw WHERE k = 'locked'").Scan(&v); err != nil || v != "new" {
		t.Fatalf("the row holds %q (%v) after the acknowledged set, want \"new\"", v, err)
	}
	if n := d.srv.currConns.Load(); n != 0 {
		t.Fatalf("curr_connections %d after Shutdown, want 0", n)
	}
}

// TestEventLoopWaitingClientLeaves: a connection whose batches wait on MySQL as a rule (awayStreakLimit in a row)
// leaves its loop for a goroutine of its own and goes on there; one whose waits are broken by batches the loop
// answers stays on the loop. The one that left comes back once quietToReturn batches in a row had nothing that
// may wait (a cached row, a local key), and not while its batches still wait now and then.
func TestEventLoopWaitingClientLeaves(t *testing.T) { eachWait(t, testEventLoopWaitingClientLeaves) }

func testEventLoopWaitingClientLeaves(t *testing.T, threads bool) {
	d := newWaitDoor(t, threads)
	mixed := dialTest(t, d.addr)
	for i := range 2 * awayStreakLimit {
		mixed.send(fmt.Sprintf("set @@t.m%d 0 0 1\r\nm\r\n", i)) // db_only: every set waits for the table
		mixed.expect("STORED\r\n")
		mixed.send("set local 0 0 1\r\nl\r\n")
		mixed.expect("STORED\r\n")
	}
	before := d.srv.loopConns() // mixed and newWaitDoor's probe
	writer := dialTest(t, d.addr)
	for i := range awayStreakLimit - 1 {
		writer.send(fmt.Sprintf("set @@t.w%d 0 0 1\r\nw\r\n", i))
		writer.expect("STORED\r\n")
	}
	if n := d.srv.loopConns(); n != before+1 {
		t.Fatalf("the loop has %d connections, want %d: the writer left too soon", n, before+1)
	}
	writer.send("set @@t.last 0 0 1\r\nw\r\nget @@t.last\r\n")
	writer.expect("STORED\r\nVALUE @@t.last 0 1\r\nw\r\nEND\r\n")
	waitLoopConns(t, d.srv, before, "the writer did not leave it")
	writer.send("set @@t.after 0 0 1\r\nw\r\nget local\r\n") // served by its own goroutine now
	writer.expect("STORED\r\nVALUE local 0 1\r\nl\r\nEND\r\n")
	var n int
	if err := d.root.QueryRow("SELECT COUNT(*) FROM test.lw WHERE v IN ('m', 'w')").Scan(&n); err != nil || n != 2*awayStreakLimit+awayStreakLimit+1 {
		t.Fatalf("%d rows written (%v), want %d", n, err, 3*awayStreakLimit+1)
	}

	// Quiet batches, broken by one that waits: not back yet.
	for i := range 2 * quietToReturn {
		if i == quietToReturn-1 {
			writer.send("set @@t.again 0 0 1\r\nw\r\n")
			writer.expect("STORED\r\n")
			continue
		}
		writer.send("get local\r\nget @@t.last\r\n") // @@t.last's copy is cached: nothing waits
		writer.expect("VALUE local 0 1\r\nl\r\nEND\r\nVALUE @@t.last 0 1\r\nw\r\nEND\r\n")
		if i == quietToReturn+1 { // without the wait, it would have come back before this batch
			if n := d.srv.loopConns(); n != before {
				t.Fatalf("the loop has %d connections, want %d: the writer came back while its batches still wait", n, before)
			}
		}
	}
	waitLoopConns(t, d.srv, before+1, "the writer did not come back")
	writer.send("get local\r\n") // answered by the loop again
	writer.expect("VALUE local 0 1\r\nl\r\nEND\r\n")
}

// TestEventLoopHandOversReuseGoroutines: a loop handed over at every other batch (a set that waits for the table,
// then one the loop answers) leaves no goroutines behind: those that stepped away wait as spares, at most maxSpares.
func TestEventLoopHandOversReuseGoroutines(t *testing.T) {
	eachWait(t, testEventLoopHandOversReuseGoroutines)
}

func testEventLoopHandOversReuseGoroutines(t *testing.T, threads bool) {
	d := newWaitDoor(t, threads)
	c := dialTest(t, d.addr)
	turn := func(i int) {
		c.send(fmt.Sprintf("set @@t.h%d 0 0 1\r\nh\r\n", i))
		c.expect("STORED\r\n")
		c.send("set local 0 0 1\r\nl\r\n")
		c.expect("STORED\r\n")
	}
	turn(0)
	before := runtime.NumGoroutine()
	const turns = 100
	for i := 1; i <= turns; i++ {
		turn(i)
	}
	if n := d.srv.stepsAway(); n != turns+1 {
		t.Fatalf("%d commands answered away from the loop, want %d", n, turns+1)
	}
	if after := runtime.NumGoroutine(); after > before+maxSpares {
		t.Fatalf("%d goroutines after %d hand-overs, %d before: the hand-overs leave goroutines behind", after, turns, before)
	}
}

// TestEventLoopAsyncSetsTableDown: sets on a write = "async" container are answered on the loop while its queue has
// room to spare; with the table down the queue fills, and a set that must wait for room (here until WaitTimeout,
// then refused) waits away from the loop, whose other connections are answered meanwhile.
func TestEventLoopAsyncSetsTableDown(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("event loops are Linux's")
	}
	m := testenv.NewMariaDB(t)
	_, _, eng := newTableRigOn(t, m, "CREATE TABLE test.down (k VARCHAR(64) PRIMARY KEY, v TEXT)")
	deadDB, err := sql.Open("mysql", m.AppDSN)
	if err != nil {
		t.Fatal(err)
	}
	c, err := container.Open(context.Background(), deadDB, container.Def{Name: "a", Schema: "test", Table: "down",
		KeyColumn: "k", ValueColumns: []string{"v"}}, container.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	deadDB.Close() // MySQL "down" for this container: every write-behind round fails
	a := eng.NewContainer(engine.ContainerOptions{Container: c,
		WriteBehind: &writebehind.Options{Window: 10 * time.Millisecond, MaxPending: 4, WaitTimeout: 3 * time.Second},
		Policies:    container.Policies{Get: container.Caching, Set: container.Caching, Delete: container.Caching, Flush: container.CacheOnly}})
	t.Cleanup(func() { a.Behind.Close() })
	eng.SetContainers([]*engine.Table{a}, "")
	srv := NewServer(eng, Options{EventLoops: 1})
	addr := serveTest(t, srv)

	writer, other := dialTest(t, addr), dialTest(t, addr)
	other.send("set local 0 0 1\r\nl\r\n")
	other.expect("STORED\r\n")
	writer.send("set @@a.k0 0 0 1\r\nv\r\nset @@a.k1 0 0 1\r\nv\r\n")
	writer.expect("STORED\r\nSTORED\r\n")
	if n := srv.stepsAway(); n != 0 {
		t.Fatalf("%d commands answered away from the loop, want 0: the queue had room to spare", n)
	}
	// Half full: the next sets step away; the fifth waits for room the dead table never makes.
	writer.send("set @@a.k2 0 0 1\r\nv\r\nset @@a.k3 0 0 1\r\nv\r\nset @@a.k4 0 0 1\r\nv\r\n")
	for range 3 {
		other.send("get local\r\n")
		other.expect("VALUE local 0 1\r\nl\r\nEND\r\n")
	}
	writer.nc.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	if b, err := writer.br.Peek(len("STORED\r\nSTORED\r\nSERVER_ERROR")); err == nil {
		t.Fatalf("the writer had all its replies (%q) before the loop answered another connection: the loop waited for room", b)
	}
	writer.nc.SetReadDeadline(time.Time{})
	writer.expect("STORED\r\nSTORED\r\nSERVER_ERROR ")
	if n := srv.stepsAway(); n != 1 {
		t.Fatalf("%d commands answered away from the loop, want 1 (the batch once the queue was half full)", n)
	}
}

// TestEventLoopComesBackAfterLeavingDisarmed: a connection that leaves its loop on the batch during which the loop
// took it out of the epoll set (input came while it was away), then comes back, steps away again and comes back
// again, stays open and answered: leaving forgets that the loop had taken it out of the set.
func TestEventLoopComesBackAfterLeavingDisarmed(t *testing.T) {
	eachWait(t, testEventLoopComesBackAfterLeavingDisarmed)
}

func testEventLoopComesBackAfterLeavingDisarmed(t *testing.T, threads bool) {
	d := newWaitDoor(t, threads)
	w := dialTest(t, d.addr)
	w.send("set local 0 0 1\r\nl\r\n")
	w.expect("STORED\r\n")
	for i := range awayStreakLimit - 1 {
		w.send(fmt.Sprintf("set @@t.s%d 0 0 1\r\ns\r\n", i))
		w.expect("STORED\r\n")
	}
	before := d.srv.loopConns()
	release := d.lockRow(t, "locked")
	w.send("set @@t.locked 0 0 1\r\nn\r\n") // the last batch of the streak, held by the row lock
	d.waitForLockWait(t)
	w.send("get local\r\n") // input while away: the loop takes w out of its set
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		d.srv.mu.Lock()
		l := d.srv.loops[0]
		d.srv.mu.Unlock()
		l.mu.Lock()
		disarmed := 0
		for _, c := range l.conns {
			if c.disarmed {
				disarmed++
			}
		}
		l.mu.Unlock()
		if disarmed == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the loop did not take the away connection out of its set")
		}
	}
	release()
	w.expect("STORED\r\n")
	w.expect("VALUE local 0 1\r\nl\r\nEND\r\n") // answered on its own goroutine: the first quiet batch
	if n := d.srv.loopConns(); n != before-1 {
		t.Fatalf("the loop has %d connections, want %d: w did not leave it", n, before-1)
	}
	for range quietToReturn - 1 { // the get sent while away was the first quiet batch
		w.send("get local\r\n")
		w.expect("VALUE local 0 1\r\nl\r\nEND\r\n")
	}
	waitLoopConns(t, d.srv, before, "w did not come back to the loop")
	for i := range 3 { // away and back, each time; the first batch back on the loop is away already
		w.send(fmt.Sprintf("set @@t.again%d 0 0 1\r\na\r\n", i))
		w.expect("STORED\r\n")
		w.send("get local\r\n")
		w.expect("VALUE local 0 1\r\nl\r\nEND\r\n")
	}
	if n := d.srv.loopConns(); n != before {
		t.Fatalf("the loop has %d connections, want %d: w left again without a new streak of waits", n, before)
	}
}

// TestEventLoopMixedLoad: clients on one loop mix sets of their own rows (which wait for the table), gets of them
// (from the copy, or the table after a set dropped it), local keys, pipelined batches, and reads of rows a direct
// writer keeps changing; every reply is the one due, in order, and every client reads its own writes, while
// connections step away, leave the loop and come back.
func TestEventLoopMixedLoad(t *testing.T) { eachWait(t, testEventLoopMixedLoad) }

func testEventLoopMixedLoad(t *testing.T, threads bool) {
	d := newWaitDoor(t, threads)
	stop := time.Now().Add(4 * time.Second)
	var wg sync.WaitGroup
	errs := make(chan string, 16)
	wg.Add(1)
	go func() { // the direct writer
		defer wg.Done()
		for i := 0; time.Now().Before(stop); i++ {
			if _, err := d.root.Exec("INSERT INTO test.lw VALUES (?, ?) ON DUPLICATE KEY UPDATE v = VALUES(v)", fmt.Sprint("d", i%8), fmt.Sprint(i)); err != nil {
				errs <- fmt.Sprintf("direct write: %v", err)
				return
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()
	for w := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := dialTest(t, d.addr)
			last := map[string]string{} // this client's rows: what it wrote last
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			for n := 0; time.Now().Before(stop); n++ {
				var req, want strings.Builder
				direct := 0 // gets of the direct writer's rows, answered last in the batch
				for range 1 + rng.IntN(3) {
					switch k, v := fmt.Sprintf("@@t.w%d-%d", w, rng.IntN(4)), fmt.Sprint(n); rng.IntN(5) {
					case 0, 1:
						fmt.Fprintf(&req, "set %s 0 0 %d\r\n%s\r\n", k, len(v), v)
						want.WriteString("STORED\r\n")
						last[k] = v
					case 2:
						fmt.Fprintf(&req, "get %s\r\n", k)
						if v, ok := last[k]; ok {
							fmt.Fprintf(&want, "VALUE %s 0 %d\r\n%s\r\n", k, len(v), v)
						}
						want.WriteString("END\r\n")
					case 3:
						fmt.Fprintf(&req, "set l%d 0 0 %d\r\n%s\r\nget l%d\r\n", w, len(v), v, w)
						fmt.Fprintf(&want, "STORED\r\nVALUE l%d 0 %d\r\n%s\r\nEND\r\n", w, len(v), v)
					default:
						direct++
					}
				}
				for i := range direct {
					fmt.Fprintf(&req, "get @@t.d%d\r\n", i)
				}
				c.send(req.String())
				c.nc.SetReadDeadline(time.Now().Add(20 * time.Second))
				got := make([]byte, want.Len())
				if m, err := readFull(c.br, got); err != nil || string(got) != want.String() {
					errs <- fmt.Sprintf("client %d: got %q (%v), want %q", w, got[:m], err, want.String())
					return
				}
				for range direct { // a row the direct writer keeps changing: any value, then END
					for {
						line, err := c.br.ReadString('\n')
						if err != nil {
							errs <- fmt.Sprintf("client %d: %v", w, err)
							return
						}
						if line == "END\r\n" {
							break
						}
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	if d.srv.stepsAway() == 0 {
		t.Error("no command was answered away from the loop")
	}
}

// TestEventLoopBinaryGetOfCopy: a binary get of a row is answered on the loop once its copy is held, and steps
// away (to read the table) only when it is not.
func TestEventLoopBinaryGetOfCopy(t *testing.T) { eachWait(t, testEventLoopBinaryGetOfCopy) }

func testEventLoopBinaryGetOfCopy(t *testing.T, threads bool) {
	d := newWaitDoor(t, threads)
	c := dialBinary(t, d.addr)
	expect(t, c.do(req(opGet, "@@t.cached", "")), opGet, statusOK, "c") // reads the table, keeps the copy
	d.expectStepsAway(t, 1, "the get that read the table")
	for range 3 {
		expect(t, c.do(req(opGet, "@@t.cached", "")), opGet, statusOK, "c")
	}
	expect(t, c.do(req(opGet, "@@t.nothing", "")), opGet, statusKeyNotFound, "Not found")
	d.expectStepsAway(t, 2, "the gets of the copy stay on it, a row not held does not")
}

// TestEventLoopMetaGetOfCopy: a meta get that only reads (no T, N, R or E) is answered on the loop once the row's
// copy is held; one that touches the row (T) steps away, as it writes the table.
func TestEventLoopMetaGetOfCopy(t *testing.T) { eachWait(t, testEventLoopMetaGetOfCopy) }

func testEventLoopMetaGetOfCopy(t *testing.T, threads bool) {
	d := newWaitDoor(t, threads)
	c := dialTest(t, d.addr)
	c.send("mg @@t.cached v\r\n") // reads the table, keeps the copy
	c.expect("VA 1\r\nc\r\n")
	d.expectStepsAway(t, 1, "the mg that read the table")
	for range 3 {
		c.send("mg @@t.cached v f k\r\n")
		c.expect("VA 1 f0 k@@t.cached\r\nc\r\n")
	}
	d.expectStepsAway(t, 1, "the reads of the copy stay on it")
	c.send("mg @@t.cached v T30\r\n")
	c.expect("VA 1\r\nc\r\n")
	d.expectStepsAway(t, 2, "the touch writes the table")
}
