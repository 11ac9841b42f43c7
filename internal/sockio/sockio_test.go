package sockio

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"runtime"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/keywaydb/keyway/internal/spin"
	"github.com/keywaydb/keyway/internal/testenv"
)

// pair returns a wrapped client end and the server end of a real connection on network ("tcp" or "unix").
func pair(t *testing.T, network string) (wrapped, peer net.Conn) {
	t.Helper()
	return pairWrapped(t, network, Wrap)
}

// pairWrapped is pair with the client end wrapped by wrap.
func pairWrapped(t *testing.T, network string, wrap func(net.Conn) net.Conn) (wrapped, peer net.Conn) {
	t.Helper()
	nc, peer := testenv.ConnPair(t, network)
	wrapped = wrap(nc)
	t.Cleanup(func() { wrapped.Close() })
	return wrapped, peer
}

func TestWrapTakesSocketsOnly(t *testing.T) {
	c, _ := pair(t, "tcp")
	if _, ok := c.(*Conn); ok != (runtime.GOOS == "linux") {
		t.Fatalf("Wrap(tcp) = %T on %s", c, runtime.GOOS)
	}
	if Wrap(c) != c {
		t.Fatal("wrapping twice made a second wrapper")
	}
	if _, ok := c.(syscall.Conn); !ok {
		t.Fatal("the wrapped socket lost SyscallConn")
	}
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if Wrap(a) != a {
		t.Fatal("a pipe, which has no socket, was wrapped")
	}
}

// A transfer far larger than the socket buffers makes both sides wait in the poller; every byte arrives in order.
func TestLargeTransfersBothWays(t *testing.T) {
	for _, network := range []string{"tcp", "unix"} {
		t.Run(network, func(t *testing.T) {
			c, peer := pair(t, network)
			data := make([]byte, 8<<20)
			for i := range data {
				data[i] = byte(i * 7)
			}
			// wrapped writes, the peer reads slowly at first so the wrapped side finds the buffer full
			done := make(chan error, 1)
			go func() {
				n, err := c.Write(data)
				if err == nil && n != len(data) {
					err = io.ErrShortWrite
				}
				done <- err
			}()
			time.Sleep(50 * time.Millisecond)
			got := make([]byte, len(data))
			if _, err := io.ReadFull(peer, got); err != nil {
				t.Fatal(err)
			}
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, data) {
				t.Fatal("the peer read other bytes than were written")
			}
			// the peer writes, the wrapped side reads (and waits for data that is not there yet)
			go func() {
				time.Sleep(50 * time.Millisecond)
				_, err := peer.Write(data)
				done <- err
			}()
			clear(got)
			if _, err := io.ReadFull(c, got); err != nil {
				t.Fatal(err)
			}
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, data) {
				t.Fatal("read other bytes than the peer wrote")
			}
		})
	}
}

func TestErrorsAreNetConns(t *testing.T) {
	c, peer := pair(t, "tcp")

	// A read deadline: a timeout, as net.Conn reports it.
	c.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	_, err := c.Read(make([]byte, 10))
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read past the deadline: %v", err)
	}
	if oe := (*net.OpError)(nil); !errors.As(err, &oe) || oe.Op != "read" {
		t.Fatalf("read past the deadline: %#v, want a *net.OpError with Op read", err)
	}
	c.SetReadDeadline(time.Time{})

	// The peer sends and closes: the bytes, then io.EOF itself.
	peer.Write([]byte("bye"))
	peer.Close()
	got, err := io.ReadAll(c)
	if err != nil || string(got) != "bye" {
		t.Fatalf("read to the end: %q, %v", got, err)
	}
	if n, err := c.Read(make([]byte, 1)); n != 0 || err != io.EOF {
		t.Fatalf("read after the end: %d, %v; want 0, io.EOF", n, err)
	}

	// Writing to a closed peer fails with the system's error (EPIPE or ECONNRESET), not a signal.
	var werr error
	for range 100 {
		if _, werr = c.Write(make([]byte, 64<<10)); werr != nil {
			break
		}
		time.Sleep(time.Millisecond)
	}
	if !errors.Is(werr, syscall.EPIPE) && !errors.Is(werr, syscall.ECONNRESET) {
		t.Fatalf("write to a closed peer: %v", werr)
	}
	if oe := (*net.OpError)(nil); !errors.As(werr, &oe) || oe.Op != "write" {
		t.Fatalf("write to a closed peer: %#v, want a *net.OpError with Op write", werr)
	}

	// Our own end closed: net.ErrClosed.
	c.Close()
	if _, err := c.Read(make([]byte, 1)); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("read after Close: %v", err)
	}
	if _, err := c.Write([]byte("x")); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("write after Close: %v", err)
	}
}

