package memcache

// Event loops: connections served without a goroutine each.
//
// A goroutine per connection costs, per request, a read that finds nothing
// (EAGAIN) before the goroutine parks, the park itself and the wake-up through
// Go's poller, which hands the goroutine to whichever thread is free; that is
// what made keyway's CPU per request exceed memcached's. An event loop does
// what memcached's worker threads
// do: it waits on epoll for any of its connections to be readable, reads once
// (level-triggered: what it does not read is reported again), answers every
// complete request and writes the replies in one write, on its own goroutine.
//
// Invariants:
//   - A loop waits on nothing but its clients, or on what would make every
//     connection wait anyway: loops serve plain TCP only, with a store that
//     does not wait for the disk per write (sync durability). An async store
//     makes a writer wait only once the disk has fallen far behind (store's
//     maxPendingBytes); a loop then waits with it, readers included, until the
//     disk catches up. The server decides once, when it starts serving
//     (startLoops).
//   - A command that may wait on more than its client (engine.MayWait: a
//     container's table, its group commit, the write-behind queue's room), a
//     get that the engine says will wait (WillWait, told before a read of a
//     row with no valid copy held), or a command that takes long whatever the
//     client does (a walk of the whole store: lru_crawler metadump, stats
//     cachedump) does not wait on the loop: before it waits, the connection
//     steps away (stepAway). Another goroutine takes over
//     running the loop (a spare, or a new one), and the goroutine that was
//     running it answers the rest of the connection's batch as the
//     connection's own, gives it back (comeBack) and waits as a spare. A connection away from its loop stays in conns (so
//     hangUp reaches it) and in the epoll set, but only its own goroutine
//     touches it: input that comes meanwhile makes the loop take it out of the
//     set (disarmed) until it comes back; shut leaves it to its goroutine,
//     which closes it when it finds the loop stopped. A connection that steps
//     away for awayStreakLimit batches in a row leaves the loop for a
//     goroutine of its own, and comes back once quietToReturn batches in a
//     row had no command that may wait (backToLoop).
//     MayWait's "no" is a guess about the moment (an async queue's room can
//     run out before the set runs); a wrong guess makes the loop wait once,
//     which is slower for its other connections, never wrong.
//   - A write the socket does not take whole means the client reads slower than
//     it asks. The connection then leaves its loop for good (leaveLoop): the
//     goroutine that was running the loop keeps the connection, finishes its
//     batch with blocking writes under the write timeout, and goes on serving it
//     as a goroutine-per-connection; a new goroutine takes over the loop first.
//     So no client holds up a loop's other connections for longer than one
//     non-blocking write.
//   - Only the goroutine running a loop reads its epoll set, its connections and
//     their buffers; conns (the fd → connection map) is shared with the accept
//     goroutines under mu. The epoll set holds the connections in conns, less
//     those the loop disarmed while they were away.
//   - Shutdown wakes each loop (eventfd); the loop closes its connections,
//     which are idle between batches, and exits. A connection arriving after
//     that is closed at once.
//
// Where a loop waits (Options.LoopThreads). By default it waits in Go's poller:
// its epoll set is itself pollable, so the goroutine parks and the runtime's
// own epoll wakes it, on whichever thread polled. Each wake-up then costs the
// runtime's scheduling (findRunnable, and an epoll_pwait of the runtime's for
// the nested set besides the loop's own): with one sequential client, much
// of keyway's CPU per request goes to the scheduler, most of it in epoll_pwait.
// With LoopThreads, the goroutine running a loop keeps its thread and waits in
// epoll_pwait itself, as memcached's workers do, and the kernel wakes that
// thread. A thread in a long system call still holds its P, and the runtime's
// monitor takes the P back (then wakes a thread to spin on it) whenever no P
// is idle; so the owner of the process gives the runtime one P more than it
// has loops (package server does), which keeps one idle while the loops wait.
// A loop with no connection keeps no thread: it parks (parkWhileEmpty) until
// one comes, and says so (Options.OnLoopThread), so that while no loop keeps a
// thread the P more goes too (its goroutines would otherwise run on more Ps
// than there are CPUs). A connection's leaving wakes a loop left empty.

