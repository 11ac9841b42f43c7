package memcache

import (
	"bytes"
	"errors"
	"math/bits"
	"net"
	"os"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/keywaydb/keyway/internal/engine"
)

const (
	initialReadBuffer = 4 << 10
	// maxLine bounds a text command line. memcached closes a connection whose
	// line exceeds 2048 bytes unless it is a get; keyway allows long multi-get
	// lines up to maxGetLine.
	maxLine    = 2048
	maxGetLine = 1 << 20
	// flushThreshold writes replies out mid-batch, and mid-request for a
	// multi-key get, so the reply buffer stays near this size whatever the
	// client asks for.
	flushThreshold = 64 << 10
	// maxReferenced bounds the bytes of large values (largeValue) a batch's
	// replies refer to before they are written out: they are not copied, so
	// the bound is what they keep alive after a later write replaced them,
	// and it keeps a batch of large values in one vectored write.
	maxReferenced = 1 << 20
	// largeValue is the size from which a value is not copied into the
	// reply buffer but written from the item itself, in the batch's one
	// vectored write (items are immutable once stored). Below it the copy
	// is cheaper than another iovec (BenchmarkTextGetLarge).
	largeValue = 8 << 10
	// keepBuffer is the largest buffer kept between batches; larger ones were
	// grown for one big value and are released.
	keepBuffer = 64 << 10
	maxKeyLen  = 250
)

// needMore is returned by a request handler whose request is not complete in
// the buffer yet.
const needMore = -1

var errClose = errors.New("close connection")

// conn is one client connection. Only one goroutine at a time touches it: its own, or its event loop's.
type conn struct {
	srv *Server
	eng *engine.Engine
	// nc is the connection, except while an event loop serves it: then loop is that loop and fd the socket (nc is
	// nil). A connection leaves its loop for a goroutine of its own (leaveLoop), and one that left because it waited
	// on MySQL may go back (backToLoop); s.mu guards the changes, which Shutdown reads.
	nc   net.Conn
	loop *eventLoop
	fd   int
	// away: the loop's goroutine stepped away with the connection for a command that may wait (stepAway), and
	// answers it until it gives it back (comeBack); disarmed: meanwhile the loop took it out of its epoll set. Both
	// are written under the loop's mu.
	away, disarmed bool
	awayStreak     int // batches answered away from the loop in a row (see awayStreakLimit)
	// waits: the connection left its loop because its commands wait on MySQL as a rule (awayStreakLimit); it goes
	// back once quiet, the batches it has had answered in a row on its own goroutine with no command that may wait,
	// reaches quietToReturn. waited: a command of the batch being answered may wait.
	waits, waited bool
	quiet         int

	remote net.Addr // the client's address (nil for a connection that is not a socket's)
	// container is where this connection's keys without "@@" go after a "get @@name" (the InnoDB plugin's switch;
	// see engine.SwitchTo); nil: the engine's default. Every key goes to the engine through ekey.
	container *engine.Table

	// id, listenAddr, state and lastCmd are what stats conns shows; state
	// and lastCmd (Unix seconds) are written by the connection's goroutine
	// and read by any.
	id         uint64
	listenAddr net.Addr
	state      atomic.Uint32
	lastCmd    atomic.Int64

	// rbuf[rpos:rend] is input not yet answered.
	rbuf       []byte
	rpos, rend int
	// need is the total size of the request at rpos when a handler said it
	// needs more; the buffer grows to hold it.
	need int
	// swallow is how many bytes of a refused value are still to be discarded.
	swallow int64

	out []byte // replies not yet written
	// werr is the first write error; once set nothing more is answered and
	// the connection closes.
	werr error
	// large are the values the replies refer to instead of copying them
	// (appendData): large[i].v goes out after out[:large[i].at]. largeBytes
	// is their total size, which flushIfFull bounds by maxReferenced.
	large      []largeRef
	largeBytes int
	// vals is where a get from the local store copies a small value to, reused from get to get, and pooled the
	// arrays of larger ones the replies refer to until they are written (see Take).
	vals   []byte
	pooled []*[]byte
	// bufs is scratch for the vectored write of out and large; writing is what of it a blocking write has yet to
	// send (writeBlocking).
	bufs, writing net.Buffers
	iov           []syscall.Iovec // writeNow's scratch

	// tally counts this connection's gets and sets; publish adds it to the
	// engine's counters before replies are written and before each read.
	tally engine.Tally

	// charged is how many bytes of the server's in-flight budget this
	// connection holds: at least cap(rbuf) - initialReadBuffer, and the size
	// of a data block a handler reserved room for before it arrives.
	charged int64
	// head is the length of the text command line being answered, for a
	// handler that must reserve room for the line and its data block.
	head int

	closeAfterWrite bool
	toks            [maxTokens][]byte
	keys            [][]byte // scratch for multi-key gets

	// proto is fixed by the first byte a client sends, as memcached decides
	// it: after that, input in the other protocol is an error, not a switch.
	proto uint8
	// authed is true once the client has authenticated, and from the start
	// when no users are configured. Until then only authentication runs.
	authed bool
}

