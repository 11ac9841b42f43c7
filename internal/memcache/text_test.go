package memcache

import (
	"bytes"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/keywaydb/keyway/internal/engine"
	"github.com/keywaydb/keyway/internal/store"
)

// captureConn is a net.Conn that keeps what the server writes; the parser is
// driven directly with feed, so splits are exact.
type captureConn struct {
	net.Conn
	out bytes.Buffer
}

func (c *captureConn) Write(p []byte) (int, error)      { return c.out.Write(p) }
func (c *captureConn) SetWriteDeadline(time.Time) error { return nil }
func (c *captureConn) Close() error                     { return nil }

// newFedConn returns a connection with no socket behind it, over a fresh store.
func newFedConn(t testing.TB) (*conn, *captureConn) {
	t.Helper()
	st, err := store.Open(store.Options{MemoryLimit: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	srv := NewServer(engine.New(st, engine.Options{MaxItemSize: 1 << 20}), Options{})
	cc := &captureConn{}
	return newConn(srv, cc), cc
}

// feed delivers p as reads, each answered as serve answers one (readyToRead, answer), until the connection closes.
func (c *conn) feed(p []byte) {
	for len(p) > 0 {
		if !c.readyToRead() {
			return
		}
		n := copy(c.rbuf[c.rend:], p)
		p = p[n:]
		if !c.answer(n) {
			return
		}
	}
}

// textTranscripts: what memcached 1.6 answers (checked against memcached
// 1.6.18 by hand), sent whole and then byte by byte.
var textTranscripts = []struct {
	name, in, out string
}{
	{"set get", "set a 5 0 3\r\nabc\r\nget a\r\n", "STORED\r\nVALUE a 5 3\r\nabc\r\nEND\r\n"},
	{"bare newlines", "set a 0 0 1\nx\r\nget a\n", "STORED\r\nVALUE a 0 1\r\nx\r\nEND\r\n"},
	{"multi get with miss", "set a 0 0 1\r\n1\r\nset b 0 0 1\r\n2\r\nget a x b\r\n",
		"STORED\r\nSTORED\r\nVALUE a 0 1\r\n1\r\nVALUE b 0 1\r\n2\r\nEND\r\n"},
	{"add replace", "add a 0 0 1\r\n1\r\nadd a 0 0 1\r\n2\r\nreplace b 0 0 1\r\n3\r\nreplace a 0 0 1\r\n4\r\nget a\r\n",
		"STORED\r\nNOT_STORED\r\nNOT_STORED\r\nSTORED\r\nVALUE a 0 1\r\n4\r\nEND\r\n"},
	{"append prepend keep flags", "set a 9 0 1\r\nb\r\nappend a 0 0 1\r\nc\r\nprepend a 0 0 1\r\na\r\nappend zz 0 0 1\r\nx\r\nget a\r\n",
		"STORED\r\nSTORED\r\nSTORED\r\nNOT_STORED\r\nVALUE a 9 3\r\nabc\r\nEND\r\n"},
	{"cas", "cas a 0 0 1 1\r\nx\r\nset a 0 0 1\r\nx\r\ncas a 0 0 1 999\r\ny\r\n", "NOT_FOUND\r\nSTORED\r\nEXISTS\r\n"},
	{"noreply", "set a 0 0 1 noreply\r\nx\r\nadd a 0 0 1 noreply\r\ny\r\ndelete a noreply\r\nget a\r\n", "END\r\n"},
	{"delete", "delete a\r\nset a 0 0 1\r\nx\r\ndelete a 0\r\ndelete a 1\r\n",
		"NOT_FOUND\r\nSTORED\r\nDELETED\r\nCLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]\r\n"},
	{"incr decr", "incr n 1\r\nset n 0 0 2\r\n10\r\nincr n 5\r\ndecr n 100\r\nget n\r\nincr n abc\r\n",
		"NOT_FOUND\r\nSTORED\r\n15\r\n0\r\nVALUE n 0 2\r\n0 \r\nEND\r\nCLIENT_ERROR invalid numeric delta argument\r\n"},
	{"incr wraps", "set n 0 0 20\r\n18446744073709551615\r\nincr n 1\r\n", "STORED\r\n0\r\n"},
	{"incr non-numeric", "set s 0 0 1\r\nx\r\nincr s 1\r\n", "STORED\r\nCLIENT_ERROR cannot increment or decrement non-numeric value\r\n"},
	{"touch gat gats", "touch a 10\r\nset a 3 0 1\r\nx\r\ntouch a 10\r\ngat 100 a\r\n",
		"NOT_FOUND\r\nSTORED\r\nTOUCHED\r\nVALUE a 3 1\r\nx\r\nEND\r\n"},
	{"negative exptime is expired", "set a 0 -1 1\r\nx\r\nget a\r\n", "STORED\r\nEND\r\n"},
	{"unknown command", "bogus\r\n\r\n", "ERROR\r\nERROR\r\n"},
	{"get without key", "get\r\n", "ERROR\r\n"},
	{"key too long", "get " + strings.Repeat("k", 251) + "\r\nset " + strings.Repeat("k", 251) + " 0 0 1\r\nx\r\n",
		"CLIENT_ERROR bad command line format\r\nCLIENT_ERROR bad command line format\r\nERROR\r\n"},
	// memcached 1.6.18 truncates flags over 32 bits; keyway refuses them.
	{"bad numbers", "set a x 0 1\r\nset a 0 0 -1\r\nset a -1 0 1\r\n",
		"CLIENT_ERROR bad command line format\r\nCLIENT_ERROR bad command line format\r\nCLIENT_ERROR bad command line format\r\n"},
	{"noreply hides errors", "set a 0 0 2000000 noreply\r\n" + strings.Repeat("v", 2000000) + "\r\nset n 0 0 1 noreply\r\nx\r\nincr n 1 noreply\r\nset b 0 0 1 noreply\r\nxy\r\nget a\r\n",
		"ERROR\r\nEND\r\n"},
	{"bad data chunk", "set a 0 0 1\r\nxyz\r\n", "CLIENT_ERROR bad data chunk\r\nERROR\r\n"},
	{"too large swallowed", "set a 0 0 2000000\r\n" + strings.Repeat("v", 2000000) + "\r\nget a\r\n",
		"SERVER_ERROR object too large for cache\r\nEND\r\n"},
	{"flush_all", "set a 0 0 1\r\nx\r\nflush_all\r\nget a\r\nflush_all noreply\r\n", "STORED\r\nOK\r\nEND\r\n"},
	{"verbosity version", "verbosity 1\r\nverbosity\r\n", "OK\r\nERROR\r\n"},
	{"stats errors", "stats noreply\r\nstats nonsense\r\n", "ERROR\r\nERROR\r\n"},
	{"quit", "quit\r\nget a\r\n", ""},
}

func TestTextTranscripts(t *testing.T) {
	for _, tc := range textTranscripts {
		t.Run(tc.name, func(t *testing.T) {
			c, cc := newFedConn(t)
			c.feed([]byte(tc.in))
			if got := cc.out.String(); got != tc.out {
				t.Fatalf("whole:\n got %q\nwant %q", got, tc.out)
			}
		})
		t.Run(tc.name+"/split", func(t *testing.T) {
			c, cc := newFedConn(t)
			for i := 0; i < len(tc.in) && !c.closeAfterWrite; i++ {
				c.feed([]byte{tc.in[i]})
			}
			if got := cc.out.String(); got != tc.out {
				t.Fatalf("byte by byte:\n got %q\nwant %q", got, tc.out)
			}
		})
	}
}

func TestLineTooLongCloses(t *testing.T) {
	c, cc := newFedConn(t)
	c.feed(bytes.Repeat([]byte("x"), maxLine+10))
	if cc.out.String() != "" || !c.closeAfterWrite {
		t.Fatalf("got %q, close %v", cc.out.String(), c.closeAfterWrite)
	}
	// A long multi-get line is fine.
	c, cc = newFedConn(t)
	line := "get" + strings.Repeat(" somekey", 2000) + "\r\n"
	c.feed([]byte(line))
	if cc.out.String() != "END\r\n" {
		t.Fatalf("long get: %q", cc.out.String())
	}
}

func TestLyingLengthCostsBoundedMemory(t *testing.T) {
	c, cc := newFedConn(t)
	c.feed([]byte("set a 0 0 1073741824\r\n"))
	for i := 0; i < 100; i++ {
		c.feed(bytes.Repeat([]byte("z"), 64<<10))
	}
	if cap(c.rbuf) > 1<<20 {
		t.Fatalf("read buffer grew to %d for a refused 1 GB value", cap(c.rbuf))
	}
	if cc.out.String() != "SERVER_ERROR object too large for cache\r\n" {
		t.Fatalf("got %q", cc.out.String())
	}
}

func TestServerOverTCP(t *testing.T) {
	addr := newTestServer(t)
	c := dialTest(t, addr)
	c.send("set k 1 0 5\r\nhello\r\nget k\r\n")
	c.expect("STORED\r\nVALUE k 1 5\r\nhello\r\nEND\r\n")
	c.send("quit\r\n")
	c.expectClosed()
}

func FuzzText(f *testing.F) {
	for _, tc := range textTranscripts {
		f.Add([]byte(tc.in), uint8(7))
	}
	f.Add([]byte("set a 0 0 5\r\nab"), uint8(1))
	f.Add([]byte("gat -1 a b c\r\ngats 0\r\n"), uint8(3))
	f.Add([]byte("stats detail on\r\nset a:b 0 0 1\r\nx\r\nget a:b\r\nstats detail dump\r\nlru_crawler metadump all\r\n"+
		"stats cachedump 1 0\r\nstats conns\r\nstats items\r\nstats slabs\r\ncache_memlimit 8\r\nstats detail off\r\n"), uint8(5))
	f.Add(append(req(opNoop, "", "").bytes(), req(opGet, "a", "").bytes()...), uint8(2)) // a binary conversation
	f.Fuzz(func(t *testing.T, in []byte, split uint8) {
		c, cc := newFedConn(t)
		step := int(split)%16 + 1
		for i := 0; i < len(in) && !c.closeAfterWrite; i += step {
			c.feed(in[i:min(i+step, len(in))])
		}
		out := cc.out.Bytes()
		if len(in) > 0 && in[0] == binaryRequestMagic {
			// The first byte made it a binary conversation, as in memcached:
			// the replies are binary packets, each whole.
			for len(out) > 0 {
				r, n, ok := parseResp(out)
				if !ok || r.magic != binaryResponseMagic {
					t.Fatalf("malformed binary reply: % x", out)
				}
				out = out[n:]
			}
		} else if len(out) > 0 && !bytes.HasSuffix(out, []byte("\r\n")) {
			t.Fatalf("reply does not end a line: %q", out)
		}
		if cap(c.rbuf) > 4<<20 {
			t.Fatalf("read buffer grew to %d", cap(c.rbuf))
		}
	})
}
