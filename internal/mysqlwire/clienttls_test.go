package mysqlwire

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/keywaydb/keyway/internal/testenv"
)

// TestClientTLS runs keyway's client side against keyway's server side with and without TLS on the server:
//   - over TLS, caching_sha2_password full authentication sends the password inside TLS: the server has no RSA
//     key, so a key request would fail the login;
//   - TLSOptional (ssl-mode PREFERRED) logs in in plaintext when the server offers no TLS, using RSA for full
//     authentication, never the cleartext password;
//   - without TLSOptional a server without TLS is ErrNoTLS, before any password is sent.
func TestClientTLS(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := testenv.SelfSignedCert(t, dir)
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	serverTLS := &tls.Config{Certificates: []tls.Certificate{pair}}
	rsaKey, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name              string
		serverTLS         bool
		optional          bool
		wantTLS, wantOK   bool
		wantNoTLS         bool
		serverHasRSAKey   bool
		serverRequiresTLS bool
	}{
		{name: "tls full auth in clear inside TLS", serverTLS: true, wantTLS: true, wantOK: true, serverRequiresTLS: true},
		{name: "preferred over TLS", serverTLS: true, optional: true, wantTLS: true, wantOK: true},
		{name: "preferred without TLS uses RSA", optional: true, wantOK: true, serverHasRSAKey: true},
		{name: "required without TLS", wantNoTLS: true, serverHasRSAKey: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a, b := net.Pipe()
			defer a.Close()
			defer b.Close()
			_ = a.SetDeadline(time.Now().Add(5 * time.Second))
			_ = b.SetDeadline(time.Now().Add(5 * time.Second))
			srv, cli := NewConn(a), NewConn(b)
			sc := &ServerConfig{
				Version: "8.0.0-test", Capabilities: BaseCaps | ProtocolCaps,
				DefaultPlugin: CachingSha2Password, CachingSha2FullAuth: true, RemoteHost: "h",
				Lookup: func(u string) (Account, bool) {
					return Account{User: "sha", Password: "pw", Plugin: CachingSha2Password}, u == "sha"
				},
				RequireTLS: c.serverRequiresTLS,
			}
			if c.serverTLS {
				sc.TLS = serverTLS
			}
			if c.serverHasRSAKey {
				sc.RSAKey = func() (*rsa.PrivateKey, error) { return rsaKey, nil }
			}
			var wg sync.WaitGroup
			var serr error
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, serr = ServerHandshake(srv, sc); serr == nil {
					serr = srv.WriteOK(StatusAutocommit)
				}
				a.Close() // a refused client gets EOF, not a hang
			}()
			_, cerr := ClientHandshake(cli, &ClientConfig{User: "sha", Password: "pw",
				TLS: &tls.Config{InsecureSkipVerify: true}, TLSOptional: c.optional})
			b.Close()
			wg.Wait()
			switch {
			case c.wantNoTLS:
				if !errors.Is(cerr, ErrNoTLS) {
					t.Fatalf("client %v; want ErrNoTLS", cerr)
				}
			case cerr != nil || serr != nil:
				t.Fatalf("server %v, client %v", serr, cerr)
			case cli.TLS != c.wantTLS || cli.Capabilities&ClientSSL != 0 != c.wantTLS:
				t.Fatalf("client TLS %v caps 0x%x; want TLS %v", cli.TLS, cli.Capabilities, c.wantTLS)
			}
		})
	}
}
