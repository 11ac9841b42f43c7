package memcache

import (
	"strings"
	"testing"

	"github.com/keywaydb/keyway/internal/testenv"
)

// detailStep is one exchange of TestStatsDetailMatchesMemcached; with
// compare false only what it does is compared, later, not its replies
// (binary storage replies carry CAS ids the two servers assign apart).
type detailStep struct {
	name    string
	send    string
	compare bool
}

func binStat(key string) string { return string(req(opStat, key, "").bytes()) }

// binNoopReq is a whole binary no-op request (binNoop is its first half,
// what exchange counts).
var binNoopReq = string(req(opNoop, "", "").bytes())

// detailSteps turn `stats detail` on, count gets, sets and deletes of
// prefixed keys through every command memcached counts them in (and some it
// does not), and dump, in text and binary, then off, on and reset. Several
// prefixes, one empty, check the dump's order too.
var detailSteps = []detailStep{
	{name: "dump before", send: "stats detail dump\r\nmn\r\n", compare: true},
	{name: "usage", send: "stats detail\r\nstats detail x\r\nstats detail on x\r\nstats detail dump\r\nmn\r\n", compare: true},
	{name: "off counts nothing", send: "set a:1 0 0 1\r\nx\r\nget a:1\r\ndelete zz:1\r\nmn\r\n", compare: true},
	{name: "on", send: "stats detail on\r\nmn\r\n", compare: true},
	{name: "text", send: "get a:1 b:2\r\ngets a:1\r\ngat 0 a:1 c:3\r\ngats 0 c:3\r\nset b:2 0 0 1\r\ny\r\n" +
		"append c:3 0 0 1\r\nz\r\nprepend b:2 0 0 1\r\nz\r\ncas b:2 0 0 1 1\r\nz\r\nadd d: 0 0 1\r\nq\r\nreplace e:1 0 0 1\r\nq\r\n" +
		"delete a:1\r\ndelete e:5\r\ndelete nokey\r\nget nokey\r\nset :x 0 0 1\r\nx\r\nget :x\r\nset k:1:2 0 0 1 noreply\r\nx\r\n" +
		"set k:1 0 0 1\r\nbad\r\nset k:big 0 0 x\r\nincr b:2 1\r\ndecr b:2 1\r\ntouch b:2 0\r\n" +
		"mg a:1 v\r\nms f:1 1\r\nx\r\nmd f:1\r\nma g:1\r\nme g:1\r\nmn\r\n", compare: true},
	{name: "binary", send: string(req(opGet, "h:1", "").bytes()) + string(req(opSet, "h:1", "v", setExtras(0, 0)...).bytes()) +
		string(req(opGetK, "h:1", "").bytes()) + string(req(opGetQ, "j:1", "").bytes()) + string(req(opGetKQ, "h:1", "").bytes()) +
		string(req(opGAT, "h:1", "", be32(0)...).bytes()) + string(req(opTouch, "h:1", "", be32(0)...).bytes()) +
		string(req(opAdd, "i:1", "v", setExtras(0, 0)...).bytes()) + string(req(opReplaceQ, "i:2", "v", setExtras(0, 0)...).bytes()) +
		string(req(opAppend, "i:1", "w").bytes()) + string(req(opIncrement, "i:3", "", arithExtras(1, 0, 0)...).bytes()) +
		string(req(opDelete, "h:1", "").bytes()) + string(req(opDeleteQ, "i:9", "").bytes()) + binNoopReq},
	// Values over the item size limit (1 MiB in both) are counted as sets.
	{name: "too large", send: "set big:1 0 0 2000000\r\n" + strings.Repeat("x", 2000000) + "\r\nmn\r\n", compare: true},
	{name: "binary too large", send: string(req(opSet, "big:2", strings.Repeat("x", 2000000), setExtras(0, 0)...).bytes()) +
		string(req(opAppendQ, "big:3", strings.Repeat("x", 2000000)).bytes()) + binNoopReq},
	{name: "dump text", send: "stats detail dump\r\nmn\r\n", compare: true},
	{name: "dump binary", send: binStat("detail dump") + binNoopReq, compare: true},
	{name: "binary usage", send: binStat("detail") + binStat("detailx") + binStat("details on") + binStat("detail  on") + binNoopReq, compare: true},
	{name: "binary off", send: binStat("detail off") + binNoopReq, compare: true},
	{name: "off", send: "get a:2\r\nstats detail dump\r\nmn\r\n", compare: true},
	{name: "binary on by prefix", send: binStat("detail onward") + binNoopReq, compare: true},
	{name: "on again", send: "get a:2\r\nstats detail dump\r\nstats reset\r\nstats detail dump\r\nget a:2\r\nstats detail dump\r\nmn\r\n", compare: true},
	{name: "text off", send: "stats detail off\r\nget a:3\r\nstats detail dump\r\nmn\r\n", compare: true},
}

// TestStatsDetailMatchesMemcached runs detailSteps on a fresh memcached 1.6
// and a fresh keyway (the setting is server-wide) and compares the replies
// byte for byte.
func TestStatsDetailMatchesMemcached(t *testing.T) {
	mc := testenv.NewMemcached(t)
	kw := newTestServer(t)
	for _, st := range detailSteps {
		want := exchange(t, mc.Addr, st.send)
		got := exchange(t, kw, st.send)
		if st.compare && got != want {
			t.Errorf("%s: sent %.300q\nkeyway    %q\nmemcached %q", st.name, st.send, got, want)
		}
	}
}

// The dump's order is memcached's hash table's: murmur3 of the prefix.
func TestMurmur3(t *testing.T) {
	// MurmurHash3_x86_32, seed 0, from the reference implementation.
	for in, want := range map[string]uint32{"": 0, "a": 0x3c2569b2, "abcd": 0x43ed676a, "hello": 0x248bfa47, "hello, world": 0x149bbb7f} {
		if got := murmur3([]byte(in)); got != want {
			t.Errorf("murmur3(%q) = %#x, want %#x", in, got, want)
		}
	}
}