// A Close from another goroutine wakes a read waiting in the poller, as it would a net.Conn's.
func TestCloseWakesAWaitingRead(t *testing.T) {
	c, _ := pair(t, "tcp")
	done := make(chan error, 1)
	go func() {
		_, err := c.Read(make([]byte, 1))
		done <- err
	}()
	time.Sleep(20 * time.Millisecond)
	c.Close()
	select {
	case err := <-done:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("read woken by Close: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a read waiting in the poller was not woken by Close")
	}
}

// A read and a write allocate nothing (their state and poller callbacks live with the connection): the SQL door
// makes one of each per packet batch on each side.
func TestReadWriteAllocateNothing(t *testing.T) {
	t.Run("plain", func(t *testing.T) { testReadWriteAllocateNothing(t, Wrap) })
	t.Run("pooled", func(t *testing.T) { testReadWriteAllocateNothing(t, WrapPooled) }) // each write checks first
}

func testReadWriteAllocateNothing(t *testing.T, wrap func(net.Conn) net.Conn) {
	c, peer := pairWrapped(t, "tcp", wrap)
	if _, ok := c.(*Conn); !ok {
		t.Skip("no raw calls on " + runtime.GOOS)
	}
	msg, buf := []byte("0123456789"), make([]byte, 10)
	allocs := testing.AllocsPerRun(200, func() {
		if _, err := c.Write(msg); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(peer, buf); err != nil {
			t.Fatal(err)
		}
		if _, err := peer.Write(msg); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(c, buf); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("a write and a read allocated %.1f times", allocs)
	}
}

// A pooled connection's first write after a read checks the socket first: a peer that closed the connection, or
// sent something unasked, while it sat idle fails the write with nothing written (what go-sql-driver retries on
// another connection); a live one writes as ever. A plain wrapped connection writes into the closed one.
func TestPooledWriteChecksAfterIdle(t *testing.T) {
	request := func(t *testing.T, c, peer net.Conn) {
		t.Helper()
		buf := make([]byte, 4)
		if _, err := c.Write([]byte("ping")); err != nil {
			t.Fatalf("write on a live connection: %v", err)
		}
		if _, err := io.ReadFull(peer, buf); err != nil {
			t.Fatal(err)
		}
		if _, err := peer.Write([]byte("pong")); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(c, buf); err != nil {
			t.Fatal(err)
		}
	}
	// waitReadable waits until the client's socket holds what the peer did (a byte, or its end).
	waitReadable := func(t *testing.T, c net.Conn) {
		t.Helper()
		raw, _ := c.(*Conn).SyscallConn()
		var b [1]byte
		deadline := time.Now().Add(5 * time.Second)
		for time.Now().Before(deadline) {
			ready := false
			raw.Control(func(fd uintptr) {
				_, _, e := syscall.Syscall6(syscall.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&b[0])), 1,
					syscall.MSG_PEEK|syscall.MSG_DONTWAIT, 0, 0)
				ready = e != syscall.EAGAIN
			})
			if ready {
				return
			}
			time.Sleep(time.Millisecond)
		}
		t.Fatal("the peer's end or data never reached the client's socket")
	}

	t.Run("live", func(t *testing.T) {
		c, peer := pairWrapped(t, "tcp", WrapPooled)
		if _, ok := c.(*Conn); !ok {
			t.Skip("no raw calls on " + runtime.GOOS)
		}
		for range 3 {
			request(t, c, peer)
		}
	})
	t.Run("after WriteThenRead", func(t *testing.T) { // its read counts as Read's: the next write checks
		c, peer := pairWrapped(t, "tcp", WrapPooled)
		if _, ok := c.(*Conn); !ok {
			t.Skip("no raw calls on " + runtime.GOOS)
		}
		go func() {
			buf := make([]byte, 4)
			if _, err := io.ReadFull(peer, buf); err == nil {
				peer.Write([]byte("pong"))
			}
			peer.Close()
		}()
		reply := make([]byte, 4)
		if _, _, err := c.(*Conn).WriteThenRead([]byte("ping"), reply); err != nil {
			t.Fatal(err)
		}
		waitReadable(t, c)
		if _, err := c.Write([]byte("ping")); !errors.Is(err, ErrClosedWhileIdle) {
			t.Fatalf("write after the peer closed: %v; want ErrClosedWhileIdle", err)
		}
	})
	t.Run("closed", func(t *testing.T) {
		c, peer := pairWrapped(t, "tcp", WrapPooled)
		if _, ok := c.(*Conn); !ok {
			t.Skip("no raw calls on " + runtime.GOOS)
		}
		request(t, c, peer)
		peer.Close()
		waitReadable(t, c)
		n, err := c.Write([]byte("ping"))
		if n != 0 || !errors.Is(err, ErrClosedWhileIdle) {
			t.Fatalf("write after the peer closed: %d, %v; want 0, ErrClosedWhileIdle", n, err)
		}
		var oe *net.OpError
		if !errors.As(err, &oe) || oe.Op != "write" {
			t.Fatalf("error %#v is not a *net.OpError of a write", err)
		}
	})
	t.Run("unasked", func(t *testing.T) {
		c, peer := pairWrapped(t, "tcp", WrapPooled)
		if _, ok := c.(*Conn); !ok {
			t.Skip("no raw calls on " + runtime.GOOS)
		}
		request(t, c, peer)
		peer.Write([]byte("bye"))
		waitReadable(t, c)
		if n, err := c.Write([]byte("ping")); n != 0 || !errors.Is(err, ErrSentWhileIdle) {
			t.Fatalf("write after the peer spoke unasked: %d, %v; want 0, ErrSentWhileIdle", n, err)
		}
		peer.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
		if n, err := peer.Read(make([]byte, 4)); n != 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("the peer read %d bytes (%v) of a write that should have written nothing", n, err)
		}
	})
	t.Run("plain", func(t *testing.T) {
		c, peer := pair(t, "tcp")
		if _, ok := c.(*Conn); !ok {
			t.Skip("no raw calls on " + runtime.GOOS)
		}
		request(t, c, peer)
		peer.Close()
		waitReadable(t, c)
		if n, err := c.Write([]byte("ping")); err != nil || n != 4 {
			t.Fatalf("a plain connection's write into a closed one: %d, %v; want 4, nil (TCP takes it)", n, err)
		}
	})
}