import (
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/keywaydb/keyway/internal/spin"

	"github.com/keywaydb/keyway/internal/sockio"
)

// eventLoop is one epoll loop and the connections it serves.
type eventLoop struct {
	srv   *Server
	epfd  int
	ep    *os.File        // owns epfd when the loop waits in Go's poller; nil with a thread of its own
	ready syscall.RawConn // epfd in Go's poller: readable when a connection (or wake) is; nil with ep
	wake  int             // eventfd: written to stop the loop

	mu     sync.Mutex
	conns  map[int]*conn // by socket fd; a connection away from the loop (stepAway) too
	closed bool          // stop was called: no connection is added any more

	stepsAway atomic.Uint64 // commands answered away from the loop (stepAway)
	// lone says the loop serves exactly one connection (set under mu): only then does it spin before it blocks
	// (Options.LoopSpin; see readyWait.spinWait).
	lone atomic.Bool

	// takeOver hands the loop to a spare: a goroutine that no longer runs the loop (stepAway, leaveLoop) and is done
	// with its connection waits on it to run the loop again (up to maxSpares of them wait; spares counts them), so a
	// hand-over reuses a goroutine and the stack it grew instead of starting one. shutDown is closed when the loop
	// stops, and lets them end.
	takeOver chan struct{}
	spares   atomic.Int32
	shutDown chan struct{}

	// Used only by the goroutine running the loop: the state of its waits with their poller callback, bound once (a
	// goroutine that takes the loop over after another stepped away reuses them).
	wait readyWait
	take func(uintptr) bool

	// A loop with a thread of its own parks while it has no connection (parkWhileEmpty): parked says so (under mu),
	// and rouse (one token) wakes it when a connection is added or the loop stops. holdsThread, used only by the
	// goroutine running the loop, says whether the loop counts as keeping a thread (Options.OnLoopThread).
	parked      bool
	rouse       chan struct{}
	holdsThread bool
}

// startLoops starts the event loops when the server's connections qualify (see the invariants); nil when they do
// not, or when epoll cannot be had (connections then get a goroutine each).
func (s *Server) startLoops() []*eventLoop {
	n := s.opts.EventLoops
	if n < 0 || s.opts.TLS != nil || s.eng.WaitsForDisk() {
		return nil
	}
	if n == 0 {
		n = runtime.GOMAXPROCS(0)
	}
	loops := make([]*eventLoop, 0, n)
	for range n {
		l, err := newEventLoop(s)
		if err != nil {
			s.log.Warn("memcache: no event loop; a goroutine serves each connection", "err", err)
			for _, l := range loops {
				l.stop()
			}
			return nil
		}
		loops = append(loops, l)
		go l.run()
	}
	return loops
}

func newEventLoop(s *Server) (*eventLoop, error) {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, os.NewSyscallError("epoll_create1", err)
	}
	l := &eventLoop{srv: s, epfd: epfd, wake: -1, conns: make(map[int]*conn),
		takeOver: make(chan struct{}), shutDown: make(chan struct{}), rouse: make(chan struct{}, 1)}
	if !s.opts.LoopThreads {
		// The loop waits for its epoll set in Go's poller (the set is itself pollable). A loop with a thread of its
		// own stays out of it: the poller would be woken by every event the loop's thread waits for.
		if err := unix.SetNonblock(epfd, true); err != nil {
			unix.Close(epfd)
			return nil, os.NewSyscallError("fcntl", err)
		}
		l.ep = os.NewFile(uintptr(epfd), "epoll") // owns epfd from here
		l.ready, err = l.ep.SyscallConn()
		if err == nil {
			err = l.ep.SetReadDeadline(time.Time{}) // os.ErrNoDeadline: the poller could not take the set
		}
		if err != nil {
			l.closeDescriptors()
			return nil, fmt.Errorf("epoll set in Go's poller: %w", err)
		}
	}
	if l.wake, err = unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK); err != nil {
		l.closeDescriptors()
		return nil, os.NewSyscallError("eventfd", err)
	}
	if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, l.wake, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(l.wake)}); err != nil {
		l.closeDescriptors()
		return nil, os.NewSyscallError("epoll_ctl", err)
	}
	l.wait = readyWait{epfd: epfd, events: make([]unix.EpollEvent, 128), spin: spin.Budget{Base: s.opts.LoopSpin}}
	l.take = l.wait.take // a closure made per wait would be an allocation per wait
	return l, nil
}

