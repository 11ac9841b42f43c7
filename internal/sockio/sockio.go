// Package sockio holds what the doors share under their protocols: raw-call socket I/O and the accept loop.
//
// Raw calls. sockio reads and writes a socket with raw system calls, and waits for it through Go's poller only
// when it is not ready. Why: a Read or Write on a net.Conn is a blocking-style system call to the runtime
// (entersyscall, exitsyscall), although the socket is non-blocking and the call never waits. While a thread is in
// such a call, the runtime's monitor (sysmon) may hand its P to another thread, and does when the call lasts over
// 20 µs: on this project's 2-core virtual machines a loopback write that wakes its reader often does. The hand-off
// costs a futex wake of another thread, the writer then has to find a P again, and sysmon itself keeps waking every
// 20 µs while it finds work: a sizeable share of the SQL door's CPU per query (perf figures in docs/benchmarks.md).
// A raw system call does not enter that state; on a non-blocking socket it returns at once, with data or EAGAIN,
// and on EAGAIN the goroutine parks in the poller as net.Conn's would.
//
// Who uses it: mysqlwire wraps every socket (the SQL door's clients and backends, whose commands go out with the
// read of their reply: WriteThenRead), backend dials every connection to MySQL wrapped (the containers' pools, the
// binlog follower), and the memcache door's event loops read and write with ReadNow and WriteNow, and wraps a
// connection that leaves its loop for MySQL's sake (leaveLoop). The memcache door's connections served by a goroutine
// from the start (no event loops) are not wrapped: there it cost a lone client's get latency (see memcache's accept
// loop).
//
// The accept loop. Both doors accept with AcceptLoop: one loop, with the pause between failed Accepts that may
// pass; each door says which failures those are and what it logs.
//
// Invariants:
//   - A wrapped connection behaves as the net.Conn it wraps: the same deadlines (the poller enforces them), the same
//     errors (a *net.OpError with Op "read" or "write"; io.EOF at end of stream), Close, addresses and SyscallConn.
//     One difference, asked for: a pooled connection (WrapPooled) fails the first write after a read, with nothing
//     written, when its peer has closed the connection or spoken unasked.
//   - Only sockets are wrapped (a syscall.Conn whose descriptor the poller manages); anything else, and every
//     connection on systems other than Linux, is returned as it is.
//   - A raw call never blocks: a socket in Go's poller is non-blocking, and a write copies at most what the socket
//     buffer takes (the rest waits for writability in the poller).
//   - A read spins (raw reads again and again, package spin) before it waits in the poller only when its connection
//     has a Spinner whose Gate admits it: at most one spinner in the process at a time.
//   - AcceptLoop never spins on a failing listener: a retried failure pauses 5 ms to 1 s before the next Accept.
package sockio

import (
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/keywaydb/keyway/internal/spin"
)

// Conn is a socket whose reads and writes are raw system calls (see the package comment).
type Conn struct {
	net.Conn
	raw syscall.RawConn
	// The read and the write under way. net.Conn lets several goroutines read (or write) at once; each takes its
	// turn on its op.
	rd, wr op
	// pooled: the first write after a read checks the connection first (see WrapPooled); readLast says a read came
	// after the last write.
	pooled   bool
	readLast atomic.Bool
}

// op is the state of one read or write, kept per connection with its poller callback bound once, so that a read
// or write allocates nothing.
type op struct {
	mu    sync.Mutex
	p     []byte      // a read's buffer
	rest  net.Buffers // what a write has left to send: one[:1] at its start
	one   [1][]byte
	iov   []syscall.Iovec // WriteNow's scratch
	n     int
	errno syscall.Errno
	fn    func(fd uintptr) bool
	peek  func(fd uintptr) // a pooled write's check (peekOnce), bound once like fn
	// WriteThenRead's: its callback (bound once like fn), and its write's progress (rest is its request).
	writeFirst func(fd uintptr) bool
	wn         int
	werrno     syscall.Errno
	b          [1]byte // its scratch
	// A read's spin before it waits in the poller (SetSpinner): the spinner, the descriptor its poll reads, and
	// the poll, bound once.
	spinner *Spinner
	fd      uintptr
	poll    func() bool
}

