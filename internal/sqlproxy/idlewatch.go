package sqlproxy

// The idle watch: a session whose backend connection holds state (pinned, or with prepared statements) cannot be
// moved to another connection, so when the server closes that connection while the client is idle (wait_timeout,
// KILL, a restart) the client's connection must close too. It closes at once, as the server's close would reach a
// client connected directly: a driver that checks a pooled connection before using it (go-sql-driver's
// checkConnLiveness, PHP's mysqlnd) then sees it closed and takes a new one, instead of sending its next statement
// into a session that is already gone and getting an error it does not retry.
//
// Cost and safety:
//   - A stateful session marks its wait for the client's next command with one atomic store, and ends it with one
//     atomic swap: no timer, goroutine, system call or allocation per command. One goroutine per Server
//     (watchIdle) looks at the marks every idleWatchTick; a session found waiting in the same wait at two ticks in
//     a row gets a watcher goroutine. Unpinned sessions are not watched: they reconnect by themselves
//     (freshBackend).
//   - The watcher never reads the backend connection: it waits for the socket to become readable and peeks
//     (MSG_PEEK), so it consumes nothing. Nothing is ever due from an idle backend connection: anything readable
//     (end-of-file, the ERR a server sends before closing, TLS's close_notify) means it is gone.
//   - The session stops the watch as soon as its read of the client returns, before it touches the backend
//     connection again, and waits for a watcher to return (a read deadline on the backend socket wakes it). A
//     command that arrives just as the watcher finds the backend gone loses the race cleanly: the watcher decided
//     first (under idleWatch.mu), the client's connection is closed and the command is not sent. Else the watcher
//     stands down and the command goes on as it would have.

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/keywaydb/keyway/internal/backend"
)

// idleWatchTick is how often watchIdle looks for sessions waiting for their client: a stateful session's backend
// connection is watched after one to two ticks of idleness. A server closes an idle connection after wait_timeout
// (a second at least), so the watch is in place by then; a close sooner (KILL, a restart) is noticed within two
// ticks.
const idleWatchTick = 50 * time.Millisecond

// The bits of idleWatch.state below the wait's number.
const (
	waitingClient = 1 << iota // the session waits for its client's next command
	watched                   // a watcher goroutine was started for this wait
	waitShift     = iota
)

// idleWatch is a session's part in the idle watch (see the file comment).
type idleWatch struct {
	// state is gen<<waitShift | waitingClient [| watched] while the session waits for its client (stateful sessions
	// only), else 0. The session stores and swaps it; watchIdle sets watched by compare-and-swap.
	state atomic.Uint64
	gen   uint64        // the number of the session's current wait (the session's goroutine)
	seen  uint64        // state at watchIdle's last look (watchIdle's goroutine)
	be    *backend.Conn // the connection to watch, published by the store of state
	exit  chan struct{} // a watcher's end, one token each

	mu struct {
		sync.Mutex
		stopped bool // the session ended the wait: the watcher must not act on what it sees
	}
	// gone is set by the watcher when it found the backend connection closed and closed the client's; the session
	// reads it after the watcher's exit.
	gone bool
}

// armWatch marks the session's wait for its client's next command, when the session has state on its backend
// connection. It reports whether it did (then stopWatch must follow the read).
func (ss *session) armWatch() bool {
	if ss.be == nil {
		return false
	}
	if pinned, _ := ss.pinned(); !pinned { // prepared statements pin too (PinStatements)
		return false
	}
	w := &ss.watch
	if w.exit == nil {
		w.exit = make(chan struct{}, 1)
	}
	w.be = ss.be
	w.gen++
	w.state.Store(w.gen<<waitShift | waitingClient)
	return true
}

// stopWatch ends the wait armWatch marked, once the client's read returned, and reports whether a watcher found
// the backend connection gone (the client's connection is then closed, and the session must end).
func (ss *session) stopWatch() bool {
	w := &ss.watch
	if w.state.Swap(0)&watched == 0 {
		return false // no watcher, and watchIdle can no longer start one for this wait
	}
	// A watcher runs (or is about to): tell it to stand down, wake it from its wait, and wait for its end.
	w.mu.Lock()
	w.mu.stopped = true
	w.mu.Unlock()
	nc := w.be.NetConn()
	_ = nc.SetReadDeadline(time.Unix(1, 0))
	<-w.exit
	_ = nc.SetReadDeadline(time.Time{})
	w.mu.Lock()
	w.mu.stopped = false
	w.mu.Unlock()
	return w.gone
}

// watchIdle starts a watcher for each stateful session found waiting for its client in the same wait at two
// looks in a row, until stop is closed.
func (s *Server) watchIdle(stop <-chan struct{}) {
	t := time.NewTicker(idleWatchTick)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		s.mu.Lock()
		for ss := range s.mu.sessions {
			w := &ss.watch
			v := w.state.Load()
			if v&waitingClient != 0 && v&watched == 0 && v == w.seen && w.state.CompareAndSwap(v, v|watched) {
				go w.run(ss)
			}
			w.seen = v
		}
		s.mu.Unlock()
	}
}

// run is a watcher: it waits until the backend connection becomes readable, or the session stops it, and when the
// connection is gone closes the client's.
func (w *idleWatch) run(ss *session) {
	defer func() { w.exit <- struct{}{} }()
	w.mu.Lock()
	stopped := w.mu.stopped
	w.mu.Unlock()
	if stopped || !w.be.WaitReadable() {
		return
	}
	w.mu.Lock()
	if w.mu.stopped { // the client's command came first: it goes on, and meets the closed connection itself
		w.mu.Unlock()
		return
	}
	w.gone = true
	w.mu.Unlock()
	_ = ss.nc.Close()
}
