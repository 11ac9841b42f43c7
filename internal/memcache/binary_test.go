package memcache

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/keywaydb/keyway/internal/engine"
	"github.com/keywaydb/keyway/internal/store"
	"github.com/keywaydb/keyway/internal/testenv"
)

// newBinaryTestServer starts an in-process memcache door on a loopback port
// and returns its address; it is shut down when the test ends.
func newBinaryTestServer(t testing.TB) string {
	t.Helper()
	srv, _ := newBinaryTestDoor(t)
	return serveTest(t, srv)
}

// newBinaryTestDoor builds a server over a fresh 64 MiB store, not listening.
func newBinaryTestDoor(t testing.TB) (*Server, *engine.Engine) {
	t.Helper()
	st, err := store.Open(store.Options{MemoryLimit: 64 << 20})
	if err != nil {
		t.Fatalf("store.Open: %v", err)
	}
	t.Cleanup(func() { st.Close() })
	eng := engine.New(st, engine.Options{})
	t.Cleanup(func() { eng.FlushAll(0) }) // also stops a pending delayed flush
	return NewServer(eng, Options{}), eng
}

// binReq is a request as a client builds it; the lengths are computed from
// the parts unless overridden (to lie).
type binReq struct {
	op                     byte
	extras, key, value     []byte
	cas                    uint64
	opaque                 uint32
	keylen, extlen, bodyln int // used when set (>= 0 after lie())
	lying                  bool
}

func req(op byte, key, value string, extras ...byte) binReq {
	return binReq{op: op, key: []byte(key), value: []byte(value), extras: extras, opaque: 0xdeadbeef}
}

func (r binReq) withCAS(cas uint64) binReq { r.cas = cas; return r }

// lie sets the header's lengths independently of the parts sent.
func (r binReq) lie(keylen, extlen, bodylen int) binReq {
	r.keylen, r.extlen, r.bodyln, r.lying = keylen, extlen, bodylen, true
	return r
}

func (r binReq) bytes() []byte {
	kl, el, bl := len(r.key), len(r.extras), len(r.extras)+len(r.key)+len(r.value)
	if r.lying {
		kl, el, bl = r.keylen, r.extlen, r.bodyln
	}
	b := []byte{binaryRequestMagic, r.op, byte(kl >> 8), byte(kl), byte(el), 0, 0, 0}
	b = binary.BigEndian.AppendUint32(b, uint32(bl))
	b = binary.BigEndian.AppendUint32(b, r.opaque)
	b = binary.BigEndian.AppendUint64(b, r.cas)
	b = append(b, r.extras...)
	b = append(b, r.key...)
	return append(b, r.value...)
}

func be32(v uint32) []byte { return binary.BigEndian.AppendUint32(nil, v) }

func setExtras(flags, exptime uint32) []byte { return append(be32(flags), be32(exptime)...) }

func arithExtras(delta, initial uint64, exptime uint32) []byte {
	b := binary.BigEndian.AppendUint64(nil, delta)
	b = binary.BigEndian.AppendUint64(b, initial)
	return binary.BigEndian.AppendUint32(b, exptime)
}

type binResp struct {
	magic, op          byte
	status             uint16
	extras, key, value []byte
	opaque             uint32
	cas                uint64
}

func (r binResp) flags() uint32 { return binary.BigEndian.Uint32(r.extras) }

func parseResp(b []byte) (binResp, int, bool) {
	if len(b) < 24 {
		return binResp{}, 0, false
	}
	kl := int(binary.BigEndian.Uint16(b[2:4]))
	el := int(b[4])
	bl := int(binary.BigEndian.Uint32(b[8:12]))
	if len(b) < 24+bl || kl+el > bl {
		return binResp{}, 0, false
	}
	body := b[24 : 24+bl]
	return binResp{
		magic:  b[0],
		op:     b[1],
		status: binary.BigEndian.Uint16(b[6:8]),
		extras: body[:el],
		key:    body[el : el+kl],
		value:  body[el+kl:],
		opaque: binary.BigEndian.Uint32(b[12:16]),
		cas:    binary.BigEndian.Uint64(b[16:24]),
	}, 24 + bl, true
}

// binClient is a test client on one connection.
type binClient struct {
	t  testing.TB
	nc net.Conn
}

func dialBinary(t testing.TB, addr string) *binClient {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { nc.Close() })
	return &binClient{t: t, nc: nc}
}