const (
	protoUnknown uint8 = iota
	protoText
	protoBinary
)

func newConn(s *Server, nc net.Conn) *conn {
	c := &conn{srv: s, eng: s.eng, nc: nc, fd: -1, rbuf: make([]byte, initialReadBuffer), authed: s.auth == nil}
	c.lastCmd.Store(time.Now().Unix())
	return c
}

// A connection's state for stats conns, in memcached's words.
const (
	stateNewCmd   uint32 = iota // connected, nothing sent yet
	stateRead                   // waiting for the next request
	stateNRead                  // waiting for the rest of a data block
	stateSwallow                // discarding a refused data block
	stateParseCmd               // answering requests
	stateWrite                  // writing replies out
)

var stateNames = [...]string{"conn_new_cmd", "conn_read", "conn_nread", "conn_swallow", "conn_parse_cmd", "conn_mwrite"}

func (c *conn) serve() {
	handedBack := false
	defer func() {
		if !handedBack {
			c.end()
		}
	}()
	defer c.recoverPanic()
	handedBack = c.serveLoop()
}

// serveLoop reads and answers requests until the connection is to close (false), or until it is handed back to an
// event loop (true; see backToLoop): the caller no longer owns it then.
func (c *conn) serveLoop() (handedBack bool) {
	for {
		if !c.readyToRead() {
			return false
		}
		// Between batches, with no input left to answer: a loop reports what comes next.
		if c.waits && c.quiet >= quietToReturn && c.rpos == c.rend && c.backToLoop() {
			return true
		}
		// net.Conn.Read reads first and, when the next batch has not come
		// yet, fails with EAGAIN, waits for the poller and reads again: a
		// lone client's request costs about 1.8 read syscalls here, against
		// memcached's one (it waits first). Waiting first through
		// syscall.RawConn.Read would miss input: its poller reset forgets
		// readiness that came before the wait. The event loops (loop_linux.go)
		// wait first.
		n, err := c.nc.Read(c.rbuf[c.rend:])
		c.waited = false
		if !c.answer(n) {
			return false
		}
		switch {
		case c.waited:
			c.quiet = 0
		case n > 0:
			c.quiet++
		}
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) && !c.srv.closing() {
				continue
			}
			return false
		}
	}
}

// quietToReturn is how many batches in a row a connection that left its loop because it waited on MySQL as a rule
// must have had answered without a command that may wait before it goes back to a loop (backToLoop): a cache that
// was cold has warmed, say. Leaving again takes awayStreakLimit batches that wait, so a client that does both goes
// back and forth at most once per quietToReturn+awayStreakLimit batches.
const quietToReturn = 32

