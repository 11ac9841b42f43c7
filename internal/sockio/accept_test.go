package sockio

import (
	"errors"
	"net"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// scriptedListener answers Accept from its script: a net.Conn or an error each time.
type scriptedListener struct {
	net.Listener
	script []any
}

func (l *scriptedListener) Accept() (net.Conn, error) {
	if len(l.script) == 0 {
		return nil, net.ErrClosed
	}
	next := l.script[0]
	l.script = l.script[1:]
	if err, ok := next.(error); ok {
		return nil, err
	}
	return next.(net.Conn), nil
}

func TestAcceptLoopRetriesWithGrowingPauses(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	ln := &scriptedListener{script: []any{syscall.EMFILE, syscall.EMFILE, a, syscall.EMFILE, syscall.EINVAL}}
	var pauses []time.Duration
	var served []net.Conn
	err := AcceptLoop{
		Closed:   func() bool { return false },
		Retry:    func(err error) bool { return errors.Is(err, syscall.EMFILE) },
		Retrying: func(_ error, pause time.Duration) { pauses = append(pauses, pause) },
	}.Run(ln, func(nc net.Conn) bool { served = append(served, nc); return true })
	if !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("Run = %v, want the error that is not retried", err)
	}
	if len(served) != 1 || served[0] != a {
		t.Fatalf("served %v, want the one conn", served)
	}
	// Doubling from 5 ms; an accepted connection starts the pauses over.
	want := []time.Duration{5 * time.Millisecond, 10 * time.Millisecond, 5 * time.Millisecond}
	if len(pauses) != len(want) {
		t.Fatalf("pauses %v, want %v", pauses, want)
	}
	for i := range want {
		if pauses[i] != want[i] {
			t.Fatalf("pauses %v, want %v", pauses, want)
		}
	}
}

func TestAcceptLoopEnds(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	var closed atomic.Bool
	closed.Store(true)
	loop := AcceptLoop{Closed: closed.Load, Retry: func(error) bool { return true }}
	if err := loop.Run(&scriptedListener{script: []any{syscall.EMFILE}}, func(net.Conn) bool { return true }); err != nil {
		t.Fatalf("closed door: Run = %v, want nil without a retry", err)
	}
	closed.Store(false)
	n := 0
	err := loop.Run(&scriptedListener{script: []any{a, a}}, func(net.Conn) bool { n++; return false })
	if err != nil || n != 1 {
		t.Fatalf("serve said stop: Run = %v after %d conns, want nil after 1", err, n)
	}
}