func (c *binClient) send(reqs ...binReq) {
	c.t.Helper()
	var b []byte
	for _, r := range reqs {
		b = append(b, r.bytes()...)
	}
	c.write(b)
}

func (c *binClient) write(b []byte) {
	c.t.Helper()
	c.nc.SetWriteDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.nc.Write(b); err != nil {
		c.t.Fatalf("write: %v", err)
	}
}

func (c *binClient) recv() binResp {
	c.t.Helper()
	c.nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	hdr := make([]byte, 24)
	if _, err := io.ReadFull(c.nc, hdr); err != nil {
		c.t.Fatalf("read reply header: %v", err)
	}
	bl := binary.BigEndian.Uint32(hdr[8:12])
	if bl > 4<<20 {
		c.t.Fatalf("reply body length %d", bl)
	}
	full := append(hdr, make([]byte, bl)...)
	if _, err := io.ReadFull(c.nc, full[24:]); err != nil {
		c.t.Fatalf("read reply body: %v", err)
	}
	r, _, ok := parseResp(full)
	if !ok {
		c.t.Fatalf("malformed reply % x", full)
	}
	if r.magic != binaryResponseMagic {
		c.t.Fatalf("reply magic %#x", r.magic)
	}
	return r
}

// do sends one request and returns its reply.
func (c *binClient) do(r binReq) binResp {
	c.t.Helper()
	c.send(r)
	return c.recv()
}

// expectClosed checks the server closed the connection with nothing more to say.
func (c *binClient) expectClosed() {
	c.t.Helper()
	c.nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	var b [64]byte
	n, err := c.nc.Read(b[:])
	if n != 0 || !errors.Is(err, io.EOF) {
		c.t.Fatalf("want the connection closed, read %d bytes (% x), err %v", n, b[:n], err)
	}
}

// expect checks a reply's opcode, status and body.
func expect(t testing.TB, r binResp, op byte, status uint16, value string) {
	t.Helper()
	if r.op != op || r.status != status || string(r.value) != value || r.opaque != 0xdeadbeef {
		t.Fatalf("reply op %#x status %#04x value %q opaque %#x; want op %#x status %#04x value %q",
			r.op, r.status, r.value, r.opaque, op, status, value)
	}
	if status != statusOK && (r.cas != 0 || len(r.extras) != 0) {
		t.Fatalf("error reply with cas %d extras % x", r.cas, r.extras)
	}
}

func TestBinaryBasics(t *testing.T) {
	c := dialBinary(t, newBinaryTestServer(t))

	expect(t, c.do(req(opNoop, "", "")), opNoop, statusOK, "")
	r := c.do(req(opVersion, "", ""))
	expect(t, r, opVersion, statusOK, ProtocolVersion+"-keyway")

	expect(t, c.do(req(opGet, "k", "")), opGet, statusKeyNotFound, "Not found")
	r = c.do(req(opGetK, "k", ""))
	expect(t, r, opGetK, statusKeyNotFound, "")
	if string(r.key) != "k" {
		t.Fatalf("getk miss key %q", r.key)
	}

	set := c.do(req(opSet, "k", "hello", setExtras(42, 0)...))
	expect(t, set, opSet, statusOK, "")
	if set.cas == 0 || len(set.key) != 0 || len(set.extras) != 0 {
		t.Fatalf("set reply %+v", set)
	}
	r = c.do(req(opGet, "k", ""))
	expect(t, r, opGet, statusOK, "hello")
	if r.flags() != 42 || r.cas != set.cas || len(r.key) != 0 {
		t.Fatalf("get reply flags %d cas %d (want %d) key %q", r.flags(), r.cas, set.cas, r.key)
	}
	r = c.do(req(opGetK, "k", ""))
	expect(t, r, opGetK, statusOK, "hello")
	if string(r.key) != "k" || r.flags() != 42 {
		t.Fatalf("getk reply key %q flags %d", r.key, r.flags())
	}

	// Binary keys may hold any byte, as in memcached.
	expect(t, c.do(req(opSet, "a b\x01", "v", setExtras(0, 0)...)), opSet, statusOK, "")
	expect(t, c.do(req(opGet, "a b\x01", "")), opGet, statusOK, "v")

	// memcached 1.6's binary protocol does not know verbosity.
	expect(t, c.do(req(opVerbosity, "", "", be32(1)...)), opVerbosity, statusUnknownCommand, "Unknown command")
}

