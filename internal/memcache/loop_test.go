package memcache

import (
	"context"
	"fmt"
	"net"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keywaydb/keyway/internal/engine"
	"github.com/keywaydb/keyway/internal/store"
)

// eventLoops is how many event loops srv runs.
func (s *Server) eventLoops() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.loops)
}

// newLoopServer is a door with one event loop (so every connection shares it) over a fresh memory-only store.
func newLoopServer(t *testing.T, o Options) (*Server, string) {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("event loops are Linux's")
	}
	o.EventLoops = 1
	srv, _ := newDoor(t, o)
	addr := serveTest(t, srv)
	c := dialTest(t, addr)
	c.send("version\r\n")
	c.expect("VERSION ")
	if n := srv.eventLoops(); n != 1 {
		t.Fatalf("the door runs %d event loops, want 1", n)
	}
	checkWait(t, srv, o.LoopThreads)
	return srv, addr
}

// eachWait runs test twice: with the loops waiting in Go's poller, and on threads of their own (LoopThreads).
func eachWait(t *testing.T, test func(t *testing.T, threads bool)) {
	t.Run("poller", func(t *testing.T) { test(t, false) })
	t.Run("threads", func(t *testing.T) { test(t, true) })
}

// checkWait fails t unless srv's loops wait where threads says: on threads of their own, out of Go's poller, or in it.
func checkWait(t *testing.T, srv *Server, threads bool) {
	t.Helper()
	srv.mu.Lock()
	defer srv.mu.Unlock()
	for _, l := range srv.loops {
		if own := l.ownThread(); own != threads {
			t.Fatalf("a loop waits on a thread of its own: %v, want %v", own, threads)
		}
	}
}

// TestEventLoopSlowReaderHoldsUpNobody: a client that asks for more than its socket takes and does not read leaves
// the event loop; the loop's other connections are answered meanwhile, and the slow client, once it reads, gets
// every reply in order.
func TestEventLoopSlowReaderHoldsUpNobody(t *testing.T) {
	eachWait(t, testEventLoopSlowReaderHoldsUpNobody)
}

func testEventLoopSlowReaderHoldsUpNobody(t *testing.T, threads bool) {
	srv, addr := newLoopServer(t, Options{LoopThreads: threads})
	value := strings.Repeat("v", 512<<10)
	slow := dialTest(t, addr)
	slow.send(fmt.Sprintf("set big 7 0 %d\r\n%s\r\n", len(value), value))
	slow.expect("STORED\r\n")
	if n := srv.loopConns(); n != 2 { // slow, and newLoopServer's probe
		t.Fatalf("the loop serves %d connections, want 2", n)
	}

	// 40 replies of 512 KiB: far more than loopback socket buffers hold.
	const gets = 40
	slow.send(strings.Repeat("get big\r\n", gets))
	// The replies do not fit the socket: the slow client leaves the loop, which keeps newLoopServer's probe.
	waitLoopConns(t, srv, 1, "the slow client did not leave it")

	other := dialTest(t, addr)
	other.send("touch nothing 0\r\n")
	other.expect("NOT_FOUND\r\n")
	if n := srv.loopConns(); n != 2 { // other, and the probe
		t.Fatalf("the loop serves %d connections, want 2", n)
	}
	for i := range 20 {
		other.send(fmt.Sprintf("set k%d 0 0 1\r\nx\r\nget k%d\r\n", i, i))
		other.expect(fmt.Sprintf("STORED\r\nVALUE k%d 0 1\r\nx\r\nEND\r\n", i))
	}

	reply := fmt.Sprintf("VALUE big 7 %d\r\n%s\r\nEND\r\n", len(value), value)
	for i := range gets {
		slow.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
		got := make([]byte, len(reply))
		if n, err := readFull(slow.br, got); err != nil || string(got) != reply {
			t.Fatalf("reply %d: %d bytes read (err %v), not the value", i, n, err)
		}
	}
	// It goes on as a connection of its own.
	slow.send("get k3\r\n")
	slow.expect("VALUE k3 0 1\r\nx\r\nEND\r\n")
}

// TestEventLoopShutdown: Shutdown closes the connections event loops serve (idle between requests), each client
// sees its connection closed, and Shutdown returns with none left.
func TestEventLoopShutdown(t *testing.T) { eachWait(t, testEventLoopShutdown) }

