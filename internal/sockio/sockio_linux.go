package sockio

import (
	"io"
	"net"
	"os"
	"syscall"
	"time"
	"unsafe"
)

const supported = true

// maxRW is the most one call reads or writes, as in Go's poller (Linux caps a transfer just under 2 GiB).
const maxRW = 1 << 30

// Read reads what the socket holds, waiting in the poller while it holds nothing.
func (c *Conn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	o := &c.rd
	o.mu.Lock()
	o.p, o.n, o.errno = p, 0, 0
	err := c.raw.Read(o.fn)
	n, errno := o.n, o.errno
	o.p = nil // the buffer is the caller's
	o.mu.Unlock()
	switch {
	case err != nil:
		return 0, opError("read", err)
	case errno != 0:
		return 0, c.sysError("read", errno)
	case n == 0:
		return 0, io.EOF
	}
	if c.pooled {
		c.readLast.Store(true)
	}
	return n, nil
}

// Write writes all of p, waiting in the poller whenever the socket's buffer is full.
func (c *Conn) Write(p []byte) (int, error) {
	o := &c.wr
	o.mu.Lock()
	if c.pooled && c.readLast.Swap(false) {
		if err := c.checkIdle(o); err != nil {
			o.mu.Unlock()
			return 0, err
		}
	}
	o.one[0] = p
	o.rest, o.n, o.errno = o.one[:1], 0, 0
	err := c.raw.Write(o.fn)
	n, errno := o.n, o.errno
	o.one[0], o.rest = nil, nil // the buffer is the caller's
	o.mu.Unlock()
	switch {
	case err != nil:
		return n, opError("write", err)
	case errno != 0:
		return n, c.sysError("write", errno)
	}
	return n, nil
}

// WriteThenRead writes all of w, then reads into p what the peer sends after it: it is for a request whose reply
// cannot come before the request is sent (a command to a MySQL server). Read tries once and finds nothing (EAGAIN)
// before it waits in the poller, and right after a request that try always finds nothing: a read syscall per request
// for nothing (the SQL door's relay made 3.5 reads per statement, 2 that found data). Here the write is made inside
// the poller's read, after the poller forgot the readiness it had seen (its reset comes first), so the read can
// wait first: whatever becomes readable after the write wakes it. What the peer sent before the write, nobody asked
// for; a peer that closed the connection is found by the write (EPIPE) or by its answer to it (a reset, which wakes
// the wait).
//
// nw is how much of w was written; on a failed write the read is not attempted and err is the write's. A write the
// socket does not take whole at once is finished as Write does (waiting for room), then the read is an ordinary Read.
func (c *Conn) WriteThenRead(w, p []byte) (nw, nr int, err error) {
	// Nothing to read, no request (a read must try first), or a pooled connection's check due (Write's): as Write
	// and Read.
	if len(p) == 0 || len(w) == 0 || c.pooled && c.readLast.Load() {
		if nw, err = c.Write(w); err == nil && len(p) > 0 {
			nr, err = c.Read(p)
		}
		return nw, nr, err
	}
	o := &c.rd
	o.mu.Lock()
	o.one[0] = w
	o.rest, o.wn, o.werrno = o.one[:1], 0, 0
	o.p, o.n, o.errno = p, 0, 0
	err = c.raw.Read(o.writeFirst)
	nw, werrno, left := o.wn, o.werrno, len(o.rest) > 0
	nr, errno := o.n, o.errno
	o.one[0], o.rest, o.p = nil, nil, nil // the buffers are the caller's
	o.mu.Unlock()
	switch {
	case werrno != 0 && werrno != syscall.EAGAIN:
		return nw, 0, c.sysError("write", werrno)
	case left: // the socket's buffer was full: finish the write as Write does, then read as Read does
		if err == nil {
			var n int
			n, err = c.Write(w[nw:])
			nw += n
		}
		if err != nil {
			return nw, 0, opError("write", err)
		}
		nr, err = c.Read(p)
		return nw, nr, err
	case err != nil:
		return nw, 0, opError("read", err)
	case errno != 0:
		return nw, 0, c.sysError("read", errno)
	case nr == 0:
		return nw, 0, io.EOF
	}
	if c.pooled {
		c.readLast.Store(true)
	}
	return nw, nr, nil
}

// writeFirst is WriteThenRead's callback: its first call writes the request (under the write op's lock, as Write
// would) and, when it went out whole, reports false to wait for the reply; later calls read, as readOnce.
func (c *Conn) writeFirst(fd uintptr) bool {
	o := &c.rd
	if len(o.rest) == 0 {
		return o.readOnce(fd)
	}
	c.wr.mu.Lock()
	n, errno := WriteNow(int(fd), &o.rest, &c.wr.iov)
	c.wr.mu.Unlock()
	o.wn += int(n)
	if errno != 0 || len(o.rest) > 0 { // failed, or the socket is full: WriteThenRead takes it from there
		o.werrno = errno
		return true
	}
	return o.spin(fd) // the reply cannot be there yet: wait for it, spinning first when the Spinner may
}

// bind sets the callbacks the poller calls, once per connection: a method value made per call would be an
// allocation per read and write.
func (c *Conn) bind() {
	c.rd.fn, c.wr.fn = c.rd.readOnce, c.wr.writeOnce
	c.rd.writeFirst = c.writeFirst
	c.rd.poll = c.rd.pollOnce
	c.wr.peek = c.wr.peekOnce
}