// enterLoop hands a new connection to the next event loop; false (nothing changed) when the connection cannot be
// served by one, and needs a goroutine.
func (s *Server) enterLoop(c *conn) bool {
	nc := c.nc
	if w, ok := nc.(*sockio.Conn); ok { // a connection that left its loop (leaveLoop)
		nc = w.Conn
	}
	tc, ok := nc.(*net.TCPConn)
	if !ok {
		return false
	}
	// The loop's socket is a duplicate of the connection's; closing the connection takes it out of Go's poller.
	raw, err := tc.SyscallConn()
	if err != nil {
		return false
	}
	fd := -1
	var derr error
	if err := raw.Control(func(sfd uintptr) { fd, derr = unix.FcntlInt(sfd, unix.F_DUPFD_CLOEXEC, 0) }); err != nil || derr != nil {
		return false
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return false
	}
	s.mu.Lock()
	l := s.loops[s.nextLoop]
	s.nextLoop = (s.nextLoop + 1) % len(s.loops)
	if l.stopped() && !s.mu.closed {
		// The loop failed (epoll_wait): this connection gets a goroutine.
		s.mu.Unlock()
		unix.Close(fd)
		return false
	}
	c.nc, c.fd, c.loop = nil, fd, l // Shutdown reads nc under mu
	s.mu.Unlock()
	tc.Close()
	if !c.readyToRead() || !l.add(c) {
		c.end()
	}
	return true
}

// add registers c with the loop; false when the loop has stopped.
func (l *eventLoop) add(c *conn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return false
	}
	if err := epollCtl(l.epfd, unix.EPOLL_CTL_ADD, c.fd, connEvents); err != nil {
		l.srv.log.Warn("memcache: epoll_ctl failed; closing the connection", "remote", addrName(c.remote), "err", err)
		return false
	}
	l.conns[c.fd] = c
	l.lone.Store(len(l.conns) == 1)
	l.rouseLocked()
	return true
}

// wakeLocked makes the loop's wait return (its eventfd becomes readable until the loop reads it); the caller holds mu.
func (l *eventLoop) wakeLocked() {
	var one [8]byte
	one[0] = 1 // eventfd counters are native-endian; any non-zero value wakes
	unix.Write(l.wake, one[:])
}

// rouseLocked wakes the loop if it is parked (parkWhileEmpty); the caller holds mu.
func (l *eventLoop) rouseLocked() {
	if l.parked {
		l.parked = false
		select {
		case l.rouse <- struct{}{}:
		default:
		}
	}
}

// remove takes c out of the loop and closes its socket.
func (l *eventLoop) remove(c *conn) {
	l.detach(c)
	unix.Close(c.fd)
	c.fd, c.loop = -1, nil
}

// detach takes c out of the loop, leaving its socket open.
func (l *eventLoop) detach(c *conn) {
	l.mu.Lock()
	if l.conns[c.fd] == c {
		delete(l.conns, c.fd)
		l.lone.Store(len(l.conns) == 1)
		epollCtl(l.epfd, unix.EPOLL_CTL_DEL, c.fd, 0)
		if len(l.conns) == 0 && l.ownThread() && !l.closed { // closed: wake may be closed, its number someone else's
			l.wakeLocked() // the loop may be waiting in epoll_pwait: it parks instead (parkWhileEmpty)
		}
	}
	l.mu.Unlock()
}