// backToLoop hands the connection, between batches, to an event loop (Server.enterLoop); true when a loop took it,
// and the caller owns it no more.
func (c *conn) backToLoop() bool {
	c.waits, c.quiet = false, 0
	if c.srv.loops != nil && c.srv.enterLoop(c) {
		return true
	}
	c.waits = true // nothing changed: it stays on its goroutine
	return false
}

// recoverPanic, deferred, turns a bug met by one request into the loss of its connection, not the server's.
func (c *conn) recoverPanic() {
	if r := recover(); r != nil {
		c.logPanic(r)
	}
}

func (c *conn) logPanic(r any) {
	c.srv.log.Error("memcache: a request crashed its connection; closing it", "remote", addrName(c.remote), "panic", r, "stack", string(debug.Stack()))
}

// end closes the connection and gives back what it holds; it runs once, when the connection is done.
func (c *conn) end() {
	c.releaseBuffer()
	c.publish()
	if c.loop != nil {
		c.loop.remove(c)
	} else if c.nc != nil { // nil: it could not leave its loop (leaveLoop)
		c.nc.Close()
	}
	c.srv.finished(c)
}

// readyToRead prepares the read buffer for the next read and records what the connection waits for. It reports
// false, after answering, when the connection must close: the in-flight budget cannot hold the request being read.
func (c *conn) readyToRead() bool {
	if c.rpos == c.rend {
		c.rpos, c.rend = 0, 0
		// A buffer grown for one big request goes back; so does a
		// smaller grown one when the server's budget runs short.
		if cap(c.rbuf) > keepBuffer || c.charged > 0 && c.srv.budgetShort() {
			c.releaseBuffer()
		}
	}
	if !c.makeRoom() {
		c.noRoom()
		c.flush()
		return false
	}
	c.publish()
	c.setWaitState()
	return true
}

// answer answers the n bytes just read into the buffer and writes the replies out. It reports false when the
// connection is to close.
func (c *conn) answer(n int) bool {
	c.rend += n
	var began time.Time
	if n > 0 {
		if c.srv.opts.Observe != nil {
			began = time.Now()
		}
		c.srv.bytesRead.Add(int64(n))
		c.state.Store(stateParseCmd)
		c.lastCmd.Store(time.Now().Unix())
		if perr := c.process(); perr != nil {
			c.flush()
			return false
		}
	}
	if c.unsent() {
		if werr := c.flush(); werr != nil {
			return false
		}
		if !began.IsZero() {
			c.srv.opts.Observe(time.Since(began))
		}
	}
	if cap(c.out) > keepBuffer {
		c.out = nil
	}
	return !c.closeAfterWrite
}

// setWaitState records what the connection is about to wait for.
func (c *conn) setWaitState() {
	switch {
	case c.swallow > 0:
		c.state.Store(stateSwallow)
	case c.need > 0 && c.lineRead():
		c.state.Store(stateNRead)
	case c.state.Load() != stateNewCmd:
		c.state.Store(stateRead)
	}
}

// lineRead reports whether the unanswered input holds a whole command line
// (text) or header (binary), so what is awaited is the data after it.
func (c *conn) lineRead() bool {
	buf := c.rbuf[c.rpos:c.rend]
	if c.proto == protoBinary {
		return len(buf) >= binaryHeaderLen
	}
	return bytes.IndexByte(buf, '\n') >= 0
}

// makeRoom makes sure there is space to read into: it moves unanswered input
// to the front and grows the buffer to the size a pending request needs,
// charging the growth to the server's in-flight budget. It reports false
// when the budget cannot cover the growth.
func (c *conn) makeRoom() bool {
	want := max(c.need, c.rend-c.rpos+1)
	if c.rpos > 0 && want > len(c.rbuf)-c.rpos {
		copy(c.rbuf, c.rbuf[c.rpos:c.rend])
		c.rend -= c.rpos
		c.rpos = 0
	}
	if want <= len(c.rbuf) {
		return true
	}
	// Double for a line that keeps growing; take exactly what a request of
	// known size needs when the budget is short.
	size := max(want, 2*len(c.rbuf))
	if !c.reserve(size) {
		size = want
		if !c.reserve(size) {
			return false
		}
	}
	nb := make([]byte, size)
	copy(nb, c.rbuf[c.rpos:c.rend])
	c.rend -= c.rpos
	c.rpos = 0
	c.rbuf = nb
	return true
}

