//go:build linux

package memcache

import (
	"fmt"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// newSpinWait is a readyWait on an epoll set that holds one eventfd, which the returned function makes readable.
func newSpinWait(t *testing.T, spin time.Duration) (w *readyWait, ready func(), reset func()) {
	t.Helper()
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	efd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(efd); unix.Close(epfd) })
	if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, efd, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(efd)}); err != nil {
		t.Fatal(err)
	}
	w = &readyWait{epfd: epfd, events: make([]unix.EpollEvent, 8), spin: spin}
	one := []byte{1, 0, 0, 0, 0, 0, 0, 0}
	ready = func() {
		if _, err := unix.Write(efd, one); err != nil {
			t.Error(err)
		}
	}
	reset = func() {
		var b [8]byte
		unix.Read(efd, b[:])
	}
	return w, ready, reset
}

// TestLoopSpinFindsRequestWithin: a spin returns what becomes ready while it looks, without blocking, and a find
// clears any backoff.
func TestLoopSpinFindsRequestWithin(t *testing.T) {
	w, ready, _ := newSpinWait(t, 10*time.Second)
	w.misses = 3
	go func() {
		time.Sleep(20 * time.Millisecond)
		ready()
	}()
	if found, _ := w.spinWait(); !found {
		t.Fatal("the spin found nothing; the eventfd was made readable 20 ms into a 10 s spin")
	}
	if w.n != 1 || w.errno != 0 {
		t.Fatalf("the spin left %d events, errno %v; want the eventfd's one", w.n, w.errno)
	}
	if w.misses != 0 || w.skip != 0 {
		t.Fatalf("after a find: misses %d, skip %d; want 0, 0", w.misses, w.skip)
	}
}

// TestLoopSpinBacksOff: past spinMissesAllowed spins in a row that find nothing, each further one doubles the
// blocking waits that go without one, up to a cap; a wait that goes without a spin reports nothing found (block then
// waits as it would without), and a find ends the backoff.
func TestLoopSpinBacksOff(t *testing.T) {
	w, ready, reset := newSpinWait(t, 100*time.Microsecond)
	for miss := 1; miss <= maxSpinMisses+1; miss++ {
		if found, _ := w.spinWait(); found {
			t.Fatal("a spin found something in an empty set")
		}
		m, want := min(miss, maxSpinMisses), 0
		if m > spinMissesAllowed {
			want = 1<<(m-spinMissesAllowed) - 1
		}
		if w.skip != want || w.misses != m {
			t.Fatalf("after %d misses in a row: %d waits to go without a spin (misses %d), want %d", miss, w.skip, w.misses, want)
		}
		// The waits to be skipped do not look, so none finds even a ready set.
		ready()
		for n := want; n > 0; n-- {
			if found, _ := w.spinWait(); found {
				t.Fatalf("a wait to be skipped spun (after miss %d)", miss)
			}
		}
		reset()
	}
	ready()
	if found, _ := w.spinWait(); !found || w.misses != 0 || w.skip != 0 {
		t.Fatalf("a spin over a ready set: misses %d, skip %d; want a find and no backoff", w.misses, w.skip)
	}
}

// TestEventLoopSpinServes: with threads of their own and a spin before each wait, a loop answers a client's
// sequential requests, and requests that come after the loop's spins backed off, in order; the loop spins while it
// serves that one client and not while it serves two.
func TestEventLoopSpinServes(t *testing.T) {
	srv, _ := newDoor(t, Options{EventLoops: 1, LoopThreads: true, LoopSpin: 50 * time.Microsecond})
	addr := serveTest(t, srv)
	lone := func(want bool, why string) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			srv.mu.Lock()
			got := srv.loops[0].lone.Load()
			srv.mu.Unlock()
			if got == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("the loop serves one connection (and spins): %v, want %v: %s", got, want, why)
			}
			time.Sleep(time.Millisecond)
		}
	}
	c := dialTest(t, addr)
	for i := range 200 {
		if i%50 == 49 {
			time.Sleep(5 * time.Millisecond) // the loop's spins miss and back off
		}
		c.send(fmt.Sprintf("set k%d 0 0 2\r\nv%d\r\n", i%10, i%10))
		c.expect("STORED\r\n")
		c.send(fmt.Sprintf("get k%d\r\n", i%10))
		c.expect(fmt.Sprintf("VALUE k%d 0 2\r\nv%d\r\nEND\r\n", i%10, i%10))
		if i == 0 {
			lone(true, "one client")
		}
	}
	other := dialTest(t, addr)
	other.send("get k1\r\n")
	other.expect("VALUE k1 0 2\r\nv1\r\nEND\r\n")
	lone(false, "two clients")
	c.send("get k2\r\n")
	c.expect("VALUE k2 0 2\r\nv2\r\nEND\r\n")
	other.nc.Close()
	lone(true, "the second client hung up")
	c.send("get k3\r\n")
	c.expect("VALUE k3 0 2\r\nv3\r\nEND\r\n")
}

// TestLoopSpinLengthFollowsClient: a request that comes just after a spin gave up makes the next spins longer (half
// a base each time, up to maxSpinTimes the base) and does not count as a miss; requests found early make them
// shorter again, down to the base.
func TestLoopSpinLengthFollowsClient(t *testing.T) {
	const base = 20 * time.Millisecond
	w, ready, reset := newSpinWait(t, base)
	// The request is sent a base after the spin should have ended; a machine slow to start the spin may see it
	// within the spin instead (no change then), so a few tries are allowed. Without late, none changes the length.
	for try := 0; w.budget == 0; try++ {
		if try == 5 {
			t.Fatal("no request sent just after a spin gave up lengthened the spins")
		}
		go func() {
			time.Sleep(2 * base)
			ready()
		}()
		w.block(true)
		if w.n != 1 || w.errno != 0 {
			t.Fatalf("block left %d events, errno %v; want the eventfd's one", w.n, w.errno)
		}
		reset()
	}
	if w.budget != base+base/2 || w.misses != 0 {
		t.Fatalf("after a request just late: spin length %v, misses %d; want %v, 0", w.budget, w.misses, base+base/2)
	}
	for range 2 * maxSpinTimes {
		w.late()
	}
	if w.budget != maxSpinTimes*base {
		t.Fatalf("spin length %v after many late requests, want the cap %v", w.budget, maxSpinTimes*base)
	}
	ready()
	for want := maxSpinTimes*base - base/4; ; want = max(want-base/4, base) {
		if found, _ := w.spinWait(); !found {
			t.Fatal("a spin over a ready set found nothing")
		}
		if w.budget != want {
			t.Fatalf("spin length %v after an early find, want %v", w.budget, want)
		}
		if want == base {
			break
		}
	}
}