// stopped reports whether the loop was stopped or failed.
func (l *eventLoop) stopped() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.closed
}

// hangUp shuts down the sockets of the loop's connections (shutdown(2), not close: the loop still owns the
// descriptors), so a loop that is stuck finds them failed once it runs again, and their clients are let go now.
func (l *eventLoop) hangUp() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for fd := range l.conns {
		unix.Shutdown(fd, unix.SHUT_RDWR)
	}
}

// stop makes the loop close its connections and exit; connections added later are refused.
func (l *eventLoop) stop() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return // stopped before, or shut by a failure: wake may be closed, its number someone else's
	}
	l.closed = true
	l.wakeLocked()
	l.rouseLocked() // a parked loop finds the wake once it waits again
}

// run waits for readable connections and answers them, until stop. A goroutine that leaves the loop with a
// connection (leaveLoop, stepAway) runs it again when, done with that connection, it waits as a spare and is handed
// the loop back (handOver).
func (l *eventLoop) run() {
	for l.runUntilLeft() && l.waitAsSpare() {
	}
}

// maxSpares bounds the goroutines that wait to take a loop over (see eventLoop.takeOver).
const maxSpares = 4

// handOver gives the loop to a spare goroutine, or to a new one when none waits; the caller runs it no more, and
// gives back the thread runUntilLeft kept.
func (l *eventLoop) handOver() {
	if l.ownThread() {
		runtime.UnlockOSThread()
	}
	select {
	case l.takeOver <- struct{}{}:
	default:
		go l.run()
	}
}

// waitAsSpare makes a goroutine that left the loop, and is done with the connection it left with, wait to run the
// loop again (handOver). It reports false, and the goroutine ends, when the loop stopped or enough spares wait.
func (l *eventLoop) waitAsSpare() bool {
	if l.spares.Add(1) > maxSpares {
		l.spares.Add(-1)
		return false
	}
	defer l.spares.Add(-1)
	select {
	case <-l.takeOver:
		return true
	case <-l.shutDown:
		return false
	}
}

// runUntilLeft runs the loop until it stops (false) or the goroutine leaves it with a connection and has served
// that connection as far as it had to (true): another goroutine runs the loop by then.
func (l *eventLoop) runUntilLeft() bool {
	if l.ownThread() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread() // a no-op once handOver gave the thread back
	}
	w := &l.wait
	// A loop taken over may have no connection left, and one left empty since is woken (detach): only then does it
	// look whether to park, not before every wait.
	mayPark := l.ownThread()
	for {
		if mayPark {
			l.parkWhileEmpty()
			mayPark = false
		}
		err := l.await()
		if err != nil {
			l.srv.log.Error("memcache: epoll_pwait failed; closing the loop's connections", "err", err)
			l.shut()
			return false
		}
		for _, ev := range w.events[:w.n] {
			fd := int(ev.Fd)
			if fd == l.wake {
				l.mu.Lock()
				closed := l.closed
				l.mu.Unlock()
				if closed {
					l.shut()
					return false
				}
				var count [8]byte
				unix.Read(l.wake, count[:]) // reset: woken to park (detach), the wait must not find it again
				mayPark = l.ownThread()
				continue
			}
			l.mu.Lock()
			c := l.conns[fd]
			if c != nil && c.away {
				// Input came while the connection is answered away from the loop: out of the set until it comes
				// back (level-triggered, it would be reported on every wait).
				epollCtl(l.epfd, unix.EPOLL_CTL_DEL, fd, 0)
				c.disarmed, c = true, nil
			}
			l.mu.Unlock()
			if c != nil && l.serve(c) {
				return true
			}
		}
	}
}