func TestBinaryStorage(t *testing.T) {
	c := dialBinary(t, newBinaryTestServer(t))
	ex := setExtras(0, 0)

	expect(t, c.do(req(opAdd, "a", "1", ex...)), opAdd, statusOK, "")
	expect(t, c.do(req(opAdd, "a", "2", ex...)), opAdd, statusKeyExists, "Data exists for key.")
	expect(t, c.do(req(opReplace, "nx", "1", ex...)), opReplace, statusKeyNotFound, "Not found")
	r := c.do(req(opReplace, "a", "3", ex...))
	expect(t, r, opReplace, statusOK, "")

	// A cas in the header makes any storage command a compare-and-swap.
	expect(t, c.do(req(opSet, "a", "x", ex...).withCAS(r.cas+1000)), opSet, statusKeyExists, "Data exists for key.")
	expect(t, c.do(req(opSet, "nx", "x", ex...).withCAS(5)), opSet, statusKeyNotFound, "Not found")
	r2 := c.do(req(opSet, "a", "4", ex...).withCAS(r.cas))
	expect(t, r2, opSet, statusOK, "")
	if r2.cas == r.cas {
		t.Fatalf("cas did not change on store")
	}
	// memcached turns add-with-cas into cas: it stores over a matching item.
	expect(t, c.do(req(opAdd, "a", "5", ex...).withCAS(r2.cas)), opAdd, statusOK, "")
	expect(t, c.do(req(opGet, "a", "")), opGet, statusOK, "5")

	// append and prepend keep the flags.
	expect(t, c.do(req(opSet, "s", "mid", setExtras(9, 0)...)), opSet, statusOK, "")
	expect(t, c.do(req(opAppend, "s", ">")), opAppend, statusOK, "")
	expect(t, c.do(req(opPrepend, "s", "<")), opPrepend, statusOK, "")
	r = c.do(req(opGet, "s", ""))
	expect(t, r, opGet, statusOK, "<mid>")
	if r.flags() != 9 {
		t.Fatalf("flags after append %d", r.flags())
	}
	expect(t, c.do(req(opAppend, "nx", "x")), opAppend, statusNotStored, "Not stored.")
	expect(t, c.do(req(opPrepend, "nx", "x").withCAS(3)), opPrepend, statusNotStored, "Not stored.")
	expect(t, c.do(req(opAppend, "s", "x").withCAS(r.cas+1)), opAppend, statusKeyExists, "Data exists for key.")

	// delete, with and without a cas.
	expect(t, c.do(req(opDelete, "nx", "")), opDelete, statusKeyNotFound, "Not found")
	expect(t, c.do(req(opDelete, "s", "").withCAS(r.cas+1)), opDelete, statusKeyExists, "Data exists for key.")
	r = c.do(req(opDelete, "s", "").withCAS(r.cas))
	expect(t, r, opDelete, statusOK, "")
	if r.cas != 0 {
		t.Fatalf("delete reply cas %d", r.cas)
	}
	expect(t, c.do(req(opGet, "s", "")), opGet, statusKeyNotFound, "Not found")
}

