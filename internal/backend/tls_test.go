package backend

import (
	"context"
	"crypto/tls"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keywaydb/keyway/internal/mysqlwire"
	"github.com/keywaydb/keyway/internal/testenv"
)

// sslCipher is the server's view of a backend connection: its Ssl_cipher status ("" = plaintext).
func sslCipher(t *testing.T, c *Conn) string {
	t.Helper()
	return query(t, c, "SELECT VARIABLE_VALUE FROM information_schema.SESSION_STATUS WHERE VARIABLE_NAME = 'SSL_CIPHER'")
}

// sqlCipher is Ssl_cipher as a database/sql pool built on g.SQLConfig sees it, or the pool's error.
func sqlCipher(t *testing.T, g *Group) (string, error) {
	t.Helper()
	db := sql.OpenDB(mustConnector(t, g.SQLConfig()))
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	db.SetMaxOpenConns(1)
	var name, cipher string
	if err := db.QueryRowContext(ctx, "SHOW STATUS LIKE 'Ssl_cipher'").Scan(&name, &cipher); err != nil {
		return "", err
	}
	// More statements on the one connection: each request after a response checks the connection first
	// (sockio.WrapPooled), beneath TLS, and must find nothing left unread there; a check that did would fail the
	// request and database/sql would go on on a new connection.
	var first int64
	for i := range 3 {
		var id int64
		if err := db.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&id); err != nil {
			return "", err
		}
		if i == 0 {
			first = id
		} else if id != first {
			return "", fmt.Errorf("statement %d ran on connection %d, not %d: the pool dropped a live connection", i, id, first)
		}
	}
	return cipher, nil
}

// tlsServer is one MariaDB offering TLS with a certificate from its own CA, for the tests of this file.
var tlsServer struct {
	once sync.Once
	m    *testenv.MariaDB
	ca   string // the CA that signed the server's certificate
	bad  string // another CA
	err  error
}

func tlsMariaDB(t *testing.T) (m *testenv.MariaDB, ca, otherCA string) {
	t.Helper()
	testenv.Need(t, "mariadbd")
	testenv.Need(t, "mariadb-install-db")
	tlsServer.once.Do(func() {
		dir, other := t.TempDir(), t.TempDir()
		// t.TempDir is removed when the first test ends; the files must outlive it, so keep them in the server's
		// own lifetime: mariadbd reads them at start, the clients read the CA files as each test starts.
		ca, cert, key := testenv.CertAuthority(t, dir)
		bad, _, _ := testenv.CertAuthority(t, other)
		tlsServer.ca, tlsServer.bad = readAll(t, ca), readAll(t, bad)
		tlsServer.m, tlsServer.err = testenv.StartMariaDBWith(context.Background(),
			testenv.MariaDBOptions{SSLCert: cert, SSLKey: key, SSLCA: ca})
	})
	if tlsServer.err != nil {
		t.Fatal(tlsServer.err)
	}
	return tlsServer.m, writeTemp(t, "ca.pem", tlsServer.ca), writeTemp(t, "other-ca.pem", tlsServer.bad)
}

func stopTLSMariaDB() {
	if tlsServer.m != nil {
		_ = tlsServer.m.Stop()
	}
}