// parkWhileEmpty parks the goroutine running a loop that keeps a thread of its own (LoopThreads) while the loop has
// no connection, with neither its thread nor a P kept, and tells Options.OnLoopThread when the loop stops or starts
// keeping one. Why: blocked in epoll_pwait, a loop's thread holds a P, which is why the process is given a P more
// than it has loops; with no connection in any loop (every client's commands wait on MySQL as a rule, so each has
// left its loop for a goroutine: sync containers), that P more only runs goroutines on more Ps than there are CPUs,
// which costs those clients' requests CPU for nothing.
func (l *eventLoop) parkWhileEmpty() {
	l.mu.Lock()
	empty := len(l.conns) == 0 && !l.closed
	l.parked = empty
	l.mu.Unlock()
	if !empty {
		l.keepThread(true)
		return
	}
	l.keepThread(false)
	runtime.UnlockOSThread()
	<-l.rouse // add and stop clear parked before they send
	runtime.LockOSThread()
	l.mu.Lock()
	closed := l.closed
	l.mu.Unlock()
	if !closed { // a stopping loop finds its wake next and shuts: it keeps no thread for that
		l.keepThread(true)
	}
}

// keepThread tells Options.OnLoopThread that the loop keeps a thread of its own from now (true) or no longer does,
// when that changes.
func (l *eventLoop) keepThread(keep bool) {
	if l.holdsThread == keep {
		return
	}
	l.holdsThread = keep
	if f := l.srv.opts.OnLoopThread; f != nil {
		f(keep)
	}
}

// ownThread reports whether the loop waits on a thread of its own (LoopThreads; see the top of this file) rather
// than in Go's poller.
func (l *eventLoop) ownThread() bool { return l.ep == nil }

// await waits until the loop's epoll set holds something ready, and leaves it in l.wait: in Go's poller, or in
// epoll_pwait on the loop's own thread (LoopThreads).
func (l *eventLoop) await() error {
	w := &l.wait
	var err error
	if l.ownThread() {
		w.block(l.lone.Load()) // returns at once when something is ready: no need to look first, as the poller's callback must
	} else {
		err = l.ready.Read(l.take)
	}
	if err == nil && w.errno != 0 {
		err = os.NewSyscallError("epoll_pwait", w.errno)
	}
	return err
}

// readyWait is the state of run's waits: one per loop, so its poller callback is made once.
type readyWait struct {
	epfd   int
	events []unix.EpollEvent
	n      int // events ready, from the last take or block
	errno  syscall.Errno
	// spin is the spin before a blocking wait (package spin; its Base is Options.LoopSpin), and poll its look at
	// the set, made once.
	spin spin.Budget
	poll func() bool
}

// take is run's poller callback: it fills events with what the epoll set holds ready, without waiting (a raw
// epoll_pwait with no timeout), and reports false, to wait in the poller, when nothing is.
func (w *readyWait) take(uintptr) bool {
	for {
		n, _, errno := syscall.RawSyscall6(syscall.SYS_EPOLL_PWAIT, uintptr(w.epfd),
			uintptr(unsafe.Pointer(&w.events[0])), uintptr(len(w.events)), 0, 0, 0)
		if errno != syscall.EINTR {
			w.n, w.errno = int(n), errno
			return w.n > 0 || errno != 0
		}
	}
}

// block waits in epoll_pwait, with no timeout, until the set holds something ready or the call fails: a blocking
// system call, made on the thread runUntilLeft keeps (LoopThreads). With maySpin (the loop serves one connection)
// it spins first (spinWait).
func (w *readyWait) block(maySpin bool) {
	spun := false
	if maySpin {
		var found bool
		if found, spun = w.spinWait(); found {
			return
		}
	}
	var start time.Time
	if spun {
		start = time.Now()
	}
	for {
		n, _, errno := syscall.Syscall6(syscall.SYS_EPOLL_PWAIT, uintptr(w.epfd),
			uintptr(unsafe.Pointer(&w.events[0])), uintptr(len(w.events)), ^uintptr(0) /* -1: no timeout */, 0, 0)
		if errno != syscall.EINTR {
			w.n, w.errno = int(n), errno
			break
		}
	}
	if spun {
		w.spin.Blocked(time.Since(start))
	}
}

