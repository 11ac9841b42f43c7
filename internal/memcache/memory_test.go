package memcache

// Tests of the door's memory bounds: replies written out while a multi-key
// request is answered, the write deadline, and the in-flight budget for
// partly received requests.

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/keywaydb/keyway/internal/engine"
	"github.com/keywaydb/keyway/internal/store"
)

// maxReplyBuffer is the most a connection's reply buffer may hold at a
// write: the flush threshold, plus one small reply (under largeValue) and the
// header of the large value written after it.
const maxReplyBuffer = flushThreshold + largeValue + 1024

// watchedConn is a socketless net.Conn that records how big the
// connection's reply buffer had grown at each write, and what was written.
type watchedConn struct {
	net.Conn
	c       *conn
	out     bytes.Buffer
	writes  int
	maxOut  int // largest cap(c.out) seen at a write
	written int
}

func (w *watchedConn) Write(p []byte) (int, error) {
	w.writes++
	w.maxOut = max(w.maxOut, cap(w.c.out))
	w.written += len(p)
	return w.out.Write(p)
}

// A vectored write (net.Buffers) comes to a non-TCP conn as one Write per
// buffer, so each is seen here.
func (w *watchedConn) SetWriteDeadline(time.Time) error { return nil }
func (w *watchedConn) Close() error                     { return nil }

// newDoor is a server over a fresh 64 MiB store with 1 MiB items.
func newDoor(t testing.TB, o Options) (*Server, *engine.Engine) {
	t.Helper()
	st, err := store.Open(store.Options{MemoryLimit: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	eng := engine.New(st, engine.Options{MaxItemSize: 1 << 20})
	return NewServer(eng, o), eng
}

func newWatchedConn(srv *Server) (*conn, *watchedConn) {
	w := &watchedConn{}
	c := newConn(srv, w)
	w.c = c
	return c, w
}

// TestMultiKeyRepliesStream: a request naming one value many times must not
// make the connection hold a copy per key. Before the fix the reply buffer
// grew to the whole reply (keys × value) before the first write.
func TestMultiKeyRepliesStream(t *testing.T) {
	const keys = 200
	for _, size := range []int{1000, 100000} { // copied into the buffer; written from the item
		value := strings.Repeat("v", size)
		getLine := "big" + strings.Repeat(" big", keys-1) + "\r\n"
		cases := []struct {
			name, in string
			binary   bool
		}{
			{"get", "get " + getLine, false},
			{"gets", "gets " + getLine, false},
			{"gat", "gat 0 " + getLine, false},
			{"gats", "gats 0 " + getLine, false},
			{"mg pipeline", strings.Repeat("mg big v k\r\n", keys) + "mn\r\n", false},
			{"getkq chain", "", true},
			{"getq chain", "", true},
		}
		for _, tc := range cases {
			t.Run(fmt.Sprintf("%s/%d", tc.name, size), func(t *testing.T) {
				srv, eng := newDoor(t, Options{})
				if st, _, err := eng.StoreValue([]byte("big"), []byte(value), engine.StoreRequest{}); st != engine.Stored {
					t.Fatal(st, err)
				}
				c, w := newWatchedConn(srv)
				in := []byte(tc.in)
				if tc.binary {
					op := byte(opGetKQ)
					if strings.HasPrefix(tc.name, "getq") {
						op = opGetQ
					}
					in = nil
					for i := 0; i < keys; i++ {
						in = append(in, req(op, "big", "").bytes()...)
					}
					in = append(in, req(opNoop, "", "").bytes()...)
				}
				// One read holds the whole request: the replies must go out
				// while it is answered, not after.
				c.feed(in)
				if w.maxOut > maxReplyBuffer || cap(c.out) > maxReplyBuffer {
					t.Fatalf("reply buffer grew to %d (at the end %d) bytes, bound %d", w.maxOut, cap(c.out), maxReplyBuffer)
				}
				if least := keys * size / (flushThreshold + largeValue); w.writes < least {
					t.Fatalf("%d writes for a %d byte reply", w.writes, w.written)
				}
				out := w.out.Bytes()
				if tc.binary {
					n := 0
					for len(out) > 0 {
						r, used, ok := parseResp(out)
						if !ok {
							t.Fatalf("reply %d malformed", n)
						}
						if r.op != opNoop && string(r.value) != value {
							t.Fatalf("reply %d: op %#x value of %d bytes", n, r.op, len(r.value))
						}
						out = out[used:]
						n++
					}
					if n != keys+1 {
						t.Fatalf("%d replies, want %d", n, keys+1)
					}
					return
				}
				checkReplies(t, out)
				if got := bytes.Count(out, []byte(value+"\r\n")); got != keys {
					t.Fatalf("%d values in the reply, want %d", got, keys)
				}
			})
		}
	}
}

// TestStalledReaderBlocksOnlyItself: a client that sends a large multi-get
// and reads nothing holds up its own connection only, and is disconnected
// once a write has waited WriteTimeout. Before the fix it held its goroutine
// (and reply buffer) forever.
func TestStalledReaderBlocksOnlyItself(t *testing.T) {
	srv, eng := newDoor(t, Options{WriteTimeout: 300 * time.Millisecond})
	addr := serveTest(t, srv)
	eng.StoreValue([]byte("big"), bytes.Repeat([]byte("v"), 1<<20-512), engine.StoreRequest{})

	stalled := dialTest(t, addr)
	stalled.send("get" + strings.Repeat(" big", 64) + "\r\n")

	other := dialTest(t, addr)
	other.send("set k 0 0 2\r\nhi\r\nget k\r\n")
	other.expect("STORED\r\nVALUE k 0 2\r\nhi\r\nEND\r\n")

	deadline := time.Now().Add(10 * time.Second)
	for srv.currConns.Load() != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("%d connections open 10s after one stopped reading; want the stalled one closed", srv.currConns.Load())
		}
		time.Sleep(20 * time.Millisecond)
	}
	other.send("get k\r\n")
	other.expect("VALUE k 0 2\r\nhi\r\nEND\r\n")
}