func TestBinaryArithmetic(t *testing.T) {
	c := dialBinary(t, newBinaryTestServer(t))
	counter := func(r binResp) uint64 {
		t.Helper()
		if len(r.value) != 8 {
			t.Fatalf("incr reply body % x", r.value)
		}
		return binary.BigEndian.Uint64(r.value)
	}

	// A missing key is created with the initial value, then counted.
	r := c.do(req(opIncrement, "i", "", arithExtras(5, 10, 0)...))
	expect(t, r, opIncrement, statusOK, string(r.value))
	if counter(r) != 10 || r.cas == 0 {
		t.Fatalf("incr create = %d cas %d", counter(r), r.cas)
	}
	if r = c.do(req(opIncrement, "i", "", arithExtras(5, 10, 0)...)); counter(r) != 15 {
		t.Fatalf("incr = %d", counter(r))
	}
	if r = c.do(req(opDecrement, "i", "", arithExtras(100, 0, 0)...)); counter(r) != 0 {
		t.Fatalf("decr below zero = %d", counter(r))
	}
	expect(t, c.do(req(opGet, "i", "")), opGet, statusOK, "0 ")
	// 0xffffffff as expiration: fail on a missing key.
	expect(t, c.do(req(opIncrement, "nx", "", arithExtras(1, 0, incrNoCreate)...)), opIncrement, statusKeyNotFound, "Not found")
	expect(t, c.do(req(opDecrementQ, "nx", "", arithExtras(1, 0, incrNoCreate)...)), opDecrementQ, statusKeyNotFound, "Not found")
	expect(t, c.do(req(opIncrement, "i", "", arithExtras(1, 0, 0)...).withCAS(r.cas+1)), opIncrement, statusKeyExists, "Data exists for key.")
	if r2 := c.do(req(opIncrement, "i", "", arithExtras(7, 0, 0)...).withCAS(r.cas)); counter(r2) != 7 {
		t.Fatalf("incr with cas = %d", counter(r2))
	}

	expect(t, c.do(req(opSet, "s", "abc", setExtras(0, 0)...)), opSet, statusOK, "")
	expect(t, c.do(req(opIncrement, "s", "", arithExtras(1, 0, 0)...)), opIncrement, statusNonNumeric,
		"Non-numeric server-side value for incr or decr")

	// 64-bit wrap on incr.
	expect(t, c.do(req(opSet, "w", "18446744073709551615", setExtras(0, 0)...)), opSet, statusOK, "")
	if r = c.do(req(opIncrement, "w", "", arithExtras(2, 0, 0)...)); counter(r) != 1 {
		t.Fatalf("wrap = %d", counter(r))
	}
}

func TestBinaryTouchAndGAT(t *testing.T) {
	c := dialBinary(t, newBinaryTestServer(t))
	set := c.do(req(opSet, "t", "val", setExtras(7, 0)...))
	expect(t, set, opSet, statusOK, "")

	r := c.do(req(opTouch, "t", "", be32(100)...))
	expect(t, r, opTouch, statusOK, "")
	if len(r.extras) != 4 || r.flags() != 7 || r.cas == 0 {
		t.Fatalf("touch reply extras % x cas %d", r.extras, r.cas)
	}
	expect(t, c.do(req(opTouch, "nx", "", be32(100)...)), opTouch, statusKeyNotFound, "Not found")

	r = c.do(req(opGAT, "t", "", be32(100)...))
	expect(t, r, opGAT, statusOK, "val")
	if r.flags() != 7 || len(r.key) != 0 {
		t.Fatalf("gat reply %+v", r)
	}
	r = c.do(req(opGATK, "t", "", be32(100)...))
	expect(t, r, opGATK, statusOK, "val")
	if string(r.key) != "t" {
		t.Fatalf("gatk key %q", r.key)
	}
	expect(t, c.do(req(opGAT, "nx", "", be32(1)...)), opGAT, statusKeyNotFound, "Not found")

	// An exptime in the past (absolute, tiny) expires the item.
	expect(t, c.do(req(opGAT, "t", "", be32(60*60*24*30+1)...)), opGAT, statusOK, "val")
	expect(t, c.do(req(opGet, "t", "")), opGet, statusKeyNotFound, "Not found")
}

func TestBinaryQuiet(t *testing.T) {
	c := dialBinary(t, newBinaryTestServer(t))
	ex := setExtras(0, 0)

	// Successful quiet commands say nothing; the noop shows they ran.
	c.send(
		req(opSetQ, "a", "1", ex...),
		req(opAddQ, "b", "2", ex...),
		req(opReplaceQ, "b", "3", ex...),
		req(opAppendQ, "a", "x"),
		req(opPrependQ, "a", "y"),
		req(opIncrementQ, "n", "", arithExtras(1, 5, 0)...),
		req(opDecrementQ, "n", "", arithExtras(2, 0, 0)...),
		req(opSetQ, "d", "1", ex...),
		req(opDeleteQ, "d", ""),
		req(opNoop, "", ""),
	)
	expect(t, c.recv(), opNoop, statusOK, "")

	// getq/getkq return hits only; gatq/gatkq the same.
	c.send(
		req(opGetQ, "a", ""),
		req(opGetQ, "missing", ""),
		req(opGetKQ, "b", ""),
		req(opGetKQ, "missing", ""),
		req(opGATQ, "n", "", be32(0)...),
		req(opGATKQ, "missing", "", be32(0)...),
		req(opNoop, "", ""),
	)
	expect(t, c.recv(), opGetQ, statusOK, "y1x")
	r := c.recv()
	expect(t, r, opGetKQ, statusOK, "3")
	if string(r.key) != "b" {
		t.Fatalf("getkq key %q", r.key)
	}
	expect(t, c.recv(), opGATQ, statusOK, "3")
	expect(t, c.recv(), opNoop, statusOK, "")

	// Failures of quiet commands are reported.
	c.send(
		req(opAddQ, "a", "1", ex...),
		req(opReplaceQ, "missing", "1", ex...),
		req(opDeleteQ, "missing", ""),
		req(opAppendQ, "missing", "1"),
		req(opSetQ, "a", "1", ex...).withCAS(1<<60),
		req(opNoop, "", ""),
	)
	expect(t, c.recv(), opAddQ, statusKeyExists, "Data exists for key.")
	expect(t, c.recv(), opReplaceQ, statusKeyNotFound, "Not found")
	expect(t, c.recv(), opDeleteQ, statusKeyNotFound, "Not found")
	expect(t, c.recv(), opAppendQ, statusNotStored, "Not stored.")
	expect(t, c.recv(), opSetQ, statusKeyExists, "Data exists for key.")
	expect(t, c.recv(), opNoop, statusOK, "")

	// flushq is quiet too.
	c.send(req(opFlushQ, "", ""), req(opGet, "a", ""))
	expect(t, c.recv(), opGet, statusKeyNotFound, "Not found")
}

