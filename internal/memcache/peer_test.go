package memcache

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/keywaydb/keyway/internal/testenv"
)

// peerCase is one exchange sent byte for byte to memcached 1.6 and to keyway.
// setup runs first on a connection of its own (its replies are not compared,
// so a memcached quirk in a pipelined batch cannot hide the case). Each case
// names its own keys: both servers live for the whole table.
type peerCase struct {
	name  string
	setup string
	send  string
}

// peerCases are the edge cases where memcached's exact reply, or its silence,
// matters to clients: a pipelining client that gets one reply too many or too
// few reads every later reply as the answer to the wrong request. A case ends
// with "mn" unless the connection is expected to close first.
var peerCases = []peerCase{
	// A line past 2048 bytes with no end in sight closes the connection
	// without a reply, unless it is a get or gets (multi-key gets are long).
	{name: "long incr line", send: "incr " + strings.Repeat(" ", 3000)},
	{name: "long gat line", send: "gat 0 " + strings.Repeat("k ", 1500)},
	{name: "long line after spaces", send: strings.Repeat(" ", 101) + "get " + strings.Repeat("k ", 1500)},
	{name: "long line complete", send: "incr " + strings.Repeat(" ", 3000) + "lk 1\r\nmn\r\n"},

	// HTTP (a browser, a health check on the wrong port): an unknown command
	// whose last token starts with HTTP/ is hung up on without a reply.
	{name: "http get", send: "GET / HTTP/1.0\r\n\r\n"},
	{name: "http put", send: "PUT /a HTTP/1.1\r\nmn\r\n"},
	{name: "http delete", send: "DELETE HTTP/1.1\r\nmn\r\n"},
	{name: "http after a command", send: "mn\r\nfoo HTTP/\r\nmn\r\n"},
	{name: "http in a known command", send: "delete HTTP/1.1\r\nget / HTTP/1.0\r\nmn\r\n"},
	{name: "http not last", send: "foo HTTP/1.1 x\r\nmn\r\n"},
	// delete: noreply silences the usage error too; it counts only after the key.
	{name: "delete hold noreply", send: "delete dk 10 noreply\r\ndelete dk x noreply\r\ndelete dk 00 noreply\r\nmn\r\n"},
	{name: "delete noreply twice", send: "delete dk noreply noreply\r\nmn\r\n"},
	{name: "delete hold twice", send: "delete dk 0 0\r\ndelete dk 10\r\ndelete dk 0 noreply x\r\nmn\r\n"},
	{name: "delete long key noreply", send: "delete " + strings.Repeat("k", 251) + " noreply\r\ndelete " + strings.Repeat("k", 251) + " 10\r\nmn\r\n"},
	{name: "delete key noreply", setup: "set noreply 0 0 1\r\nx\r\n", send: "delete noreply\r\ndelete noreply\r\nmn\r\n"},
	// A get naming one illegal key (251 bytes) is answered with the error alone.
	// (One such get per connection: memcached drops every reply queued
	// before the error in the same read, a quirk keyway does not copy.)
	{name: "get one long key", setup: "set gk 0 0 1\r\nx\r\n", send: "get gk " + strings.Repeat("k", 251) + " gk\r\nmn\r\n"},
	{name: "gets last key long", setup: "set gk 0 0 1\r\nx\r\n", send: "gets gk " + strings.Repeat("k", 251) + "\r\nmn\r\n"},
	{name: "gat one long key", setup: "set gk 0 0 1\r\nx\r\n", send: "gat 0 gk " + strings.Repeat("k", 251) + "\r\nget gk " + strings.Repeat("k", 250) + "\r\nmn\r\n"},
	{name: "leading spaces", setup: "set ls 0 0 1\r\nx\r\n", send: "   get ls\r\n  get  ls\r\nmn\r\n"},
}

// peerEnd is how long a case may take at most; replies normally end at the
// "mn" sentinel or the close, long before.
const peerEnd = 10 * time.Second

// exchange sends in on a fresh connection to addr and returns every reply
// byte until the meta no-op's MN or the server's close, which it marks.
func exchange(t *testing.T, addr, in string) string {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(peerEnd))
	if _, err := nc.Write([]byte(in)); err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	buf := make([]byte, 64<<10)
	for !bytes.HasSuffix(got.Bytes(), []byte("MN\r\n")) {
		n, err := nc.Read(buf)
		got.Write(buf[:n])
		switch {
		case errors.Is(err, os.ErrDeadlineExceeded):
			return got.String() + "<no MN, still open>"
		case errors.Is(err, io.EOF) || isReset(err):
			return got.String() + "<closed>"
		case err != nil:
			t.Fatal(err)
		}
	}
	return got.String()
}

// isReset reports a connection reset: a server closing with unread input
// resets rather than ends the stream.
func isReset(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && strings.Contains(op.Err.Error(), "reset")
}

// TestEdgesMatchMemcached sends each peerCase to a real memcached 1.6 and to
// keyway and compares the replies byte for byte.
func TestEdgesMatchMemcached(t *testing.T) {
	mc := testenv.NewMemcached(t)
	kw := newTestServer(t)
	for _, tc := range peerCases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.setup != "" {
				exchange(t, mc.Addr, tc.setup+"mn\r\n")
				exchange(t, kw, tc.setup+"mn\r\n")
			}
			want := exchange(t, mc.Addr, tc.send)
			if got := exchange(t, kw, tc.send); got != want {
				t.Errorf("sent %.200q\nkeyway    %.300q\nmemcached %.300q", tc.send, got, want)
			}
		})
	}
}
