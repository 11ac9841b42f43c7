// Package memcache is keyway's memcache door: the memcached text, meta and
// binary protocols over TCP, answered by the engine.
//
// Each connection has one read buffer and one reply buffer, and is served
// either by an event loop (loop_linux.go: plain TCP on Linux, with a store
// that does not wait for the disk on each write) or by a goroutine of its own
// (TLS, sync durability, other systems, and a client that reads slower than
// it asks). Keys of containers are served on the loops too: a command that
// may wait on MySQL (engine.MayWait, or a get the engine says will wait:
// WillWait) steps away from its loop first, and a
// connection whose commands wait as a rule leaves for a goroutine of its own
// until it has been quiet a while. It answers every complete request in the read
// buffer, appending replies, and writes them out once the buffered input is
// drained (pipelining), or sooner: whenever the replies pass flushThreshold,
// between requests and between the values of a multi-key get. A value of
// largeValue bytes or more is never copied into the reply buffer: the replies
// refer to the stored item's bytes (immutable), and the batch goes out in one
// vectored write (writev) with them in place. A request is only parsed when
// it is complete: the parser returns "need more" and the connection reads
// again, growing the buffer up to the request's size, which is bounded by the
// line limit and the item size limit. A value over the limit is discarded as
// it arrives (swallowed), never held.
//
// Invariants:
//   - A connection's reply buffer holds at most flushThreshold plus one reply
//     smaller than largeValue, and refers to at most maxReferenced bytes of
//     large values plus one; whatever a request asks for, the rest waits in
//     the client's socket, not in keyway.
//   - A connection counts its gets and sets in its own engine.Tally and adds
//     them to the engine's shared counters (publish) before each write and
//     before each read, so no request touches a counter another core writes.
//     stats on a connection publishes that connection's counts first; other
//     connections' counts lag by at most the batch they are answering, and a
//     request whose reply has been written is always counted.
//   - Read buffers grown past their first initialReadBuffer bytes are charged
//     to one server-wide budget (Options.MaxInflightBytes) before they are
//     allocated, and the charge is returned when the buffer is released (after
//     the request, or when the connection closes). A data block the budget
//     cannot hold is refused before it arrives ("SERVER_ERROR out of memory
//     storing object"; binary status 0x82) and swallowed, so the connection
//     stays in step; a line the budget cannot hold closes the connection.
//     So the door's memory is bounded by MaxConnections × (initialReadBuffer +
//     reply buffer) + MaxInflightBytes, whatever the clients send.
//   - Every write has a deadline (Options.WriteTimeout): a client that does not
//     read blocks only its own goroutine, and only that long; then it is
//     disconnected. An event loop never blocks on a write: a connection whose
//     replies the socket does not take whole gets a goroutine of its own.
//   - An error in one client's input is answered to that client only; the
//     connection is closed only where memcached closes it.
//   - With Options.Users set, no command runs on a connection before it has
//     authenticated (text: memcached's "set" auth command; binary: SASL
//     PLAIN; see auth.go): until then only authentication and binary
//     version are answered. Passwords are compared in constant time and
//     never logged, echoed or kept in an error.
//   - With Options.TLS set, the door speaks TLS only; the handshake runs on
//     the connection's goroutine, never in the accept loop.
package memcache

import (
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/keywaydb/keyway/internal/engine"
	"github.com/keywaydb/keyway/internal/sockio"
)

// ProtocolVersion is the memcached protocol level keyway speaks: what
// `version` reports before Options.Version adds keyway's own. It is the
// memcached release whose behaviour keyway matches and is tested against
// (Debian's memcached, the peer tests' and `keyway bench`'s): a newer
// release changes replies and stats, so this moves only with that peer.
const ProtocolVersion = "1.6.18"