func TestBinaryFlush(t *testing.T) {
	c := dialBinary(t, newBinaryTestServer(t))
	ex := setExtras(0, 0)
	expect(t, c.do(req(opSet, "f", "1", ex...)), opSet, statusOK, "")
	// A delay in the extras postpones the flush.
	expect(t, c.do(req(opFlush, "", "", be32(100)...)), opFlush, statusOK, "")
	expect(t, c.do(req(opGet, "f", "")), opGet, statusOK, "1")
	r := c.do(req(opFlush, "", ""))
	expect(t, r, opFlush, statusOK, "")
	if r.cas != 0 {
		t.Fatalf("flush reply cas %d", r.cas)
	}
	expect(t, c.do(req(opGet, "f", "")), opGet, statusKeyNotFound, "Not found")
	// Extras of the wrong size are a protocol error.
	expect(t, c.do(req(opFlush, "", "", 1, 2)), opFlush, statusInvalid, "Invalid arguments")
	c.expectClosed()
}

func TestBinaryStat(t *testing.T) {
	c := dialBinary(t, newBinaryTestServer(t))
	readStats := func(group string) map[string]string {
		t.Helper()
		c.send(req(opStat, group, ""))
		m := map[string]string{}
		for {
			r := c.recv()
			expect(t, r, opStat, statusOK, string(r.value))
			if r.cas != 0 || len(r.extras) != 0 {
				t.Fatalf("stat reply cas %d extras % x", r.cas, r.extras)
			}
			if len(r.key) == 0 {
				if len(r.value) != 0 {
					t.Fatalf("terminator with a body %q", r.value)
				}
				return m
			}
			m[string(r.key)] = string(r.value)
		}
	}
	expect(t, c.do(req(opSet, "k", "v", setExtras(0, 0)...)), opSet, statusOK, "")
	m := readStats("")
	if m["pid"] != strconv.Itoa(os.Getpid()) || m["version"] != ProtocolVersion+"-keyway" || m["curr_items"] != "1" || m["cmd_set"] != "1" {
		t.Fatalf("stats: %v", m)
	}
	m = readStats("settings")
	if m["item_size_max"] != strconv.Itoa(1<<20) || m["evictions"] != "on" {
		t.Fatalf("stats settings: %v", m)
	}
	if m = readStats("reset"); len(m) != 0 {
		t.Fatalf("stats reset: %v", m)
	}
	expect(t, c.do(req(opStat, "bogus", "")), opStat, statusKeyNotFound, "Not found")
	expect(t, c.do(req(opNoop, "", "")), opNoop, statusOK, "")
}

func TestBinaryQuit(t *testing.T) {
	addr := newBinaryTestServer(t)
	c := dialBinary(t, addr)
	c.send(req(opQuit, "", ""), req(opNoop, "", ""))
	expect(t, c.recv(), opQuit, statusOK, "")
	c.expectClosed()

	c = dialBinary(t, addr)
	c.send(req(opSetQ, "k", "v", setExtras(0, 0)...), req(opQuitQ, "", ""), req(opNoop, "", ""))
	c.expectClosed()
	c = dialBinary(t, addr)
	expect(t, c.do(req(opGet, "k", "")), opGet, statusOK, "v") // the setq before quitq ran
}

