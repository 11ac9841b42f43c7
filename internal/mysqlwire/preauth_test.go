package mysqlwire

import (
	"errors"
	"net"
	"sync"
	"testing"
	"time"
)

// TestServerHandshakeBoundsPackets: before authentication a packet longer than MaxHandshakePacket is refused with
// ER_NET_PACKET_TOO_LARGE as soon as its header arrives (over a synchronous pipe, a server waiting for the body
// would never answer); after a successful handshake the connection's own limit applies again.
func TestServerHandshakeBoundsPackets(t *testing.T) {
	cfg := &ServerConfig{Version: "8.0.0-test", Capabilities: BaseCaps, DefaultPlugin: NativePassword, RemoteHost: "h",
		Lookup: func(u string) (Account, bool) { return Account{User: u, Password: "pw"}, u == "u" }}
	for _, tc := range []struct {
		name string
		n    int // announced length of the handshake response
	}{{"just over the bound", MaxHandshakePacket + 1}, {"a continued 16 MiB packet", MaxPayload}} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := net.Pipe()
			defer a.Close()
			defer b.Close()
			_ = a.SetDeadline(time.Now().Add(5 * time.Second))
			_ = b.SetDeadline(time.Now().Add(5 * time.Second))
			srv, cli := NewConn(a), NewConn(b)
			var serr error
			var wg sync.WaitGroup
			wg.Add(1)
			go func() { defer wg.Done(); _, serr = ServerHandshake(srv, cfg) }()
			if _, _, _, err := ReadServerHandshake(cli); err != nil {
				t.Fatal(err)
			}
			if _, err := b.Write([]byte{byte(tc.n), byte(tc.n >> 8), byte(tc.n >> 16), 1}); err != nil {
				t.Fatal(err)
			}
			cli.seq = 2
			p, err := cli.ReadPacket()
			if err != nil {
				t.Fatalf("want ERR 1153 at once, got %v", err)
			}
			if e := ParseError(p); e.Code != ERNetPacketTooLarge || e.State != "08S01" {
				t.Fatalf("got %+v", e)
			}
			wg.Wait()
			if !errors.Is(serr, ErrPacketTooLarge) {
				t.Fatalf("server: %v", serr)
			}
		})
	}
	t.Run("limit restored after login", func(t *testing.T) {
		a, b := net.Pipe()
		defer a.Close()
		defer b.Close()
		srv, cli := NewConn(a), NewConn(b)
		srv.MaxPacket = 12345
		done := make(chan error, 1)
		go func() {
			_, err := ServerHandshake(srv, cfg)
			if err == nil {
				err = srv.WriteOK(0)
			}
			done <- err
		}()
		if _, err := ClientHandshake(cli, &ClientConfig{User: "u", Password: "pw"}); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil || srv.MaxPacket != 12345 {
			t.Fatalf("server %v, MaxPacket %d", err, srv.MaxPacket)
		}
	})
}