// reserve makes the connection's charge cover a read buffer of size bytes;
// the first initialReadBuffer bytes of every connection are free. It
// reports false, charging nothing, when the server's budget cannot cover it.
// A handler waiting for a data block calls it before the block arrives, so
// it can refuse the block rather than buffer it.
func (c *conn) reserve(size int) bool {
	want := int64(size) - initialReadBuffer
	if want <= c.charged {
		return true
	}
	if !c.srv.charge(want - c.charged) {
		return false
	}
	c.charged = want
	return true
}

// valueVerdict is the door's decision on a storage request's value before
// the value is read.
type valueVerdict uint8

const (
	valueTaken    valueVerdict = iota // read it and store it
	valueTooLarge                     // over the item size limit
	valueNoMemory                     // not in the buffer, and the in-flight budget cannot hold it
)

// takeValue is the one check every codec (text, meta, binary) makes of a
// storage request's value of vlen bytes before reading it: over the item
// size limit it is too large; not yet complete in the buffer (complete is
// false) and the in-flight budget cannot cover a read buffer of size bytes
// (the request as buffered), there is no memory for it, as memcached says
// when it cannot allocate the item. A refused write drops key's old value for
// mode Set (engine.RefuseTooLarge), so no stale copy outlives it. The caller
// answers in its protocol's words and swallows the value as it arrives.
func (c *conn) takeValue(mode engine.Mode, key []byte, vlen int64, size int, complete bool) valueVerdict {
	v := valueTaken
	switch {
	case vlen > c.eng.MaxItemSize():
		v = valueTooLarge
		c.srv.tooLarge.Add(1)
	case !complete && !c.reserve(size):
		v = valueNoMemory
		c.srv.noMemory.Add(1)
	default:
		return valueTaken
	}
	c.eng.RefuseTooLarge(mode, c.ekey(key))
	return v
}

// releaseBuffer gives back a grown read buffer and its charge. The buffer
// must hold no unanswered input.
func (c *conn) releaseBuffer() {
	if cap(c.rbuf) > initialReadBuffer {
		c.rbuf = make([]byte, initialReadBuffer)
	}
	if c.charged > 0 {
		c.srv.charge(-c.charged)
		c.charged = 0
	}
}

// noRoom answers a request that cannot be read because the in-flight budget
// is spent (a long get line; a data block is refused by its handler before
// this), as memcached does when it cannot grow a read buffer: an error, then
// the connection closes.
func (c *conn) noRoom() {
	c.srv.readBufOOM.Add(1)
	if c.proto != protoBinary {
		c.out = append(c.out, replyNoMemoryReading...)
	}
	c.closeAfterWrite = true
}

// process answers every complete request in the buffer.
func (c *conn) process() error {
	for c.rpos < c.rend {
		buf := c.rbuf[c.rpos:c.rend]
		if c.swallow > 0 {
			n := min(int64(len(buf)), c.swallow)
			c.swallow -= n
			c.rpos += int(n)
			continue
		}
		var n int
		var err error
		if c.proto == protoUnknown {
			c.proto = protoText
			if buf[0] == binaryRequestMagic {
				c.proto = protoBinary
			}
		}
		if c.proto == protoBinary {
			n, err = c.binaryRequest(buf)
		} else {
			n, err = c.textRequest(buf)
		}
		if err != nil {
			return err
		}
		if c.werr != nil {
			return c.werr
		}
		if n == needMore {
			return nil
		}
		c.need = 0
		c.rpos += n
		if c.closeAfterWrite {
			return nil
		}
		if err := c.flushIfFull(); err != nil {
			return err
		}
	}
	return nil
}