func TestBinaryUnknownCommand(t *testing.T) {
	c := dialBinary(t, newBinaryTestServer(t))
	// The body of an unknown command is skipped and the connection goes on.
	expect(t, c.do(req(0x50, "abc", "defg", 1, 2, 3)), 0x50, statusUnknownCommand, "Unknown command")
	// SASL is not configured: unknown, as memcached without -S.
	expect(t, c.do(req(0x20, "", "")), 0x20, statusUnknownCommand, "Unknown command")
	expect(t, c.do(req(0x21, "PLAIN", "\x00user\x00pass")), 0x21, statusUnknownCommand, "Unknown command")
	expect(t, c.do(req(opNoop, "", "")), opNoop, statusOK, "")
}

// TestBinaryMalformed covers requests whose header does not fit: each is
// answered and the connection closed, as memcached does.
func TestBinaryMalformed(t *testing.T) {
	addr := newBinaryTestServer(t)
	cases := []struct {
		name   string
		r      binReq
		status uint16
		msg    string
	}{
		{"body shorter than key", req(opGet, "abc", "").lie(3, 0, 2), statusUnknownCommand, "Unknown command"},
		{"body shorter than key+extras", req(opSet, "k", "v", setExtras(0, 0)...).lie(1, 8, 5), statusUnknownCommand, "Unknown command"},
		{"key too long", req(opGet, strings.Repeat("k", 251), ""), statusInvalid, "Invalid arguments"},
		{"get with extras", req(opGet, "k", "", 1, 2, 3, 4), statusInvalid, "Invalid arguments"},
		{"get with a value", req(opGet, "k", "v"), statusInvalid, "Invalid arguments"},
		{"get without key", req(opGet, "", ""), statusInvalid, "Invalid arguments"},
		{"set without extras", req(opSet, "k", "v"), statusInvalid, "Invalid arguments"},
		{"set without key", req(opSet, "", "v", setExtras(0, 0)...), statusInvalid, "Invalid arguments"},
		{"incr short extras", req(opIncrement, "k", "", 1, 2, 3, 4), statusInvalid, "Invalid arguments"},
		{"append with extras", req(opAppend, "k", "v", 1, 2, 3, 4), statusInvalid, "Invalid arguments"},
		{"touch without extras", req(opTouch, "k", ""), statusInvalid, "Invalid arguments"},
		{"noop with body", req(opNoop, "", "x"), statusInvalid, "Invalid arguments"},
		{"quit with key", req(opQuit, "k", ""), statusInvalid, "Invalid arguments"},
		{"version with body", req(opVersion, "", "x"), statusInvalid, "Invalid arguments"},
		{"huge get body", req(opGet, "k", "").lie(1, 0, 0x7fffffff), statusInvalid, "Invalid arguments"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := dialBinary(t, addr)
			c.send(tc.r, req(opNoop, "", ""))
			expect(t, c.recv(), tc.r.op, tc.status, tc.msg)
			c.expectClosed()
		})
	}
}

func TestBinaryTooLarge(t *testing.T) {
	c := dialBinary(t, newBinaryTestServer(t))
	ex := setExtras(0, 0)
	expect(t, c.do(req(opSet, "big", "small", ex...)), opSet, statusOK, "")

	// A value over the limit is refused and its bytes skipped; a refused set
	// drops the old value.
	big := strings.Repeat("x", 1<<20+1)
	c.send(req(opSet, "big", big, ex...), req(opAppendQ, "big", big), req(opNoop, "", ""))
	expect(t, c.recv(), opSet, statusTooLarge, "Too large.")
	expect(t, c.recv(), opAppendQ, statusTooLarge, "Too large.")
	expect(t, c.recv(), opNoop, statusOK, "")
	expect(t, c.do(req(opGet, "big", "")), opGet, statusKeyNotFound, "Not found")

	// An append that would pass the limit is not stored.
	expect(t, c.do(req(opSet, "a", strings.Repeat("x", 1<<20-10), ex...)), opSet, statusOK, "")
	expect(t, c.do(req(opAppend, "a", strings.Repeat("y", 20))), opAppend, statusNotStored, "Not stored.")

	// A body length of 4 GiB is answered at once, before any of it arrives.
	c.send(req(opSet, "huge", "", ex...).lie(4, 8, 0xffffffff))
	expect(t, c.recv(), opSet, statusTooLarge, "Too large.")
}

