package sockio

import (
	"io"
	"net"
	"os"
	"syscall"
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

// bind sets the callbacks the poller calls, once per connection: a method value made per call would be an
// allocation per read and write.
func (c *Conn) bind() {
	c.rd.fn, c.wr.fn = c.rd.readOnce, c.wr.writeOnce
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

// readOnce is a read's callback: one raw read into o.p; false (wait in the poller) when there is nothing yet.
func (o *op) readOnce(fd uintptr) bool {
	o.n, o.errno = ReadNow(int(fd), o.p)
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