func testEventLoopShutdown(t *testing.T, threads bool) {
	if runtime.GOOS != "linux" {
		t.Skip("event loops are Linux's")
	}
	st, err := store.Open(store.Options{MemoryLimit: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	srv := NewServer(engine.New(st, engine.Options{MaxItemSize: 1 << 20}), Options{EventLoops: 2, LoopThreads: threads})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	var clients []*testClient
	for i := range 4 {
		c := dialTest(t, ln.Addr().String())
		c.send(fmt.Sprintf("set k%d 0 0 1\r\nx\r\n", i))
		c.expect("STORED\r\n")
		clients = append(clients, c)
	}
	if n := srv.currConns.Load(); n != 4 {
		t.Fatalf("curr_connections %d, want 4", n)
	}
	if n := srv.loopConns(); n != 4 {
		t.Fatalf("the loops serve %d connections, want 4", n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v (connections left: %d)", err, srv.currConns.Load())
	}
	if err := <-done; err != nil {
		t.Fatalf("Serve: %v", err)
	}
	for _, c := range clients {
		c.expectClosed()
	}
	if n := srv.currConns.Load(); n != 0 {
		t.Fatalf("curr_connections %d after Shutdown, want 0", n)
	}
}

// TestEventLoopsOnlyWhereNothingWaits: a door over a store that waits for the disk serves each connection with a
// goroutine of its own (a loop would stall its other connections for each sync).
func TestEventLoopsOnlyWhereNothingWaits(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("event loops are Linux's")
	}
	for _, tc := range []struct {
		durability store.Durability
		loops      bool
	}{{store.DurabilitySync, false}, {store.DurabilityAsync, true}} {
		st, err := store.Open(store.Options{MemoryLimit: 64 << 20, DataDir: t.TempDir(), Durability: tc.durability})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() }) // after the server's (cleanups run last first)
		srv := NewServer(engine.New(st, engine.Options{MaxItemSize: 1 << 20}), Options{})
		c := dialTest(t, serveTest(t, srv))
		c.send("set k 0 0 1\r\nx\r\nget k\r\n")
		c.expect("STORED\r\nVALUE k 0 1\r\nx\r\nEND\r\n")
		if got := srv.eventLoops() > 0; got != tc.loops {
			t.Errorf("durability %v: event loops %v, want %v", tc.durability, got, tc.loops)
		}
	}
}

// waitLoopConns waits until srv's event loops serve want connections (a connection leaves or comes back after the
// reply that triggers it); it fails the test, saying why, when they do not within 10 s.
func waitLoopConns(t *testing.T, srv *Server, want int, why string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); srv.loopConns() != want; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the loops serve %d connections, want %d: %s", srv.loopConns(), want, why)
		}
	}
}

// loopConns is how many connections srv's event loops serve.
func (s *Server) loopConns() int {
	s.mu.Lock()
	loops := s.loops
	s.mu.Unlock()
	n := 0
	for _, l := range loops {
		l.mu.Lock()
		n += len(l.conns)
		l.mu.Unlock()
	}
	return n
}

// stepsAway is how many commands srv's event loops answered away from the loop (stepAway).
func (s *Server) stepsAway() uint64 {
	s.mu.Lock()
	loops := s.loops
	s.mu.Unlock()
	var n uint64
	for _, l := range loops {
		n += l.stepsAway.Load()
	}
	return n
}

// TestEventLoopWalkOnOwnGoroutine: a request that walks the whole store (lru_crawler metadump) steps away from the
// event loop first, so the walk never holds up the loop's other connections; the connection then comes back.
func TestEventLoopWalkOnOwnGoroutine(t *testing.T) { eachWait(t, testEventLoopWalkOnOwnGoroutine) }

func testEventLoopWalkOnOwnGoroutine(t *testing.T, threads bool) {
	srv, addr := newLoopServer(t, Options{LoopThreads: threads})
	c := dialTest(t, addr)
	c.send("set k 0 0 1\r\nx\r\nget k\r\n")
	c.expect("STORED\r\nVALUE k 0 1\r\nx\r\nEND\r\n")
	if n := srv.stepsAway(); n != 0 {
		t.Fatalf("%d commands answered away from the loop, want 0: a set and a get of the local store wait on nothing", n)
	}
	before := srv.loopConns()
	c.send("lru_crawler metadump all\r\n")
	c.nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	line, err := c.br.ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "key=k ") {
		t.Fatalf("metadump: %q %v", line, err)
	}
	c.expect("END\r\n")
	if n := srv.stepsAway(); n != 1 {
		t.Fatalf("%d commands answered away from the loop, want 1 (the walk)", n)
	}
	c.send("get k\r\n")
	c.expect("VALUE k 0 1\r\nx\r\nEND\r\n")
	if after := srv.loopConns(); after != before {
		t.Fatalf("the loops serve %d connections after the walk, want %d (the walking one came back)", after, before)
	}
}

