package mysqlwire

import (
	"crypto/rand"
	"crypto/rsa"
	"errors"
	"net"
	"sync"
	"testing"
	"time"
)

// TestHandshakes runs keyway's client side against keyway's server side over a pipe, for both plugins, the
// auth switch and caching_sha2_password full authentication with the RSA key exchange.
func TestHandshakes(t *testing.T) {
	key, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	accounts := map[string]Account{
		"native": {User: "native", Password: "pw1", Plugin: NativePassword},
		"sha":    {User: "sha", Password: "pw2", Plugin: CachingSha2Password},
		"empty":  {User: "empty", Password: "", Plugin: CachingSha2Password},
	}
	cases := []struct {
		name, user, pass, announce string
		full, wantOK               bool
	}{
		{"native", "native", "pw1", NativePassword, false, true},
		{"native after switch", "native", "pw1", CachingSha2Password, false, true},
		{"sha fast", "sha", "pw2", CachingSha2Password, false, true},
		{"sha after switch", "sha", "pw2", NativePassword, false, true},
		{"sha full auth RSA", "sha", "pw2", CachingSha2Password, true, true},
		{"sha full auth wrong", "sha", "nope", CachingSha2Password, true, false},
		{"empty password", "empty", "", CachingSha2Password, false, true},
		{"native wrong", "native", "pw2", NativePassword, false, false},
		{"unknown user", "who", "pw1", NativePassword, false, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a, b := net.Pipe()
			defer a.Close()
			defer b.Close()
			_ = a.SetDeadline(time.Now().Add(5 * time.Second))
			_ = b.SetDeadline(time.Now().Add(5 * time.Second))
			srv, cli := NewConn(a), NewConn(b)
			var wg sync.WaitGroup
			var hs *Handshake
			var serr error
			wg.Add(1)
			go func() {
				defer wg.Done()
				hs, serr = ServerHandshake(srv, &ServerConfig{
					Version: "8.0.0-test", Capabilities: BaseCaps | ClientConnectWithDB | ProtocolCaps,
					DefaultPlugin: c.announce, CachingSha2FullAuth: c.full, RemoteHost: "h",
					Lookup: func(u string) (Account, bool) { a, ok := accounts[u]; return a, ok },
					RSAKey: func() (*rsa.PrivateKey, error) { return key, nil },
				})
				if serr == nil {
					serr = srv.WriteOK(StatusAutocommit)
				}
			}()
			_, cerr := ClientHandshake(cli, &ClientConfig{User: c.user, Password: c.pass, DB: "d", Capabilities: ClientDeprecateEOF})
			wg.Wait()
			if c.wantOK {
				if serr != nil || cerr != nil {
					t.Fatalf("server %v, client %v", serr, cerr)
				}
				if hs.User != c.user || hs.DB != "d" || hs.Capabilities&ClientDeprecateEOF == 0 {
					t.Fatalf("handshake %+v", hs)
				}
				return
			}
			var me *Error
			if !errors.Is(serr, ErrAuth) || !errors.As(cerr, &me) || me.Code != ERAccessDenied || me.State != "28000" {
				t.Fatalf("want access denied: server %v, client %v", serr, cerr)
			}
		})
	}
}