// rawPair is pair's wrapped end as a *Conn, with a deadline that fails a test whose wait was lost instead of hanging
// it; it skips where there are no raw calls.
func rawPair(t *testing.T, network string) (*Conn, net.Conn) {
	t.Helper()
	w, peer := pair(t, network)
	c, ok := w.(*Conn)
	if !ok {
		t.Skip("no raw calls on " + runtime.GOOS)
	}
	c.SetDeadline(time.Now().Add(10 * time.Second))
	return c, peer
}

// WriteThenRead sends a request and returns the reply that follows it, on both networks: a peer that answers as
// soon as the request lands (the reply may come before the read waits: the wait must still see it), a request too
// big for the socket's buffer (the write finishes waiting for room, then the read), and no allocation per call.
func TestWriteThenRead(t *testing.T) {
	for _, network := range []string{"tcp", "unix"} {
		t.Run(network, func(t *testing.T) {
			c, peer := rawPair(t, network)
			go func() { // echoes each 8-byte request back, reversed, at once
				req := make([]byte, 8)
				for {
					if _, err := io.ReadFull(peer, req); err != nil {
						return
					}
					for i, j := 0, len(req)-1; i < j; i, j = i+1, j-1 {
						req[i], req[j] = req[j], req[i]
					}
					if _, err := peer.Write(req); err != nil {
						return
					}
				}
			}()
			req, reply := []byte("abcdefgh"), make([]byte, 8)
			for i := range 2000 {
				nw, nr, err := c.WriteThenRead(req, reply)
				if err != nil || nw != len(req) || nr == 0 {
					t.Fatalf("exchange %d: wrote %d, read %d, err %v", i, nw, nr, err)
				}
				if nr < len(reply) {
					if _, err := io.ReadFull(c, reply[nr:]); err != nil {
						t.Fatal(err)
					}
				}
				if string(reply) != "hgfedcba" {
					t.Fatalf("exchange %d: reply %q", i, reply)
				}
			}
			allocs := testing.AllocsPerRun(100, func() {
				if _, _, err := c.WriteThenRead(req, reply); err != nil {
					t.Fatal(err)
				}
			})
			if allocs != 0 {
				t.Fatalf("WriteThenRead allocated %.1f times", allocs)
			}
		})
	}
	t.Run("big request", func(t *testing.T) {
		c, peer := rawPair(t, "tcp")
		big := bytes.Repeat([]byte("x"), 8<<20)
		go func() {
			got, _ := io.ReadAll(io.LimitReader(peer, int64(len(big))))
			peer.Write([]byte{byte(len(got) >> 20)})
		}()
		reply := make([]byte, 1)
		nw, nr, err := c.WriteThenRead(big, reply)
		if err != nil || nw != len(big) || nr != 1 || reply[0] != 8 {
			t.Fatalf("wrote %d of %d, read %d (%v), err %v", nw, len(big), nr, reply, err)
		}
	})
}