// Options configure the door.
type Options struct {
	MaxConnections int
	Logger         *slog.Logger
	Threads        int    // reported by stats; GOMAXPROCS by default
	Version        string // what `version` and stats report ("" = ProtocolVersion + "-keyway")

	// WriteTimeout bounds each write to a client: a client that reads
	// nothing for this long while keyway has replies for it is
	// disconnected. 0 means DefaultWriteTimeout; negative means no limit.
	WriteTimeout time.Duration
	// MaxInflightBytes bounds the read buffers all connections together
	// grow past their first 4 KiB to hold requests not yet complete (data
	// blocks on their way in, long get lines). Past it a data block is
	// refused with "SERVER_ERROR out of memory storing object" (binary:
	// status 0x82) and discarded as it arrives. 0 means the default: an
	// eighth of the store's memory limit, at least 4 MiB and at least one
	// item of the maximum size.
	MaxInflightBytes int64

	// Users, when not empty, turns authentication on: a client must
	// authenticate as one of them before any command runs (see auth.go).
	Users []User
	// TLS, when set, makes the door speak TLS only (memcached -Z).
	TLS *tls.Config
	// Observe, when set, is told how long each batch of requests (one request, or a pipeline read at once) took
	// from its read to the write of its replies.
	Observe func(time.Duration)
	// EventLoops is how many event loops serve plain TCP connections over a store that does not wait for the disk
	// per write (see loop_linux.go): 0 means GOMAXPROCS, negative means none (a goroutine per connection).
	EventLoops int
	// LoopThreads makes each event loop keep an OS thread and wait in epoll_pwait on it, as memcached's worker
	// threads do, instead of parking in Go's poller (see loop_linux.go), while it has connections. The caller
	// should give the runtime one P more than there are loops (runtime.GOMAXPROCS) while any loop keeps its
	// thread (OnLoopThread), or the runtime takes waiting loops' Ps back and wakes threads to spin on them, which
	// costs more than it saves.
	LoopThreads bool
	// LoopSpin is how long, at first, a loop with LoopThreads that serves a single connection looks at it without
	// waiting before it blocks in epoll_pwait (up to 3 times as long while its client's requests come just after;
	// see readyWait.spinWait); 0 = it blocks at once.
	LoopSpin time.Duration
	// OnLoopThread, when set, is told each time a loop with LoopThreads starts keeping its thread (true) or stops
	// (false; it keeps none while it has no connection). Calls may come from several loops at once.
	OnLoopThread func(keeps bool)
}

// DefaultMaxConnections is Options.MaxConnections' default (memcached's -c).
const DefaultMaxConnections = 1024

// DefaultWriteTimeout is Options.WriteTimeout's default: long enough for
// any client that is reading, however slowly, to take a 1 MiB value.
const DefaultWriteTimeout = 30 * time.Second

// defaultInflightBytes is Options.MaxInflightBytes's default for a store
// limited to memLimit bytes and items of up to maxItem bytes.
func defaultInflightBytes(memLimit, maxItem int64) int64 {
	return max(memLimit/8, 4<<20, maxItem+2*maxLine)
}

// Server accepts memcached clients and serves them from the engine.
type Server struct {
	eng  *engine.Engine
	opts Options
	log  *slog.Logger

	currConns  atomic.Int64
	totalConns atomic.Int64
	rejected   atomic.Int64

	// bytesRead and bytesWritten count what the door reads from and writes
	// to client sockets, one add per read or write call; metaCmds counts
	// "me" commands, as memcached's cmd_meta does.
	bytesRead, bytesWritten, metaCmds atomic.Int64

	// inflight is what connections hold of the opts.MaxInflightBytes
	// budget (see conn.reserve).
	inflight atomic.Int64

	auth     *authenticator // nil: no authentication
	prefixes prefixStats    // stats detail

	// connIDs numbers listeners and connections for stats conns, where
	// memcached shows file descriptors.
	connIDs atomic.Uint64
	// tooLarge and noMemory are memcached's store_too_large and
	// store_no_memory: values refused as over the item size limit, and for
	// want of memory (the store's or the in-flight budget's).
	tooLarge, noMemory atomic.Int64
	// readBufOOM is memcached's read_buf_oom: requests a read buffer could
	// not be grown for (the in-flight budget was spent).
	readBufOOM           atomic.Int64
	authCmds, authErrors atomic.Int64

	mu struct {
		sync.Mutex
		listeners map[net.Listener]listenerInfo
		conns     map[*conn]struct{}
		closed    bool
	}
	wg sync.WaitGroup
	// loops serve connections without a goroutine each; nil when none do (see startLoops).
	loops        []*eventLoop
	loopsStarted bool // under mu; loops is set once, by the first Serve
	nextLoop     int  // the loop the next connection goes to, under mu
}

// listenerInfo is what stats conns shows of a listener.
type listenerInfo struct {
	id    uint64
	since int64 // Unix seconds when serving began
}

// NewServer returns a door over eng.
func NewServer(eng *engine.Engine, o Options) *Server {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.MaxConnections <= 0 {
		o.MaxConnections = DefaultMaxConnections
	}
	if o.Version == "" {
		o.Version = ProtocolVersion + "-keyway"
	}
	if o.WriteTimeout == 0 {
		o.WriteTimeout = DefaultWriteTimeout
	}
	if o.MaxInflightBytes <= 0 {
		o.MaxInflightBytes = defaultInflightBytes(eng.StoreStats().Limit, eng.MaxItemSize())
	}
	s := &Server{eng: eng, opts: o, log: o.Logger, auth: newAuthenticator(o.Users)}
	s.mu.listeners = make(map[net.Listener]listenerInfo)
	s.mu.conns = make(map[*conn]struct{})
	return s
}

