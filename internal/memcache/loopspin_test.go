//go:build linux

package memcache

import (
	"fmt"
	spinpkg "github.com/keywaydb/keyway/internal/spin"
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
	w = &readyWait{epfd: epfd, events: make([]unix.EpollEvent, 8), spin: spinpkg.Budget{Base: spin}}
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
	w.spin.SetState(0, 3, 0)
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
	if _, misses, skip := w.spin.State(); misses != 0 || skip != 0 {
		t.Fatalf("after a find: misses %d, skip %d; want 0, 0", misses, skip)
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

// TestLoopSpinLateRequest: a request that comes just after the loop's spin gave up (found by the blocking wait that
// follows) makes the next spins longer (package spin's Blocked).
func TestLoopSpinLateRequest(t *testing.T) {
	const base = 20 * time.Millisecond
	w, ready, reset := newSpinWait(t, base)
	// The request is sent a base after the spin should have ended; a machine slow to start the spin may see it
	// within the spin instead (no change then), so a few tries are allowed.
	for try := 0; ; try++ {
		if length, _, _ := w.spin.State(); length != 0 {
			break
		}
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
	if length, misses, _ := w.spin.State(); length != base+base/2 || misses != 0 {
		t.Fatalf("after a request just late: spin length %v, misses %d; want %v, 0", length, misses, base+base/2)
	}
}