// flush writes the replies out, in one write (a vectored one when they
// refer to large values). A write that takes longer than the write timeout
// fails and closes the connection: a client that does not read holds up
// only itself, and only for that long. The connection's counts are
// published first, so a client that has a reply finds its request in stats.
func (c *conn) flush() error {
	defer c.returnValues()
	c.publish()
	if !c.unsent() || c.werr != nil {
		return c.werr
	}
	c.state.Store(stateWrite)
	defer c.state.Store(stateParseCmd)
	var n int64
	var err error
	switch {
	case c.loop != nil:
		n, err = c.flushFromLoop()
	case len(c.large) == 0:
		c.setWriteDeadline()
		var m int
		m, err = c.nc.Write(c.out)
		n = int64(m)
	default:
		n, err = c.writeBlocking(c.replyVector())
		c.releaseVector()
	}
	c.srv.bytesWritten.Add(n)
	c.out = c.out[:0]
	c.werr = err
	return err
}

// flushFromLoop writes the replies of a connection served by an event loop: as much as the socket takes now, and
// when it takes less than all (the client reads slower than it asks), the connection leaves the loop and the rest
// is written as any connection's, blocking its own goroutine up to the write timeout.
func (c *conn) flushFromLoop() (int64, error) {
	defer c.releaseVector()
	rest, n, err := c.writeNow(c.replyVector())
	if err != nil || len(rest) == 0 {
		return n, err
	}
	if err := c.leaveLoop(); err != nil {
		return n, err
	}
	m, err := c.writeBlocking(rest)
	return n + m, err
}

// writeBlocking writes vec to the connection under the write timeout. The vector goes through a field so that
// WriteTo (which consumes it through a pointer) does not move it to the heap on every vectored write.
func (c *conn) writeBlocking(vec net.Buffers) (int64, error) {
	c.setWriteDeadline()
	c.writing = vec
	n, err := c.writing.WriteTo(c.nc)
	c.writing = nil
	return n, err
}

// replyVector is the replies as one vector: out with the large values spliced in at their places. The vector is
// scratch (c.bufs) until releaseVector.
func (c *conn) replyVector() net.Buffers {
	vec := c.bufs[:0]
	at := 0
	for _, l := range c.large {
		if l.at > at {
			vec = append(vec, c.out[at:l.at])
		}
		vec = append(vec, l.v)
		at = l.at
	}
	if at < len(c.out) {
		vec = append(vec, c.out[at:])
	}
	c.bufs = vec
	return vec
}

// releaseVector lets the large values the last replies referred to go.
func (c *conn) releaseVector() {
	clear(c.bufs[:cap(c.bufs)])
	c.bufs = c.bufs[:0]
	clear(c.large)
	c.large, c.largeBytes = c.large[:0], 0
}

// unsent reports whether there are replies not yet written.
func (c *conn) unsent() bool { return len(c.out) > 0 || len(c.large) > 0 }

// flushIfFull writes the replies out once they pass flushThreshold; request
// handlers call it between the values of a multi-key reply.
func (c *conn) flushIfFull() error {
	if len(c.out) < flushThreshold && c.largeBytes < maxReferenced {
		return c.werr
	}
	return c.flush()
}

// largeRef is a value of at least largeValue bytes the replies send from the
// item itself, after out[:at].
type largeRef struct {
	at int
	v  []byte
}

// appendData appends a value to the replies. A large value is referenced,
// not copied, and goes out from v itself in the next flush, so a connection
// never holds copies of large values however many a request names (and
// refers to about maxReferenced bytes of them at most). v must not
// change afterwards (stored items never do) and must not be in rbuf.
func (c *conn) appendData(v []byte) {
	if len(v) < largeValue {
		c.out = append(c.out, v...)
		return
	}
	c.large = append(c.large, largeRef{at: len(c.out), v: v})
	c.largeBytes += len(v)
}

// publish adds the connection's counts to the engine's (see engine.Tally).
// It runs before every write and before every read, so another connection's
// stats lag this one's by at most the batch being answered, and never miss a
// request whose reply was sent; this connection's own stats publish first.
func (c *conn) publish() { c.eng.Publish(&c.tally) }