// Spinner is what a Conn's reads do before they wait in the poller for data due within microseconds (package spin):
// spin with Budget while Gate admits it (at most MaxBusy statements in flight, one spinner at a time). A Spinner
// belongs to one waiter (a session); a connection shared by several (a pooled backend connection) is given the
// borrower's for the time it borrows it.
type Spinner struct {
	Budget  spin.Budget
	Gate    *spin.Gate
	Who     uint64 // the waiter, for the Gate
	MaxBusy int32
	// waitedFrom is when a spin that found nothing handed over to the poller, zero otherwise: how long the wait
	// after it took tells the budget whether the data came just late.
	waitedFrom time.Time
	// stopped ends spins for good (Stop).
	stopped atomic.Bool
}

// Stop ends any spin under way and every later one, so that a read deadline set to interrupt the reader (a KILL, a
// shutdown) takes effect at once: a spin reads with raw calls, which no deadline reaches. Safe from any goroutine.
func (s *Spinner) Stop() { s.stopped.Store(true) }

// SetSpinner makes c's reads spin with s before they wait (nil: never).
func (c *Conn) SetSpinner(s *Spinner) {
	c.rd.mu.Lock()
	c.rd.spinner = s
	c.rd.mu.Unlock()
}

// Wrap returns nc with raw-call reads and writes when it is a socket, or nc itself.
func Wrap(nc net.Conn) net.Conn {
	if !supported {
		return nc
	}
	if c, ok := nc.(*Conn); ok {
		return c
	}
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return nc
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return nc
	}
	c := &Conn{Conn: nc, raw: raw}
	c.bind()
	return c
}

// WrapPooled is Wrap for a connection that a pool of request-and-response clients keeps between requests (the
// containers' go-sql-driver pools): the first write after a read, which starts a request on a connection that may
// have sat idle, first peeks at the socket with a raw non-blocking call. If the peer closed the connection meanwhile,
// or sent something nobody asked for (a server's farewell), the write fails having written nothing, and go-sql-driver
// takes such a failure as a bad connection that database/sql retries on another one. It is go-sql-driver's own
// liveness check (CheckConnLiveness, which the pool's configuration then turns off), made without the
// blocking-style read that wakes the runtime's sysmon thread: on two busy vCPUs that wake and sysmon's polling
// after it cost a lone writer's set thread switches and scheduling delay (see docs/benchmarks.md). Not for
// protocols in which the server may speak while the client writes (a replication stream).
// Where Wrap returns nc itself (not Linux, not a socket), so does WrapPooled, with no check.
func WrapPooled(nc net.Conn) net.Conn {
	w := Wrap(nc)
	if c, ok := w.(*Conn); ok {
		c.pooled = true
	}
	return w
}

// ChecksPooled reports whether WrapPooled's connections check themselves (see WrapPooled).
const ChecksPooled = supported

// The errors of a pooled write whose check failed, inside a *net.OpError of Op "write".
var (
	ErrClosedWhileIdle = errors.New("sockio: the peer closed the connection while it was idle")
	ErrSentWhileIdle   = errors.New("sockio: the peer sent data nobody asked for while the connection was idle")
)

// SyscallConn is the wrapped socket's: callers that look beneath the connection (a MSG_PEEK check) still can.
func (c *Conn) SyscallConn() (syscall.RawConn, error) { return c.raw, nil }

// opError gives a poller error (a *net.OpError of a "raw-read" or "raw-write") the operation net.Conn's own would
// name.
func opError(op string, err error) error {
	if oe, ok := err.(*net.OpError); ok {
		e := *oe
		e.Op = op
		return &e
	}
	return err
}