// TestEventLoopStoppedServesByGoroutine: once a loop has stopped while the server goes on (its epoll_wait failed),
// new connections get a goroutine each instead of being closed by it.
func TestEventLoopStoppedServesByGoroutine(t *testing.T) {
	eachWait(t, testEventLoopStoppedServesByGoroutine)
}

func testEventLoopStoppedServesByGoroutine(t *testing.T, threads bool) {
	srv, addr := newLoopServer(t, Options{LoopThreads: threads})
	srv.mu.Lock()
	l := srv.loops[0]
	srv.mu.Unlock()
	l.stop() // as a failed epoll_wait leaves it: shut, still in srv.loops
	waitLoopConns(t, srv, 0, "the stopped loop did not close its connections")
	c := dialTest(t, addr)
	c.send("set k 0 0 1\r\nx\r\nget k\r\n")
	c.expect("STORED\r\nVALUE k 0 1\r\nx\r\nEND\r\n")
}

// TestEventLoopKeepsNoThreadWhileEmpty: a loop with a thread of its own (LoopThreads) keeps it only while it has
// connections, and says so (OnLoopThread), so that the process's P more for loop threads can go while no loop needs
// it (package server). It starts parked; a client makes it keep its thread; a client that leaves the loop because its
// every command steps away (a sync container's writer does; here walks of the store), which it does from the
// goroutine the loop stepped away to while another goroutine waits in epoll_pwait, lets it park again, and so does
// one that hangs up.
func TestEventLoopKeepsNoThreadWhileEmpty(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("event loops are Linux's")
	}
	var keeping atomic.Int32
	srv, _ := newDoor(t, Options{EventLoops: 1, LoopThreads: true, OnLoopThread: func(keeps bool) {
		if keeps {
			keeping.Add(1)
		} else {
			keeping.Add(-1)
		}
	}})
	addr := serveTest(t, srv)
	for deadline := time.Now().Add(10 * time.Second); srv.eventLoops() != 1; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the door runs %d event loops, want 1", srv.eventLoops())
		}
	}
	srv.mu.Lock()
	l := srv.loops[0]
	srv.mu.Unlock()
	parked := func(want bool, why string) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
			l.mu.Lock()
			p := l.parked
			l.mu.Unlock()
			k, wantK := keeping.Load(), int32(1)
			if want {
				wantK = 0
			}
			if p == want && k == wantK {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("the loop is parked: %v, and keeps its thread by OnLoopThread's count %d; want parked %v: %s", p, k, want, why)
			}
		}
	}
	parked(true, "no client has come yet")

	c := dialTest(t, addr)
	// Enough items that a walk takes long after it steps away: by the time the client leaves, the goroutine that took
	// the loop over waits in epoll_pwait, and only the loop's wake gets it out to park.
	const items = 5000
	var sets strings.Builder
	for i := range items {
		fmt.Fprintf(&sets, "set k%d 0 0 1 noreply\r\nx\r\n", i)
	}
	c.send(sets.String() + "set k 0 0 1\r\nx\r\n")
	c.expect("STORED\r\n")
	parked(false, "a client is in the loop")
	for i := range awayStreakLimit {
		c.send("lru_crawler metadump all\r\n")
		for n := 0; ; n++ {
			c.nc.SetReadDeadline(time.Now().Add(5 * time.Second))
			line, err := c.br.ReadString('\n')
			if err != nil || line == "END\r\n" {
				if err != nil || n != items+1 {
					t.Fatalf("metadump %d: %d keys, then %q %v; want %d keys, then END", i, n, line, err, items+1)
				}
				break
			}
		}
	}
	waitLoopConns(t, srv, 0, "a client whose every batch stepped away did not leave the loop")
	parked(true, "its only client left the loop")
	c.send("get k\r\n") // served by a goroutine of its own
	c.expect("VALUE k 0 1\r\nx\r\nEND\r\n")

	other := dialTest(t, addr)
	other.send("get k\r\n")
	other.expect("VALUE k 0 1\r\nx\r\nEND\r\n")
	parked(false, "a new client is in the loop")
	other.nc.Close()
	parked(true, "the loop's client hung up")
}