// A peer that closed the connection before the request fails WriteThenRead, without waiting for a reply that will not
// come: on a unix socket the write fails, on TCP the peer's reset to the request ends the wait.
func TestWriteThenReadClosedPeer(t *testing.T) {
	for _, network := range []string{"tcp", "unix"} {
		t.Run(network, func(t *testing.T) {
			c, peer := rawPair(t, network)
			peer.Close()
			time.Sleep(50 * time.Millisecond) // the close has reached c's socket
			_, _, err := c.WriteThenRead([]byte("request"), make([]byte, 8))
			if err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("err %v, want the closed connection's", err)
			}
			var oe *net.OpError
			if !errors.As(err, &oe) && err != io.EOF {
				t.Fatalf("err %T %v, want a *net.OpError or io.EOF", err, err)
			}
		})
	}
	t.Run("deadline passed", func(t *testing.T) {
		w, peer := pair(t, "tcp")
		if _, ok := w.(*Conn); !ok {
			t.Skip("no raw calls on " + runtime.GOOS)
		}
		w.SetDeadline(time.Now().Add(-time.Second))
		nw, _, err := w.(*Conn).WriteThenRead([]byte("request"), make([]byte, 8))
		if nw != 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("wrote %d, err %v: want nothing written and the deadline's error", nw, err)
		}
		peer.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		if n, _ := peer.Read(make([]byte, 8)); n != 0 {
			t.Fatalf("the peer received %d bytes", n)
		}
	})
}

// WriteThenRead waits for the reply before it reads: one read per exchange, where Write and Read make two (the
// read that finds nothing, then the one after the wait). Counted on this goroutine's own thread, with a peer that
// takes a moment to answer so that the reply is never there before the read.
func TestWriteThenReadWaitsFirst(t *testing.T) {
	c, peer := rawPair(t, "unix")
	runtime.LockOSThread() // the raw calls of this goroutine are this thread's
	defer runtime.UnlockOSThread()
	if _, ok := testenv.ThreadReads(); !ok {
		t.Skip("no per-thread I/O accounting here")
	}
	go func() {
		req := make([]byte, 4)
		for {
			if _, err := io.ReadFull(peer, req); err != nil {
				return
			}
			time.Sleep(200 * time.Microsecond)
			if _, err := peer.Write(req); err != nil {
				return
			}
		}
	}()
	const exchanges = 100
	reply := make([]byte, 4)
	count := func(exchange func() error) float64 {
		before, _ := testenv.ThreadReads()
		for range exchanges {
			if err := exchange(); err != nil {
				t.Fatal(err)
			}
		}
		after, _ := testenv.ThreadReads()
		return float64(after-before) / exchanges
	}
	plain := count(func() error {
		if _, err := c.Write([]byte("ping")); err != nil {
			return err
		}
		_, err := io.ReadFull(c, reply)
		return err
	})
	fused := count(func() error {
		_, n, err := c.WriteThenRead([]byte("ping"), reply)
		if err == nil && n < len(reply) {
			_, err = io.ReadFull(c, reply[n:])
		}
		return err
	})
	t.Logf("reads per exchange: Write and Read %.2f, WriteThenRead %.2f", plain, fused)
	if plain < 1.5 {
		t.Skipf("Write and Read made %.2f reads per exchange: the count does not see the read that finds nothing", plain)
	}
	if fused > 1.2 {
		t.Errorf("WriteThenRead made %.2f reads per exchange (Write and Read: %.2f), want 1", fused, plain)
	}
}

// TestSpinnerFindsDataWithin: a read whose Spinner the gate admits finds data that arrives within its spin without
// waiting in the poller, leaves the gate free after, and a read the gate refuses (a statement in flight elsewhere)
// waits as any read does; both read the data right.
func TestSpinnerFindsDataWithin(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("raw calls are Linux's")
	}
	wrapped, peer := pair(t, "tcp")
	var gate spin.Gate
	s := &Spinner{Budget: spin.Budget{Base: time.Second}, Gate: &gate, Who: 1, MaxBusy: 0}
	wrapped.(*Conn).SetSpinner(s)
	read := func(want string) {
		t.Helper()
		go func() {
			time.Sleep(5 * time.Millisecond)
			peer.Write([]byte(want))
		}()
		buf := make([]byte, 16)
		n, err := wrapped.Read(buf)
		if err != nil || string(buf[:n]) != want {
			t.Fatalf("read %q %v, want %q", buf[:n], err, want)
		}
	}
	read("spun")
	// A find in the first half of a spin sets the spin's length (to the base, from nothing): the spin found it.
	if length, misses, _ := s.Budget.State(); length != time.Second || misses != 0 {
		t.Fatalf("a spin of a second and data sent 5 ms in: length %v, misses %d; want a find", length, misses)
	}
	s.Budget.SetState(0, 0, 0)
	if !gate.TrySpin(1, 0) {
		t.Fatal("the gate was left taken after a spin")
	}
	gate.Done()
	gate.Begin(1) // a statement in flight: this read may not spin
	read("waited")
	gate.End()
	if length, misses, _ := s.Budget.State(); length != 0 || misses != 0 {
		t.Fatalf("a read the gate refused spun: length %v, misses %d", length, misses)
	}
}
