package testenv

import (
	"net"
	"path/filepath"
	"testing"
)

// ConnPair returns both ends of a real connection on network ("tcp" on loopback, or "unix" in the test's temporary
// directory): the end that dialed and the end that was accepted, both closed at the test's cleanup.
func ConnPair(t testing.TB, network string) (dialed, accepted net.Conn) {
	t.Helper()
	addr := "127.0.0.1:0"
	if network == "unix" {
		addr = filepath.Join(t.TempDir(), "s")
	}
	ln, err := net.Listen(network, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ch := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		ch <- c
	}()
	dialed, err = net.Dial(network, ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	if accepted = <-ch; accepted == nil {
		dialed.Close()
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { dialed.Close(); accepted.Close() })
	return dialed, accepted
}