func (c *conn) setWriteDeadline() {
	if d := c.srv.opts.WriteTimeout; d > 0 {
		c.nc.SetWriteDeadline(time.Now().Add(d))
	}
}

// ekey is key as the engine is to route it for this connection (engine.InContainer).
func (c *conn) ekey(key []byte) []byte { return engine.InContainer(c.container, key) }

// engineKey is ekey(key) for a command that does a with the key. On an event loop, a command that may wait on more
// than its client (engine.MayWait) steps away from the loop first (stepAway), so the loop's other connections do not
// wait with it.
func (c *conn) engineKey(key []byte, a engine.Access) []byte {
	k := c.ekey(key)
	c.mayWait(k, a)
	return k
}

// mayWait steps away from the connection's event loop when a command that does a with the engine's key k may wait;
// on a connection that left its loop because it waited, it notes that the batch did (see quietToReturn).
func (c *conn) mayWait(k []byte, a engine.Access) {
	if (c.loop != nil && !c.away || c.waits && !c.waited) && c.eng.MayWait(k, a) {
		c.WillWait()
	}
}

// WillWait is told by the engine (engine.Waiter) before a read waits on MySQL, and by mayWait before a command that
// may: on an event loop the connection steps away; on a connection that left its loop because it waited, it notes
// that the batch did (see quietToReturn). Told again, it changes nothing.
func (c *conn) WillWait() {
	switch {
	case c.loop != nil && !c.away:
		c.stepAway()
	case c.waits:
		c.waited = true
	}
}

// engineFlushAll is engine.FlushAll for flush_all in either protocol: with containers it may truncate their tables,
// so on an event loop it steps away first.
func (c *conn) engineFlushAll(delay int64) error {
	if c.eng.HasContainers() {
		c.stepAway()
	}
	return c.eng.FlushAll(delay)
}

// storeAccess is what a storage command of mode does with its key, for engine.MayWait.
func storeAccess(mode engine.Mode) engine.Access {
	if mode == engine.Set {
		return engine.AccessSet
	}
	return engine.AccessOther
}

// Take is store.ValueBuf for the gets of the local store (getOne): the memory a value is copied to out of the
// store. A small value goes to vals, which its reply copies into out at once (appendData), so the next get reuses
// it; a large one, which its reply refers to until it is written, to an array from valuePools that flush gives
// back once it is.
func (c *conn) Take(n int) []byte {
	if n < largeValue {
		if cap(c.vals) < n {
			c.vals = make([]byte, max(n, 1<<10))
		}
		return c.vals[:n]
	}
	if n > maxPooledValue {
		return make([]byte, n)
	}
	class := valueClass(n)
	p, _ := valuePools[class].Get().(*[]byte)
	if p == nil {
		b := make([]byte, largeValue<<class)
		p = &b
	}
	c.pooled = append(c.pooled, p)
	return (*p)[:n]
}

// returnValues gives the arrays of the large values the replies referred to back to valuePools (flush: they are
// written).
func (c *conn) returnValues() {
	for i, p := range c.pooled {
		valuePools[valueClass(cap(*p))].Put(p)
		c.pooled[i] = nil
	}
	c.pooled = c.pooled[:0]
}

// valuePools keep the arrays large values are copied to out of the store (Take), one pool per power of two from
// largeValue to maxPooledValue; a value larger than that gets an array of its own. Without them a large get
// would take fresh memory each time, which costs more than the copy.
var valuePools [valueClasses]sync.Pool

const (
	maxPooledValue = 1 << 20
	valueClasses   = 8 // largeValue (8 KiB) << 7 is maxPooledValue
)

// valueClass is the pool of arrays of at least n bytes (largeValue <= n <= maxPooledValue).
func valueClass(n int) int { return bits.Len(uint(n-1)) - bits.Len(uint(largeValue-1)) }
