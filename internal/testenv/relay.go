package testenv

import (
	"io"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"
)

// Relay is a TCP relay on a fixed loopback address in front of a server (a MariaDB) that a test can take away —
// closing the listener and every relayed connection, as a killed server would — and bring back on the same
// address. It is down until Up, and down again at the test's cleanup.
type Relay struct {
	Addr   string // where clients connect: "127.0.0.1:port"
	target string

	mu    sync.Mutex
	ln    net.Listener
	conns map[net.Conn]struct{}
}

// NewRelay picks a free loopback port for a relay to target; call Up to start relaying.
func NewRelay(t testing.TB, target string) *Relay {
	t.Helper()
	port, err := FreePort()
	if err != nil {
		t.Fatal(err)
	}
	r := &Relay{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), target: target, conns: map[net.Conn]struct{}{}}
	t.Cleanup(r.Down)
	return r
}

// Up listens on Addr (retrying briefly: the port may linger after Down) and relays each connection to the target.
func (r *Relay) Up(t testing.TB) {
	t.Helper()
	var ln net.Listener
	var err error
	for range 50 {
		if ln, err = net.Listen("tcp", r.Addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("relay: listen on %s: %v", r.Addr, err)
	}
	r.mu.Lock()
	r.ln = ln
	r.mu.Unlock()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			b, err := net.Dial("tcp", r.target)
			if err != nil {
				c.Close()
				continue
			}
			r.mu.Lock()
			r.conns[c], r.conns[b] = struct{}{}, struct{}{}
			r.mu.Unlock()
			go func() { _, _ = io.Copy(b, c); b.Close(); c.Close() }()
			go func() { _, _ = io.Copy(c, b); b.Close(); c.Close() }()
		}
	}()
}

// Down closes the listener and every relayed connection.
func (r *Relay) Down() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ln != nil {
		r.ln.Close()
		r.ln = nil
	}
	for c := range r.conns {
		c.Close()
	}
	clear(r.conns)
}

// Cut closes every relayed connection and keeps listening: what the clients see when the server drops their
// connections (a KILL, a network blip) and takes new ones at once.
func (r *Relay) Cut() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for c := range r.conns {
		c.Close()
	}
	clear(r.conns)
}