// TestBinaryBoundedBuffer checks that no header makes the connection wait
// for, and so buffer, more than a storage request within the item limit.
func TestBinaryBoundedBuffer(t *testing.T) {
	srv, eng := newBinaryTestDoor(t)
	limit := binaryHeaderLen + 255 + 0xffff + int(eng.MaxItemSize())
	for op := 0; op < 256; op++ {
		for _, r := range []binReq{
			req(byte(op), "k", "").lie(1, 0, 0xffffffff),
			req(byte(op), "k", "", 1, 2, 3, 4, 5, 6, 7, 8).lie(1, 8, 0xfffffff0),
			req(byte(op), "k", "", make([]byte, 20)...).lie(1, 20, 1<<30),
		} {
			c := newConn(srv, nil)
			b := r.bytes()
			n, err := c.binaryRequest(b)
			if n == needMore && (c.need > limit || c.need <= len(b)) {
				t.Fatalf("opcode %#x: waits for %d bytes", op, c.need)
			}
			if n > len(b) {
				t.Fatalf("opcode %#x: used %d of %d bytes", op, n, len(b))
			}
			if err == nil && n != needMore && len(c.out) == 0 {
				t.Fatalf("opcode %#x: no reply to a lying request", op)
			}
		}
	}
}

// TestBinarySplitFeed feeds requests one byte at a time through the
// connection's parse loop and checks the replies match a whole feed.
func TestBinarySplitFeed(t *testing.T) {
	ex := setExtras(3, 0)
	stream := [][]byte{
		req(opSet, "key", "value", ex...).bytes(),
		req(opGet, "key", "").bytes(),
		req(opGetKQ, "key", "").bytes(),
		req(opGetQ, "nx", "").bytes(),
		req(opIncrement, "n", "", arithExtras(1, 7, 0)...).bytes(),
		req(opAppend, "key", "!").bytes(),
		req(0x50, "abc", "defg").bytes(),                               // unknown: body swallowed
		req(opSet, "big", strings.Repeat("z", 1<<20+5), ex...).bytes(), // swallowed
		req(opGet, "key", "").bytes(),
		req(opNoop, "", "").bytes(),
	}
	var all []byte
	for _, b := range stream {
		all = append(all, b...)
	}
	replies := func(feed func(c *conn)) []binResp {
		srv, _ := newBinaryTestDoor(t)
		c := newConn(srv, nil)
		feed(c)
		var rs []binResp
		for b := c.out; len(b) > 0; {
			r, n, ok := parseResp(b)
			if !ok {
				t.Fatalf("malformed reply stream % x", b)
			}
			r.cas = 0 // differs between the two stores
			rs = append(rs, r)
			b = b[n:]
		}
		return rs
	}
	whole := replies(func(c *conn) { feedConn(t, c, all, len(all)) })
	split := replies(func(c *conn) { feedConn(t, c, all, 1) })
	if len(whole) != 9 {
		t.Fatalf("whole feed: %d replies, want 9", len(whole))
	}
	if len(split) != len(whole) {
		t.Fatalf("split feed: %d replies, whole feed %d", len(split), len(whole))
	}
	for i := range whole {
		w, s := whole[i], split[i]
		if w.op != s.op || w.status != s.status || !bytes.Equal(w.key, s.key) || !bytes.Equal(w.value, s.value) || !bytes.Equal(w.extras, s.extras) {
			t.Fatalf("reply %d: split %+v, whole %+v", i, s, w)
		}
	}
	if string(whole[len(whole)-2].value) != "value!" {
		t.Fatalf("final get %q", whole[len(whole)-2].value)
	}
}

// feedConn delivers in to c in chunks of at most chunk bytes, as reads
// would, running the parse loop after each.
func feedConn(t testing.TB, c *conn, in []byte, chunk int) error {
	for len(in) > 0 {
		if !c.makeRoom() {
			c.noRoom()
			return nil
		}
		n := copy(c.rbuf[c.rend:], in[:min(chunk, len(in))])
		in = in[n:]
		c.rend += n
		if err := c.process(); err != nil {
			return err
		}
		if c.closeAfterWrite {
			return nil
		}
		if c.rpos == c.rend {
			c.rpos, c.rend = 0, 0
		}
	}
	return nil
}

