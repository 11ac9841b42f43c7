package mysqlwire

import (
	"crypto/tls"
	"errors"
	"syscall"
)

// PeerGone reports, without blocking and without consuming anything, whether the peer has closed the connection or
// sent something nobody asked for: an idle backend connection the server dropped (wait_timeout, a restart) reads
// end-of-file, and one it is closing over TLS has its close_notify waiting. Either way the connection is no use
// for a new command. It looks at the socket with one non-blocking MSG_PEEK read (as go-sql-driver's connCheck
// does); a connection that is not a socket (a test pipe) is never gone.
func (c *Conn) PeerGone() bool {
	if c.br.Buffered() > 0 {
		return true // bytes arrived that no command asked for
	}
	nc := c.nc
	if tc, ok := nc.(*tls.Conn); ok {
		nc = tc.NetConn()
	}
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return false
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return true
	}
	gone := false
	var buf [1]byte
	if err := raw.Read(func(fd uintptr) bool {
		// EAGAIN: nothing to read, alive. Anything else (end-of-file, unrequested data, an error) is gone.
		if _, _, rerr := syscall.Recvfrom(int(fd), buf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT); !errors.Is(rerr, syscall.EAGAIN) {
			gone = true
		}
		return true // never wait for readiness: this is a check, not a read
	}); err != nil {
		return true
	}
	return gone
}