func readAll(t *testing.T, name string) string {
	b, err := readFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestTLSEncryptsEveryRoad: against a server with TLS, each mode that uses TLS encrypts the SQL door's pooled
// connections and the database/sql pool of SQLConfig (Ssl_cipher is set on the server's side), the credential-less
// health check passes, and "off" stays plaintext. The pool key's caps do not change with TLS.
func TestTLSEncryptsEveryRoad(t *testing.T) {
	m, ca, _ := tlsMariaDB(t)
	for _, tc := range []struct {
		mode, ca, primary, network string
		encrypted                  bool
	}{
		{TLSOff, "", m.Addr, "tcp", false},
		{TLSPreferred, "", m.Addr, "tcp", true},
		{TLSRequired, "", m.Addr, "tcp", true},
		{TLSVerify, ca, m.Addr, "tcp", true},    // VERIFY_IDENTITY: 127.0.0.1 is in the certificate
		{TLSVerify, ca, m.Socket, "unix", true}, // VERIFY_CA: a socket has no host
	} {
		t.Run(tc.mode+"/"+tc.network, func(t *testing.T) {
			g := newGroup(t, tc.primary, func(o *GroupOptions) {
				o.Primary.Network, o.TLS, o.TLSCA = tc.network, tc.mode, tc.ca
			})
			const caps = mysqlwire.ClientDeprecateEOF | mysqlwire.ClientMultiResults | mysqlwire.ClientSessionTrack // pools always track
			p := g.Pool(PoolKey{User: "app", Caps: caps &^ mysqlwire.ClientSessionTrack}, "secret")
			c, err := p.Get(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			cipher := sslCipher(t, c)
			if (cipher != "") != tc.encrypted || c.TLS != tc.encrypted {
				t.Fatalf("pooled connection: Ssl_cipher %q, Conn.TLS %v; want encrypted=%v", cipher, c.TLS, tc.encrypted)
			}
			if p.Key().Caps != caps || c.Capabilities&mysqlwire.ProtocolCaps != caps {
				t.Fatalf("pool caps 0x%x, negotiated 0x%x: TLS must not change the protocol caps 0x%x",
					p.Key().Caps, c.Capabilities&mysqlwire.ProtocolCaps, caps)
			}
			c.Release()
			cipher, err = sqlCipher(t, g)
			if err != nil || (cipher != "") != tc.encrypted {
				t.Fatalf("database/sql pool: Ssl_cipher %q, err %v; want encrypted=%v", cipher, err, tc.encrypted)
			}
			// The monitor without credentials runs the TLS handshake too.
			hg := newGroup(t, tc.primary, func(o *GroupOptions) {
				o.Primary.Network, o.TLS, o.TLSCA, o.User = tc.network, tc.mode, tc.ca, ""
			})
			waitHealth(t, hg, true)
		})
	}
}

// TestTLSVerifyRejects: "verify" fails with a *TLSError naming the group, the key and tls_ca when the server's
// certificate comes from another CA or does not carry the expected name — on every road: the pool, the
// database/sql pool and the health check.
func TestTLSVerifyRejects(t *testing.T) {
	m, ca, other := tlsMariaDB(t)
	for name, mutate := range map[string]func(*GroupOptions){
		"wrong CA":   func(o *GroupOptions) { o.TLSCA = other },
		"wrong name": func(o *GroupOptions) { o.TLSCA, o.TLSServerName = ca, "db.example.com" },
		"no CA":      func(o *GroupOptions) { o.TLSCA = "" }, // the system roots do not know the test CA
	} {
		t.Run(name, func(t *testing.T) {
			opts := func(o *GroupOptions) { o.TLS = TLSVerify; mutate(o) }
			g := newGroup(t, m.Addr, opts)
			_, err := g.Pool(PoolKey{User: "app"}, "secret").Get(context.Background())
			checkVerifyError(t, "pool", err)
			_, err = sqlCipher(t, newGroup(t, m.Addr, opts))
			checkVerifyError(t, "database/sql", err)
			hg := newGroup(t, m.Addr, func(o *GroupOptions) { opts(o); o.User = "" })
			checkVerifyError(t, "health", waitHealth(t, hg, false))
		})
	}
}

func checkVerifyError(t *testing.T, road string, err error) {
	t.Helper()
	var te *TLSError
	var ve *tls.CertificateVerificationError
	if !errors.As(err, &te) || !errors.As(err, &ve) || te.Group != "main" ||
		!strings.Contains(err.Error(), `[[groups]] name = "main" tls = "verify"`) || !strings.Contains(err.Error(), "tls_ca") {
		t.Fatalf("%s: want a certificate verification *TLSError naming group main, tls and tls_ca; got %v", road, err)
	}
}

// TestTLSRequiredPlainServer: "required" and "verify" against a server without TLS fail on every road with a
// *TLSError naming the group and the key; nothing logs in in plaintext.
func TestTLSRequiredPlainServer(t *testing.T) {
	m := mariadb(t)
	for _, mode := range []string{TLSRequired, TLSVerify} {
		t.Run(mode, func(t *testing.T) {
			opts := func(o *GroupOptions) { o.TLS = mode }
			g := newGroup(t, m.Addr, opts)
			_, err := g.Pool(PoolKey{User: "app"}, "secret").Get(context.Background())
			checkNoTLSError(t, "pool", mode, err)
			_, err = sqlCipher(t, newGroup(t, m.Addr, opts))
			checkNoTLSError(t, "database/sql", mode, err)
			hg := newGroup(t, m.Addr, func(o *GroupOptions) { opts(o); o.User = "" })
			checkNoTLSError(t, "health", mode, waitHealth(t, hg, false))
		})
	}
}

func checkNoTLSError(t *testing.T, road, mode string, err error) {
	t.Helper()
	var te *TLSError
	var ue *UnavailableError
	if !errors.As(err, &te) || !errors.Is(err, mysqlwire.ErrNoTLS) || te.Group != "main" ||
		!strings.Contains(err.Error(), `[[groups]] name = "main" tls = "`+mode+`"`) {
		t.Fatalf("%s: want a *TLSError (server offers no TLS) naming group main and tls = %q; got %v", road, mode, err)
	}
	if road != "health" && !errors.As(err, &ue) {
		t.Fatalf("%s: want an *UnavailableError around it; got %T %v", road, err, err)
	}
}

// TestTLSPreferredPlainServer: "preferred" (the default) against a server without TLS logs in in plaintext on
// every road.
func TestTLSPreferredPlainServer(t *testing.T) {
	m := mariadb(t)
	for _, mode := range []string{"", TLSPreferred} {
		g := newGroup(t, m.Addr, func(o *GroupOptions) { o.TLS = mode })
		c, err := g.Pool(PoolKey{User: "app"}, "secret").Get(context.Background())
		if err != nil {
			t.Fatalf("tls %q: %v", mode, err)
		}
		if cipher := sslCipher(t, c); cipher != "" || c.TLS {
			t.Fatalf("tls %q: Ssl_cipher %q against a server without TLS", mode, cipher)
		}
		c.Release()
		if cipher, err := sqlCipher(t, g); err != nil || cipher != "" {
			t.Fatalf("tls %q: database/sql pool: Ssl_cipher %q, err %v", mode, cipher, err)
		}
		hg := newGroup(t, m.Addr, func(o *GroupOptions) { o.TLS, o.User = mode, "" })
		waitHealth(t, hg, true)
	}
}

// TestTLSBadOptions: an unknown mode or an unreadable tls_ca is an error from NewTopology naming the group.
func TestTLSBadOptions(t *testing.T) {
	for _, o := range []GroupOptions{
		{Name: "g1", Primary: Member{Address: "127.0.0.1:1"}, TLS: "on"},
		{Name: "g1", Primary: Member{Address: "127.0.0.1:1"}, TLS: TLSVerify, TLSCA: "/nonexistent/ca.pem"},
		{Name: "g1", Primary: Member{Address: "127.0.0.1:1"}, TLS: TLSVerify, TLSCA: writeTemp(t, "x.pem", "not pem")},
	} {
		topo, err := NewTopology([]GroupOptions{o})
		var te *TLSError
		if err == nil || !errors.As(err, &te) || !strings.Contains(err.Error(), `name = "g1"`) {
			if topo != nil {
				topo.Close()
			}
			t.Fatalf("%+v: got %v", o, err)
		}
	}
}

// waitHealth waits for the group's health to become want and returns its last error.
func waitHealth(t *testing.T, g *Group, want bool) error {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		ok, err := g.Healthy()
		if ok == want && (want || err != nil) {
			return err
		}
		if time.Now().After(deadline) {
			t.Fatalf("group health %v (%v), want %v", ok, err, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func readFile(name string) ([]byte, error) { return os.ReadFile(name) }

func writeTemp(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}