// TestBinarySplitFeedTCP sends a request one byte per write.
func TestBinarySplitFeedTCP(t *testing.T) {
	c := dialBinary(t, newBinaryTestServer(t))
	b := append(req(opSet, "k", "split", setExtras(0, 0)...).bytes(), req(opGet, "k", "").bytes()...)
	for i := range b {
		c.write(b[i : i+1])
		if i%7 == 0 {
			time.Sleep(time.Millisecond)
		}
	}
	expect(t, c.recv(), opSet, statusOK, "")
	expect(t, c.recv(), opGet, statusOK, "split")
}

// TestBinaryMemccapable runs libmemcached's protocol checker against the door.
func TestBinaryMemccapable(t *testing.T) {
	testenv.Need(t, "memccapable")
	path, _ := exec.LookPath("memccapable")
	host, port, _ := net.SplitHostPort(newBinaryTestServer(t))
	out, err := exec.Command(path, "-h", host, "-p", port, "-b", "-t", "5").CombinedOutput()
	if err != nil || !bytes.Contains(out, []byte("All tests passed")) {
		t.Fatalf("memccapable -b: %v\n%s", err, out)
	}
}

func FuzzBinary(f *testing.F) {
	ex := setExtras(1, 0)
	seeds := [][]binReq{
		{req(opSet, "k", "v", ex...), req(opGet, "k", ""), req(opNoop, "", "")},
		{req(opGetQ, "k", ""), req(opGetKQ, "k", ""), req(opNoop, "", "")},
		{req(opIncrement, "n", "", arithExtras(1, 1, 0)...), req(opDecrementQ, "n", "", arithExtras(3, 0, 0)...)},
		{req(opAppend, "k", "x"), req(opPrependQ, "k", "y"), req(opDelete, "k", "")},
		{req(opTouch, "k", "", be32(10)...), req(opGATK, "k", "", be32(10)...), req(opGATQ, "k", "", be32(0)...)},
		{req(opFlush, "", "", be32(0)...), req(opFlushQ, "", "")},
		{req(opStat, "detail on", ""), req(opSet, "a:b", "v", ex...), req(opStat, "detail dump", ""), req(opStat, "items", ""), req(opStat, "slabs", "")},
		{req(opStat, "", ""), req(opStat, "settings", ""), req(opStat, "x", "")},
		{req(opVersion, "", ""), req(opVerbosity, "", "", be32(0)...), req(0x21, "PLAIN", "x")},
		{req(opGet, "abc", "").lie(3, 0, 1)},
		{req(opSet, "k", "", ex...).lie(1, 8, 0xffffffff)},
		{req(opSet, "k", "v", ex...).withCAS(12), req(opQuitQ, "", "")},
		{req(0xff, "k", "body")},
	}
	for _, s := range seeds {
		var b []byte
		for _, r := range s {
			b = append(b, r.bytes()...)
		}
		f.Add(b, uint8(0))
		f.Add(b, uint8(1))
	}
	srv, _ := newBinaryTestDoor(f)
	f.Fuzz(func(t *testing.T, in []byte, chunk uint8) {
		if len(in) == 0 {
			return
		}
		in[0] = binaryRequestMagic        // a binary conversation; later bytes may be anything
		c := newConn(srv, &captureConn{}) // a large value is written out at once
		feedConn(t, c, in, int(chunk)+1)
		if bound := binaryHeaderLen + 255 + 0xffff + 1<<20; c.need > bound || len(c.rbuf) > 2*bound {
			t.Fatalf("connection buffers %d bytes (waits for %d)", len(c.rbuf), c.need)
		}
	})
}

// TestBinaryAllocs checks the read path allocates nothing per request: the
// reply is encoded into the connection's buffer.
func TestBinaryAllocs(t *testing.T) {
	srv, _ := newBinaryTestDoor(t)
	c := newConn(srv, nil)
	c.binaryRequest(req(opSet, "key", "value", setExtras(0, 0)...).bytes())
	for _, r := range []binReq{
		req(opGet, "key", ""), req(opGetK, "key", ""), req(opGet, "nx", ""), req(opGetQ, "nx", ""),
		req(opNoop, "", ""), req(opTouch, "key", "", be32(0)...),
	} {
		b := r.bytes()
		if n := testing.AllocsPerRun(100, func() {
			c.out = c.out[:0]
			c.binaryRequest(b)
		}); n != 0 {
			t.Errorf("opcode %#x: %.1f allocations per request", r.op, n)
		}
	}
}