// budgetCase is a storage request, sent in part, that the door refuses once
// the in-flight budget is spent, and a follow-up request that shows the
// connection is still in step.
type budgetCase struct {
	name        string
	line        string // the command line, %s for the key
	refusal     string // the reply to the refused request
	after, want string // the follow-up request and its reply
}

const budgetValue = 600000

var budgetCases = []budgetCase{
	{"set", "set %s 0 0 600000", replyNoMemory, "get %s\r\n", "END\r\n"},
	{"set noreply", "set %s 0 0 600000 noreply", "", "get %s\r\n", "END\r\n"},
	{"append", "append %s 0 0 600000", replyNoMemory, "get %s\r\n", "VALUE %s 0 3\r\nold\r\nEND\r\n"},
	{"ms", "ms %s 600000 T0", replyNoMemory, "mg %s v\r\n", "EN\r\n"},
	{"ms q", "ms %s 600000 q", replyNoMemory, "mg %s v\r\n", "EN\r\n"},
}

// partialSet is a set of a budgetValue byte value, cut off half way.
func partialSet(key string) []byte {
	return []byte("set " + key + " 0 0 " + strconv.Itoa(budgetValue) + "\r\n" + strings.Repeat("x", budgetValue/2))
}

// restOfValue completes what partialSet began.
func restOfValue() []byte { return []byte(strings.Repeat("x", budgetValue-budgetValue/2) + "\r\n") }

// TestInflightBudget: with the budget spent by stalled partial values, a
// further large value is refused before it arrives, with memcached's error,
// and swallowed; the old value of a set is dropped as memcached drops it.
// Before the fix every connection buffered its value.
func TestInflightBudget(t *testing.T) {
	for _, tc := range budgetCases {
		t.Run(tc.name, func(t *testing.T) {
			srv, eng := newDoor(t, Options{MaxInflightBytes: budgetValue * 3 / 2})
			hold := func(key string) *conn {
				c, _ := newWatchedConn(srv)
				c.feed(partialSet(key))
				return c
			}
			a := hold("a")
			if a.charged == 0 {
				t.Fatalf("a partial %d byte value is not charged", budgetValue)
			}
			b := hold("b") // the budget covers one and not quite two: b is refused
			if b.charged != 0 || srv.inflight.Load() != a.charged {
				t.Fatalf("charges a %d b %d, total %d, budget %d", a.charged, b.charged, srv.inflight.Load(), srv.opts.MaxInflightBytes)
			}
			eng.StoreValue([]byte("k"), []byte("old"), engine.StoreRequest{})
			c, w := newWatchedConn(srv)
			c.feed([]byte(fmt.Sprintf(tc.line, "k") + "\r\n" + strings.Repeat("x", budgetValue/2)))
			if got, want := w.out.String(), tc.refusal; got != want {
				t.Fatalf("refusal: got %q, want %q", got, want)
			}
			if cap(c.rbuf) > initialReadBuffer || c.charged != 0 {
				t.Fatalf("refused value buffered: read buffer %d, charged %d", cap(c.rbuf), c.charged)
			}
			w.out.Reset()
			c.feed(restOfValue())
			c.feed([]byte(fmt.Sprintf(tc.after, "k")))
			if got, want := w.out.String(), strings.ReplaceAll(tc.want, "%s", "k"); got != want {
				t.Fatalf("after the swallowed value: got %q, want %q", got, want)
			}
			// The holder finishes its value; its buffer and charge go back.
			a.feed(restOfValue())
			if !strings.HasPrefix(a.nc.(*watchedConn).out.String(), "STORED\r\n") {
				t.Fatalf("held value: %q", a.nc.(*watchedConn).out.String())
			}
			a.releaseBuffer()
			if srv.inflight.Load() != 0 {
				t.Fatalf("in-flight %d after the only holder released its buffer", srv.inflight.Load())
			}
		})
	}
}