// spinWait looks at the set, without waiting, again and again for the spin's length (package spin says how long,
// and when a loop backs off), and reports whether it found something ready (or a failure) in time, and whether it
// spun at all. Only a loop with one connection spins (block's caller decides): with several connections per loop,
// spins took CPU time their clients needed, and a loop with several connections finds one ready without waiting
// more often anyway.
func (w *readyWait) spinWait() (found, spun bool) {
	if w.poll == nil {
		w.poll = func() bool { return w.take(0) }
	}
	return w.spin.Wait(w.poll)
}

// shut closes every connection of a loop that is stopping, and the loop's own descriptors.
func (l *eventLoop) shut() {
	l.mu.Lock()
	l.closed = true
	conns := make([]*conn, 0, len(l.conns))
	for _, c := range l.conns {
		if !c.away { // its own goroutine closes it (comeBack)
			conns = append(conns, c)
		}
	}
	l.mu.Unlock()
	for _, c := range conns {
		c.end()
	}
	l.closeDescriptors()
	l.keepThread(false)
	close(l.shutDown)
}

// closeDescriptors closes the loop's epoll set and its eventfd.
func (l *eventLoop) closeDescriptors() {
	if l.ep != nil {
		l.ep.Close()
	} else {
		unix.Close(l.epfd)
	}
	if l.wake >= 0 {
		unix.Close(l.wake)
	}
}

// serve reads what c has sent and answers it. It reports true when the goroutine no longer runs the loop: c left
// it (a write would have blocked, or its commands wait as a rule), and the goroutine has served c until it ended or
// went back to a loop; or c stepped away for a command that may wait, and the goroutine has answered c's batch and
// put c back (or closed it).
func (l *eventLoop) serve(c *conn) (left bool) {
	defer func() {
		if r := recover(); r != nil {
			c.logPanic(r)
			left = c.loop == nil || c.away
			c.end()
		}
	}()
	n, errno := sockio.ReadNow(c.fd, c.rbuf[c.rend:])
	if errno == unix.EAGAIN {
		return false
	}
	if n < 0 {
		n = 0
	}
	open := c.answer(n) && errno == 0 && n > 0 && c.readyToRead()
	switch {
	case c.loop == nil:
		// The connection left the loop while answering; this goroutine is its own now.
		if !open || !c.serveLoop() {
			c.end()
		}
		return true
	case c.away:
		c.awayStreak++
		switch {
		case !open:
			c.end()
		case c.awayStreak < awayStreakLimit:
			c.comeBack()
		case c.leaveLoop() == nil:
			c.waits = true
			if !c.serveLoop() {
				c.end()
			}
		default:
			c.end() // it could not leave the loop (leaveLoop)
		}
		return true
	}
	c.awayStreak = 0
	if !open {
		c.end()
	}
	return false
}

// awayStreakLimit is how many batches in a row a connection may answer away from its loop (stepAway) before it
// leaves the loop for a goroutine of its own (leaveLoop; it may come back, see quietToReturn): a client that waits on
// MySQL as a rule (sync sets, reads of rows not cached) is served for less by its own goroutine than by a hand-over
// of the loop per batch.
const awayStreakLimit = 8

// stepAway makes the goroutine running c's loop c's own until c's batch is answered (see the invariants): the loop
// is handed over to another goroutine, and leaves c alone until comeBack. It does nothing for a connection no loop
// serves, or one away.
func (c *conn) stepAway() {
	l := c.loop
	if l == nil || c.away {
		return
	}
	l.mu.Lock()
	c.away = true // under mu: the loop and shut read it
	l.mu.Unlock()
	l.stepsAway.Add(1)
	l.handOver()
}

