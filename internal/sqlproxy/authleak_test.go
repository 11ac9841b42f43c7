package sqlproxy

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/keywaydb/keyway/internal/mysqlwire"
)

// recordingConn keeps every byte the server sent.
type recordingConn struct {
	net.Conn
	got []byte
}

func (r *recordingConn) Read(p []byte) (int, error) {
	n, err := r.Conn.Read(p)
	r.got = append(r.got, p[:n]...)
	return n, err
}

// loginTranscript logs in as user with password and returns the kinds of packets keyway sent (greeting, auth switch,
// auth more data with its first byte, ERR, OK) and the final error.
func loginTranscript(t *testing.T, addr, user, password string) (string, error) {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	_ = nc.SetDeadline(time.Now().Add(10 * time.Second))
	rec := &recordingConn{Conn: nc}
	_, herr := mysqlwire.ClientHandshake(mysqlwire.NewConn(rec), &mysqlwire.ClientConfig{User: user, Password: password})
	var kinds []string
	for b := rec.got; len(b) >= 4; {
		n := int(b[0]) | int(b[1])<<8 | int(b[2])<<16
		if len(b) < 4+n || n == 0 {
			t.Fatalf("truncated transcript %q", rec.got)
		}
		p := b[4 : 4+n]
		switch p[0] {
		case 10:
			kinds = append(kinds, "greeting")
		case mysqlwire.HeaderEOF:
			name, _, _ := strings.Cut(string(p[1:]), "\x00")
			kinds = append(kinds, "switch:"+name)
		case mysqlwire.HeaderAuthMore:
			if len(p) == 2 {
				kinds = append(kinds, fmt.Sprintf("more:%d", p[1]))
			} else {
				kinds = append(kinds, "more:key")
			}
		case mysqlwire.HeaderERR:
			kinds = append(kinds, fmt.Sprintf("err:%d", mysqlwire.ParseError(p).Code))
		case mysqlwire.HeaderOK:
			kinds = append(kinds, "ok")
		default:
			kinds = append(kinds, fmt.Sprintf("0x%02x", p[0]))
		}
		b = b[4+n:]
	}
	return strings.Join(kinds, " "), herr
}

// deniedAs checks err is ERR 1045 worded as MariaDB words it for user.
func deniedAs(t *testing.T, err error, user string) {
	t.Helper()
	var me *mysqlwire.Error
	want := "Access denied for user '" + user + "'@'127.0.0.1' (using password: YES)"
	if !errors.As(err, &me) || me.Code != mysqlwire.ERAccessDenied || me.State != "28000" || me.Message != want {
		t.Fatalf("%s: want ERR 1045 (28000) %q, got %v", user, want, err)
	}
}

// TestUnknownUserLooksKnown: a login as a user keyway does not have goes through the same packets as a known user
// with a wrong password (auth switch, caching_sha2_password's full authentication, ERR 1045 worded the same), so
// logins cannot be used to find out which user names exist.
func TestUnknownUserLooksKnown(t *testing.T) {
	m := mariadb(t)
	shaOnly := testConfig(m.Addr)
	shaOnly.SQL.Users = []User{shaOnly.SQL.Users[1]} // every account uses caching_sha2_password
	_, addr := startProxy(t, shaOnly)
	_, fullAddr := startProxy(t, shaOnly, func(s *Server) { s.cachingSha2FullAuth = true })
	for _, a := range []struct{ name, addr string }{{"fast path", addr}, {"full authentication", fullAddr}} {
		t.Run(a.name, func(t *testing.T) {
			known, err := loginTranscript(t, a.addr, "sha", "wrong")
			deniedAs(t, err, "sha")
			if !strings.HasPrefix(known, "greeting switch:caching_sha2_password ") {
				t.Fatalf("known user: %s", known)
			}
			for _, name := range []string{"nobody", "root", "admin", "sha2", strings.Repeat("x", 80)} {
				got, err := loginTranscript(t, a.addr, name, "wrong")
				deniedAs(t, err, name)
				if got != known {
					t.Fatalf("unknown user %q: %s; known user with a wrong password: %s", name, got, known)
				}
			}
		})
	}

	// With accounts of both plugins, each unknown name looks like an account of one of them, the same one on
	// every attempt (as MySQL's decoy accounts do).
	_, mixedAddr := startProxy(t, testConfig(m.Addr))
	native, err := loginTranscript(t, mixedAddr, "app", "wrong")
	deniedAs(t, err, "app")
	sha, err := loginTranscript(t, mixedAddr, "sha", "wrong")
	deniedAs(t, err, "sha")
	seen := map[string]bool{}
	for i := range 40 {
		name := fmt.Sprintf("user%d", i)
		first, err := loginTranscript(t, mixedAddr, name, "wrong")
		deniedAs(t, err, name)
		if first != native && first != sha {
			t.Fatalf("unknown user %q: %s; known users: %s / %s", name, first, native, sha)
		}
		if again, _ := loginTranscript(t, mixedAddr, name, "other"); again != first {
			t.Fatalf("unknown user %q changed plugin between attempts: %s, then %s", name, first, again)
		}
		seen[first] = true
	}
	if len(seen) != 2 {
		t.Fatalf("40 unknown names all looked like one plugin's accounts (%v): a name of the other plugin would stand out", seen)
	}
}