// checkIdle is a pooled connection's check before a request (see WrapPooled); the caller holds o, the write op.
func (c *Conn) checkIdle(o *op) error {
	if err := c.raw.Control(o.peek); err != nil {
		return opError("write", err)
	}
	var err error
	switch {
	case o.errno == syscall.EAGAIN: // nothing to read: the connection is as the last response left it
		return nil
	case o.errno != 0:
		return c.sysError("write", o.errno)
	case o.n == 0:
		err = ErrClosedWhileIdle
	default:
		err = ErrSentWhileIdle
	}
	return &net.OpError{Op: "write", Net: c.LocalAddr().Network(), Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: err}
}

// peekOnce peeks at one byte of the socket without taking it and without waiting, with a raw call.
func (o *op) peekOnce(fd uintptr) {
	for {
		r, _, e := syscall.RawSyscall6(syscall.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&o.b[0])), 1,
			syscall.MSG_PEEK|syscall.MSG_DONTWAIT, 0, 0)
		if e == syscall.EINTR {
			continue
		}
		o.n, o.errno = int(r), e
		return
	}
}

// readOnce is a read's callback: one raw read into o.p; false (wait in the poller) when there is nothing yet, after
// a spin when the connection has a Spinner that may.
func (o *op) readOnce(fd uintptr) bool {
	o.n, o.errno = ReadNow(int(fd), o.p)
	if o.errno != syscall.EAGAIN {
		if s := o.spinner; s != nil && !s.waitedFrom.IsZero() {
			s.Budget.Blocked(time.Since(s.waitedFrom))
			s.waitedFrom = time.Time{}
		}
		return true
	}
	return o.spin(fd)
}

// spin spins for the data a read waits for, when the op's Spinner may now, and reports whether it came (o.n and
// o.errno are the read's then).
func (o *op) spin(fd uintptr) bool {
	s := o.spinner
	if s == nil || s.Gate == nil || s.stopped.Load() || !s.Gate.TrySpin(s.Who, s.MaxBusy) {
		return false
	}
	o.fd = fd
	found, spun := s.Budget.Wait(o.poll)
	s.Gate.Done()
	if spun && !found {
		s.waitedFrom = time.Now()
	}
	return found && o.errno != syscall.EAGAIN // stopped: to the poller, which sees the deadline
}

// pollOnce is a spin's look: one raw read into o.p; true when it found data, end-of-file or an error, or the
// Spinner was stopped.
func (o *op) pollOnce() bool {
	if o.spinner.stopped.Load() {
		o.n, o.errno = 0, syscall.EAGAIN
		return true
	}
	o.n, o.errno = ReadNow(int(o.fd), o.p)
	return o.errno != syscall.EAGAIN
}

// writeOnce is a write's callback: raw writes of what is left of it; false (wait in the poller) when the socket's
// buffer is full.
func (o *op) writeOnce(fd uintptr) bool {
	n, errno := WriteNow(int(fd), &o.rest, &o.iov)
	o.n += int(n)
	if errno == syscall.EAGAIN {
		return false
	}
	o.errno = errno
	return true
}

// sysError is the error net.Conn gives for a failed system call.
func (c *Conn) sysError(op string, errno syscall.Errno) error {
	return &net.OpError{Op: op, Net: c.LocalAddr().Network(), Source: c.LocalAddr(), Addr: c.RemoteAddr(),
		Err: os.NewSyscallError(op, errno)}
}

// ReadNow reads once from the non-blocking socket fd into p, with a raw call: n is -1 on an error (EAGAIN when
// there is nothing to read), 0 at end of stream.
func ReadNow(fd int, p []byte) (n int, errno syscall.Errno) {
	if len(p) == 0 {
		return 0, 0
	}
	for {
		r, _, e := syscall.RawSyscall(syscall.SYS_READ, uintptr(fd), uintptr(unsafe.Pointer(&p[0])), uintptr(min(len(p), maxRW)))
		if e == syscall.EINTR {
			continue
		}
		if e != 0 {
			return -1, e
		}
		return int(r), 0
	}
}

// WriteNow writes v to the non-blocking socket fd with raw writev calls until all of it is written or the socket
// is full (EAGAIN), and consumes what it wrote from v. iov is the caller's scratch for the iovecs, kept between
// calls so that a write allocates nothing; WriteNow clears what it put there.
func WriteNow(fd int, v *net.Buffers, iov *[]syscall.Iovec) (written int64, errno syscall.Errno) {
	for len(*v) > 0 {
		vec := (*iov)[:0]
		for _, b := range (*v)[:min(len(*v), maxIovecs)] {
			if len(b) > 0 {
				vec = append(vec, syscall.Iovec{Base: &b[0], Len: uint64(min(len(b), maxRW))})
			}
		}
		*iov = vec
		if len(vec) == 0 {
			*v = nil
			return written, 0
		}
		r, _, e := syscall.RawSyscall(syscall.SYS_WRITEV, uintptr(fd), uintptr(unsafe.Pointer(&vec[0])), uintptr(len(vec)))
		clear(vec) // the buffers are the caller's: hold no reference to them
		switch e {
		case 0:
			written += int64(r)
			consume(v, int(r))
		case syscall.EINTR:
		default:
			return written, e
		}
	}
	return written, 0
}

// maxIovecs is the most buffers one writev takes (IOV_MAX).
const maxIovecs = 1024

// consume drops the first n bytes of v.
func consume(v *net.Buffers, n int) {
	for len(*v) > 0 {
		if b := (*v)[0]; len(b) > n {
			(*v)[0] = b[n:]
			return
		} else {
			n -= len(b)
		}
		(*v)[0] = nil
		*v = (*v)[1:]
	}
}