// comeBack gives c, answered away from its loop, back to the loop, putting it back in the epoll set if the loop took
// it out (input came meanwhile, which is then reported at once: level-triggered). A loop that stopped meanwhile left
// c to this goroutine: c is closed.
func (c *conn) comeBack() {
	l := c.loop
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		c.end()
		return
	}
	var err error
	if c.disarmed {
		if err = epollCtl(l.epfd, unix.EPOLL_CTL_ADD, c.fd, connEvents); err == nil {
			c.disarmed = false
		}
	}
	if err == nil {
		c.away = false // the loop finds c only under mu, which this goroutine lets go of last
	}
	l.mu.Unlock()
	if err != nil {
		l.srv.log.Warn("memcache: epoll_ctl failed; closing the connection", "remote", addrName(c.remote), "err", err)
		c.end()
	}
}

// leaveLoop moves the connection from its event loop to the calling goroutine, and the connection goes on as a
// net.Conn (see the invariants). The caller runs the loop, which it hands over, or, when the connection is away,
// runs it no more already.
//
// The net.Conn reads and writes with raw system calls (sockio): a connection that leaves its loop waits on MySQL as a
// rule, and each of its requests went idle twice (waiting for MySQL, then for the client), so each blocking-style
// call after a wait woke the runtime's sysmon thread from its deep sleep (entersyscall does), which then polled every
// 20 µs while the request ran. Raw calls leave sysmon asleep: fewer thread switches and less scheduling delay per
// request.
func (c *conn) leaveLoop() error {
	l := c.loop
	l.detach(c)
	f := os.NewFile(uintptr(c.fd), "")
	nc, err := net.FileConn(f) // a duplicate, in Go's poller
	f.Close()
	c.fd, c.loop = -1, nil
	if !c.away { // away: another goroutine runs the loop already
		l.handOver()
	}
	// Out of the loop and its epoll set (detach): a loop that takes it again (backToLoop) starts from scratch.
	c.away, c.disarmed, c.awayStreak = false, false, 0
	if err != nil {
		// Nothing to serve the connection with: it ends (its socket is closed).
		return errors.Join(errors.New("memcache: a connection could not leave its event loop"), err)
	}
	c.srv.mu.Lock()
	c.nc = sockio.Wrap(nc)
	closing := c.srv.mu.closed
	c.srv.mu.Unlock()
	if closing {
		nc.SetReadDeadline(time.Now())
	}
	return nil
}

// connEvents are what a loop waits for on a connection: input, or the client's end.
const connEvents = unix.EPOLLIN | unix.EPOLLRDHUP

// epollCtl is unix.EpollCtl as a raw system call: it never blocks, so it needs none of the runtime's bookkeeping for
// one that might (which costs a loop's hand-overs more than the call itself).
func epollCtl(epfd, op, fd int, events uint32) error {
	ev := unix.EpollEvent{Events: events, Fd: int32(fd)}
	_, _, errno := syscall.RawSyscall6(syscall.SYS_EPOLL_CTL, uintptr(epfd), uintptr(op), uintptr(fd), uintptr(unsafe.Pointer(&ev)), 0, 0)
	if errno != 0 {
		return os.NewSyscallError("epoll_ctl", errno)
	}
	return nil
}

// writeNow writes vec to the non-blocking socket c.fd until it is written or the socket is full, and returns what it
// could not write yet. Reads and writes on a loop's sockets are raw system calls (sockio): the runtime's syscall
// entry and exit would cost the loop CPU for a hand-off that never happens.
func (c *conn) writeNow(vec net.Buffers) (rest net.Buffers, written int64, err error) {
	written, errno := sockio.WriteNow(c.fd, &vec, &c.iov)
	if errno != 0 && errno != unix.EAGAIN {
		return vec, written, os.NewSyscallError("writev", errno)
	}
	return vec, written, nil
}