// TestInflightBudgetBinary: a binary set past the budget gets status 0x82
// (out of memory), its value is swallowed, and the old value is gone.
func TestInflightBudgetBinary(t *testing.T) {
	srv, eng := newDoor(t, Options{MaxInflightBytes: budgetValue + 8192})
	hold, _ := newWatchedConn(srv)
	big := req(opSet, "a", strings.Repeat("x", budgetValue), setExtras(0, 0)...).bytes()
	hold.feed(big[:len(big)/2])
	if hold.charged == 0 {
		t.Fatal("partial binary value not charged")
	}
	eng.StoreValue([]byte("k"), []byte("old"), engine.StoreRequest{})
	c, w := newWatchedConn(srv)
	b := req(opSet, "k", strings.Repeat("y", budgetValue), setExtras(0, 0)...).bytes()
	c.feed(b[:len(b)/2])
	r, _, ok := parseResp(w.out.Bytes())
	if !ok || r.status != statusNoMemory || r.op != opSet {
		t.Fatalf("refusal: % x", w.out.Bytes())
	}
	w.out.Reset()
	c.feed(append(b[len(b)/2:], req(opGet, "k", "").bytes()...))
	r, _, ok = parseResp(w.out.Bytes())
	if !ok || r.op != opGet || r.status != statusKeyNotFound {
		t.Fatalf("get after the refused set: % x", w.out.Bytes())
	}
}

// TestInflightBudgetLongLine: a get line that needs more than the budget
// left is answered as memcached answers a request it cannot read, and the
// connection closes.
func TestInflightBudgetLongLine(t *testing.T) {
	srv, _ := newDoor(t, Options{MaxInflightBytes: budgetValue})
	hold, _ := newWatchedConn(srv)
	hold.feed([]byte("set a 0 0 " + strconv.Itoa(budgetValue-2*initialReadBuffer) + "\r\nxx"))
	if hold.charged == 0 {
		t.Fatal("partial value not charged")
	}
	c, w := newWatchedConn(srv)
	c.feed([]byte("get" + strings.Repeat(" key", 10000))) // 40 KB, no end yet
	if w.out.String() != replyNoMemoryReading || !c.closeAfterWrite {
		t.Fatalf("got %q, close %v", w.out.String(), c.closeAfterWrite)
	}
}

// TestInflightBudgetReleasedOnClose: over TCP, the budget held by stalled
// connections comes back when they close, and a large value is accepted
// again.
func TestInflightBudgetReleasedOnClose(t *testing.T) {
	srv, _ := newDoor(t, Options{MaxInflightBytes: budgetValue * 3 / 2})
	addr := serveTest(t, srv)
	partial, rest := string(partialSet("a")), string(restOfValue())
	holder := dialTest(t, addr)
	holder.send(partial)
	refused := dialTest(t, addr)
	deadline := time.Now().Add(5 * time.Second)
	for srv.inflight.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the partial value was never charged")
		}
		time.Sleep(5 * time.Millisecond)
	}
	refused.send(partial)
	refused.expect(replyNoMemory)
	holder.nc.Close()
	for srv.inflight.Load() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("in-flight %d after the holder closed", srv.inflight.Load())
		}
		time.Sleep(5 * time.Millisecond)
	}
	refused.send(rest) // the rest of the swallowed value
	refused.send(partial + rest)
	br := bufio.NewReader(refused.nc)
	refused.nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	line, err := br.ReadString('\n')
	if line != "STORED\r\n" {
		t.Fatalf("large set once the budget is back: %q, %v", line, err)
	}
}

// TestDefaultInflightBudget checks the default: an eighth of the memory
// limit, never below 4 MiB or one maximum-size item.
func TestDefaultInflightBudget(t *testing.T) {
	for _, tc := range []struct{ mem, item, want int64 }{
		{64 << 20, 1 << 20, 8 << 20},
		{8 << 20, 1 << 20, 4 << 20},
		{64 << 20, 16 << 20, 16<<20 + 2*maxLine},
		{1 << 30, 1 << 20, 128 << 20},
	} {
		if got := defaultInflightBytes(tc.mem, tc.item); got != tc.want {
			t.Errorf("defaultInflightBytes(%d, %d) = %d, want %d", tc.mem, tc.item, got, tc.want)
		}
	}
	srv, _ := newDoor(t, Options{})
	if srv.opts.MaxInflightBytes != 8<<20 || srv.opts.WriteTimeout != DefaultWriteTimeout {
		t.Fatalf("defaults: budget %d, write timeout %v", srv.opts.MaxInflightBytes, srv.opts.WriteTimeout)
	}
}
