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
	p = p[:min(len(p), maxRW)]
	var n int
	var errno syscall.Errno
	err := c.raw.Read(func(fd uintptr) bool {
		for {
			r, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
			switch e {
			case syscall.EINTR:
				continue
			case syscall.EAGAIN:
				return false
			}
			n, errno = int(r), e
			return true
		}
	})
	switch {
	case err != nil:
		return 0, opError("read", err)
	case errno != 0:
		return 0, c.sysError("read", errno)
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

// Write writes all of p, waiting in the poller whenever the socket's buffer is full.
func (c *Conn) Write(p []byte) (int, error) {
	var n int
	var errno syscall.Errno
	err := c.raw.Write(func(fd uintptr) bool {
		for n < len(p) {
			chunk := p[n:]
			chunk = chunk[:min(len(chunk), maxRW)]
			r, _, e := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&chunk[0])), uintptr(len(chunk)))
			switch e {
			case 0:
				n += int(r)
			case syscall.EINTR:
			case syscall.EAGAIN:
				return false
			default:
				errno = e
				return true
			}
		}
		return true
	})
	switch {
	case err != nil:
		return n, opError("write", err)
	case errno != 0:
		return n, c.sysError("write", errno)
	}
	return n, nil
}

// sysError is the error net.Conn gives for a failed system call.
func (c *Conn) sysError(op string, errno syscall.Errno) error {
	return &net.OpError{Op: op, Net: c.LocalAddr().Network(), Source: c.LocalAddr(), Addr: c.RemoteAddr(),
		Err: os.NewSyscallError(op, errno)}
}
