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
// with "mn" unless the connection is expected to close.
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
	// Numbers are read as C's strtol/strtoull: a sign is allowed, 64-bit
	// range, and a 32-bit field (flags, exptime, length) keeps the low 32
	// bits: 2^31 is -2^31 (expired), -2^31-1 is 2^31-1, 2^32 is 0.
	{name: "exptime 2^31", send: "set ex1 0 2147483648 1\r\na\r\nget ex1\r\nmn\r\n"},
	{name: "exptime -2^31-1", send: "set ex2 0 -2147483649 1\r\na\r\nget ex2\r\nmn\r\n"},
	{name: "exptime 2^32", send: "set ex3 0 4294967296 1\r\na\r\nget ex3\r\nmn\r\n"},
	{name: "exptime out of 64 bits", send: "set ex4 0 9223372036854775808 1\r\na\r\nset ex4 0 -9223372036854775809 1\r\na\r\nmn\r\n"},
	{name: "exptime signed", send: "set ex5 0 +100 1\r\na\r\nget ex5\r\nmn\r\n"},
	{name: "touch 2^31", setup: "set ex6 0 0 1\r\na\r\n", send: "touch ex6 2147483648\r\nget ex6\r\nmn\r\n"},
	{name: "touch -2^31-1", setup: "set ex7 0 0 1\r\na\r\n", send: "touch ex7 -2147483649\r\nget ex7\r\nmn\r\n"},
	{name: "gat 2^31", setup: "set ex8 0 0 1\r\na\r\n", send: "gat 2147483648 ex8\r\nget ex8\r\nmn\r\n"},
	{name: "gat 2^32", setup: "set ex9 0 0 1\r\na\r\n", send: "gat 4294967296 ex9\r\nget ex9\r\nmn\r\n"},
	{name: "flags 2^32+1", send: "set fl1 4294967297 0 1\r\na\r\nget fl1\r\nmn\r\n"},
	{name: "flags signed", send: "set fl2 +5 0 1\r\na\r\nset fl2 -1 0 1\r\nget fl2\r\nset fl2 -0 0 1\r\nb\r\nget fl2\r\nmn\r\n"},
	{name: "length 2^32+1", send: "set ln1 0 0 4294967297\r\na\r\nget ln1\r\nmn\r\n"},
	{name: "length signed", send: "set ln2 0 0 +1\r\na\r\nget ln2\r\nmn\r\n"},
	{name: "incr delta signed", setup: "set in1 0 0 1\r\n1\r\n", send: "incr in1 +5\r\nincr in1 -0\r\ndecr in1 +1\r\nincr in1 -5\r\nincr in1 5x\r\nmn\r\n"},
	{name: "incr stored values", setup: "set iv1 0 0 3\r\n 12\r\nset iv2 0 0 2\r\n+5\r\nset iv3 0 0 3\r\n12a\r\nset iv4 0 0 2\r\n-5\r\n",
		send: "incr iv1 1\r\nget iv1\r\nincr iv2 1\r\nget iv2\r\nincr iv3 1\r\nincr iv4 1\r\nmn\r\n"},
	{name: "incr delta range", setup: "set in2 0 0 1\r\n1\r\n", send: "incr in2 18446744073709551616\r\nincr in2 -18446744073709551615\r\nmn\r\n"},
	{name: "meta numbers", send: "ms mn1 +1 F4294967297 T4294967296\r\nx\r\nmg mn1 f t v\r\nms mn2 4294967297 T2147483648\r\nx\r\nmg mn2 v\r\nmn\r\n"},
	// A length whose data block and "\r\n" overflow an int32 is a bad line,
	// not a value too large (whose data would be swallowed).
	{name: "length 2^31-1", send: "set ln3 0 0 2147483647\r\ncas ln3 0 0 2147483646 1\r\nappend ln3 0 0 2147483647\r\nmn\r\n"},
	// flush_all: any int32 delay (by strtol, low 32 bits), 0 or less is now;
	// a third token that is not noreply is ignored; noreply silences errors.
	// Each case stores a key, flushes, and looks.
	{name: "flush_all invalid", setup: "set fa 0 0 1\r\na\r\n", send: "flush_all invalid\r\nflush_all 0x10\r\nflush_all 99999999999999999999\r\nget fa\r\nmn\r\n"},
	{name: "flush_all -1", setup: "set fa 0 0 1\r\na\r\n", send: "flush_all -1\r\nget fa\r\nmn\r\n"},
	{name: "flush_all 2^31", setup: "set fa 0 0 1\r\na\r\n", send: "flush_all 2147483648\r\nget fa\r\nmn\r\n"},
	{name: "flush_all 2^32", setup: "set fa 0 0 1\r\na\r\n", send: "flush_all 4294967296\r\nget fa\r\nmn\r\n"},
	{name: "flush_all 0 0", setup: "set fa 0 0 1\r\na\r\n", send: "flush_all 0 0\r\nget fa\r\nmn\r\n"},
	{name: "flush_all 0 x", setup: "set fa 0 0 1\r\na\r\n", send: "flush_all 0 x\r\nget fa\r\nmn\r\n"},
	{name: "flush_all too many", setup: "set fa 0 0 1\r\na\r\n", send: "flush_all 0 0 0\r\nflush_all 0 0 noreply\r\nget fa\r\nmn\r\n"},
	{name: "flush_all noreply", setup: "set fa 0 0 1\r\na\r\n", send: "flush_all noreply\r\nget fa\r\nmn\r\n"},
	{name: "flush_all 0 noreply", setup: "set fa 0 0 1\r\na\r\n", send: "flush_all 0 noreply\r\nget fa\r\nmn\r\n"},
	{name: "flush_all noreply 0", setup: "set fa 0 0 1\r\na\r\n", send: "flush_all noreply 0\r\nget fa\r\nmn\r\n"},
	{name: "flush_all bad noreply", setup: "set fa 0 0 1\r\na\r\n", send: "flush_all invalid noreply\r\nflush_all noreply noreply\r\nget fa\r\nmn\r\n"},
	// A NUL ends the command line (memcached reads it as a C string).
	{name: "nul in set key", send: "set nk\x00b 0 0 1\r\nx\r\nget nk\r\nmn\r\n"},
	{name: "nul in get key", setup: "set nk2 0 0 1\r\nx\r\n", send: "get nk2\x00b\r\ndelete nk2\x00b\r\nincr nk2\x00b 1\r\nmn\r\n"},
	{name: "nul after length", send: "set nk3 0 0 1\x00junk\r\nx\r\nget nk3\r\nmn\r\n"},
	// Binary verbosity is an unknown command to memcached 1.6. (With a body,
	// the usual extras, memcached then swallows too much and loses step with
	// the client; keyway swallows exactly the body, so only the bodiless form
	// is compared.)
	{name: "binary verbosity", send: string(req(opVerbosity, "", "").bytes()) + string(req(opNoop, "", "").bytes())},
	// noreply silences a malformed storage, incr/decr or touch line too. A
	// refused storage line's data block is not swallowed: it is read as a
	// command (here "ab" and "a" are answered ERROR, "mn" MN).
	{name: "storage bad format noreply", send: "set nr1 0 0 -1 noreply\r\nab\r\nset nr1 x 0 1 noreply\r\nmn\r\nadd nr1 0 0 x noreply\r\n" +
		"replace nr1 0 0 2147483647 noreply\r\nappend nr1 0 x 1 noreply\r\nprepend nr1 0 0 noreply\r\ncas nr1 0 0 1 x noreply\r\nmn\r\n" +
		"set " + strings.Repeat("k", 251) + " 0 0 1 noreply\r\na\r\nget nr1\r\nmn\r\n"},
	{name: "arith bad format noreply", send: "incr nr2 x noreply\r\ndecr nr2 x noreply\r\nincr nr2 noreply\r\nincr " + strings.Repeat("k", 251) + " 1 noreply\r\nmn\r\n"},
	{name: "touch bad format noreply", send: "touch nr3 x noreply\r\ntouch nr3 noreply\r\ntouch " + strings.Repeat("k", 251) + " 1 noreply\r\nmn\r\n"},
	// A last token that is not noreply is ignored (one token too many is
	// still an unknown command).
	{name: "storage extra token", send: "set xt1 0 0 1 x\r\na\r\nget xt1\r\nadd xt1 0 0 1 x\r\nb\r\ncas xt2 0 0 1 1 x\r\nb\r\nset xt1 0 0 1 noreply x\r\na\r\nmn\r\n"},
	{name: "arith touch extra token", setup: "set xt3 0 0 1\r\n1\r\n", send: "incr xt3 1 x\r\ndecr xt3 1 x\r\ntouch xt3 0 x\r\nincr xt3 1 x noreply\r\nmn\r\n"},
	// verbosity takes an unsigned level (as safe_strtoul); noreply silences the error.
	{name: "verbosity bad level", send: "verbosity x\r\nverbosity -1\r\nverbosity 1x\r\nverbosity noreply\r\nverbosity x noreply\r\nverbosity 1 x\r\nverbosity 0\r\nmn\r\n"},
	// gat/gats with an exptime and no key is an empty retrieval.
	{name: "gat no keys", send: "gat 0\r\ngats 0\r\ngat 0 \r\ngat \r\nmn\r\n"},
	{name: "leading spaces", setup: "set ls 0 0 1\r\nx\r\n", send: "   get ls\r\n  get  ls\r\nmn\r\n"},
	// mg takes a C<cas> token and ignores it (only ms, md and ma compare);
	// one that is not a number is a bad token.
	{name: "mg C", setup: "set mc1 0 0 1\r\nx\r\n", send: "mg mc1 C1 v\r\nmg mc1 C99999 s v\r\nmg mc1 C0 k\r\nmg mc2 C5 v\r\nmn\r\n"},
	{name: "mg C bad", setup: "set mc3 0 0 1\r\nx\r\n", send: "mg mc3 Cx v\r\nmg mc3 C\r\nmg mc3 C-1 v\r\nmg mc3 C1 q\r\nmg mc4 C1 q\r\nmn\r\n"},
	// lru_crawler and cache_memlimit: their checks and replies.
	// (memcached refuses a metadump with replies queued before it, a
	// limit keyway does not copy: each metadump here comes first.)
	{name: "lru_crawler usage", send: "lru_crawler\r\nlru_crawler foo\r\nlru_crawler metadump\r\nlru_crawler metadump all noreply\r\n" +
		"lru_crawler enable\r\nlru_crawler enable x\r\nmn\r\n"},
	{name: "lru_crawler metadump x", send: "lru_crawler metadump x\r\nmn\r\n"},
	{name: "lru_crawler metadump 0", send: "lru_crawler metadump 0\r\nmn\r\n"},
	{name: "lru_crawler metadump 64", send: "lru_crawler metadump 64\r\nmn\r\n"},
	{name: "lru_crawler metadump 1,x", send: "lru_crawler metadump 1,x\r\nmn\r\n"},
	// (A crawl while one runs is BUSY in memcached; keyway's crawler is
	// never started on demand, so only one crawl is asked for.)
	{name: "lru_crawler crawl", send: "lru_crawler crawl 0\r\nlru_crawler crawl 1,x\r\nlru_crawler crawl all\r\n" +
		"lru_crawler tocrawl x\r\nlru_crawler tocrawl 0\r\nlru_crawler sleep 2000000\r\nlru_crawler sleep -1\r\nlru_crawler sleep 100\r\nmn\r\n"},
	{name: "cache_memlimit", send: "cache_memlimit\r\ncache_memlimit x\r\ncache_memlimit -1\r\ncache_memlimit 0\r\ncache_memlimit 7\r\n" +
		"cache_memlimit 1000000001\r\ncache_memlimit x noreply\r\ncache_memlimit 1 noreply\r\ncache_memlimit 100 noreply\r\n" +
		"cache_memlimit 64 x\r\ncache_memlimit 4294967360\r\ncache_memlimit 64 0 0\r\nmn\r\n"},
	{name: "stats cachedump usage", send: "stats cachedump\r\nstats cachedump 1\r\nstats cachedump x 0\r\nstats cachedump 1 x\r\n" +
		"stats cachedump 64 0\r\nstats cachedump 63 0\r\nstats cachedump -1 0\r\nmn\r\n"},
	// Binary stat groups are matched as memcached matches them: reset by
	// prefix, the engine's groups exactly, conns not at all.
	{name: "binary stat groups", send: string(req(opStat, "conns", "").bytes()) + string(req(opStat, "slabsx", "").bytes()) +
		string(req(opStat, "sizes", "").bytes()) + string(req(opStat, "resetx", "").bytes()) + string(req(opStat, "bogus", "").bytes()) + string(req(opStat, "extstore", "").bytes()) +
		string(req(opStat, "cachedump 1 0", "").bytes()) +
		string(req(opNoop, "", "").bytes())},
	{name: "stats sizes", send: "stats sizes\r\nstats extstore\r\nstats detail\r\nstats detail x\r\nstats detailx\r\nmn\r\n"},
}

// peerEnd is how long a case may take at most; replies normally end at the
// "mn" sentinel or the close, long before.
const peerEnd = 10 * time.Second

// The no-ops that end a case, text and binary (the binary header up to the
// body length, all zero), and their replies.
const (
	textNoop      = "mn\r\n"
	textNoopReply = "MN\r\n"
	binNoop       = "\x80\x0a\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"
	binNoopReply  = "\x81\x0a\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"
)

// exchange sends in on a fresh connection to addr and returns every reply
// byte until each no-op in it is answered, or the server's close, which it
// marks. Without a no-op it reads until the close.
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
	noops := strings.Count(in, textNoop) + strings.Count(in, binNoop)
	answered := func() int {
		return strings.Count(got.String(), textNoopReply) + strings.Count(got.String(), binNoopReply)
	}
	for noops == 0 || answered() < noops {
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