// Serve accepts connections on ln until Shutdown; it returns nil after
// Shutdown. With Options.TLS, ln's connections speak TLS; each handshake runs
// on its connection's goroutine, at the first read.
func (s *Server) Serve(ln net.Listener) error {
	if s.opts.TLS != nil {
		ln = tls.NewListener(ln, s.opts.TLS)
	}
	s.mu.Lock()
	if s.mu.closed {
		s.mu.Unlock()
		ln.Close()
		return nil
	}
	s.mu.listeners[ln] = listenerInfo{id: s.connIDs.Add(1), since: time.Now().Unix()}
	if !s.loopsStarted {
		s.loopsStarted = true
		s.loops = s.startLoops()
	}
	s.mu.Unlock()
	err := sockio.AcceptLoop{
		Closed: s.closing,
		Retry: func(err error) bool {
			var ne net.Error
			return errors.As(err, &ne) && ne.Timeout() || isTemporary(err)
		},
		Retrying: func(err error, backoff time.Duration) {
			s.log.Warn("memcache: accept failed; retrying", "err", err, "backoff", backoff)
		},
	}.Run(ln, func(nc net.Conn) bool {
		if s.currConns.Load() >= int64(s.opts.MaxConnections) {
			// memcached answers and closes when over its connection limit.
			// Over TLS the answer would need a handshake, which must not
			// hold up the accept loop: the connection is just closed.
			s.rejected.Add(1)
			if s.opts.TLS == nil {
				n, _ := nc.Write([]byte("ERROR Too many open connections\r\n"))
				s.bytesWritten.Add(int64(n))
			}
			nc.Close()
			return true
		}
		// Not sockio.Wrap: raw-call reads and writes saved CPU here under many connections but added latency to a
		// lone client's get; why is not known. The SQL door gains on both counts.
		c := newConn(s, nc)
		c.id = s.connIDs.Add(1)
		c.listenAddr = ln.Addr()
		c.remote = nc.RemoteAddr()
		s.mu.Lock()
		if s.mu.closed {
			s.mu.Unlock()
			nc.Close()
			return true
		}
		s.mu.conns[c] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		s.currConns.Add(1)
		s.totalConns.Add(1)
		if s.loops != nil && s.enterLoop(c) {
			return true
		}
		go c.serve()
		return true
	})
	if err != nil {
		s.mu.Lock()
		delete(s.mu.listeners, ln)
		s.mu.Unlock()
	}
	return err
}

// finished forgets a connection that has ended.
func (s *Server) finished(c *conn) {
	s.currConns.Add(-1)
	s.mu.Lock()
	delete(s.mu.conns, c)
	s.mu.Unlock()
	s.wg.Done()
}

func isTemporary(err error) bool {
	var t interface{ Temporary() bool }
	return errors.As(err, &t) && t.Temporary()
}

// Shutdown stops accepting, closes idle client connections after their
// current batch, and waits for them until ctx is done.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.mu.closed = true
	for ln := range s.mu.listeners {
		ln.Close()
	}
	for c := range s.mu.conns {
		// Wake a connection blocked in Read; it finishes what it has and exits.
		// A connection an event loop serves is idle, and its loop closes it, or
		// away from the loop, and its goroutine closes it after answering its batch.
		if c.nc != nil {
			c.nc.SetReadDeadline(time.Now())
		}
	}
	loops := s.loops
	s.mu.Unlock()
	for _, l := range loops {
		l.stop()
	}
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		s.mu.Lock()
		for c := range s.mu.conns {
			if c.nc != nil {
				c.nc.Close()
			}
		}
		s.mu.Unlock()
		for _, l := range loops {
			l.hangUp() // a loop still serving is stuck (a store far behind its disk)
		}
		return ctx.Err()
	}
}

// port is the TCP port of the first listener, for stats settings.
func (s *Server) port() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	for ln := range s.mu.listeners {
		if a, ok := ln.Addr().(*net.TCPAddr); ok {
			return a.Port
		}
	}
	return 0
}

// charge adds n bytes (negative: gives them back) to the in-flight total;
// it refuses, changing nothing, an addition that would pass the budget.
func (s *Server) charge(n int64) bool {
	if n <= 0 {
		s.inflight.Add(n)
		return true
	}
	for {
		cur := s.inflight.Load()
		if cur+n > s.opts.MaxInflightBytes {
			return false
		}
		if s.inflight.CompareAndSwap(cur, cur+n) {
			return true
		}
	}
}

// budgetShort reports whether over half the in-flight budget is taken; idle
// connections then give back the buffers they keep between requests.
func (s *Server) budgetShort() bool {
	return s.inflight.Load() > s.opts.MaxInflightBytes/2
}

func (s *Server) closing() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mu.closed
}
