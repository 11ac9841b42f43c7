//go:build !linux

package memcache

import (
	"errors"
	"net"
)

// Event loops are Linux's (epoll; see loop_linux.go): elsewhere a goroutine serves each connection.
type eventLoop struct{}

func (s *Server) startLoops() []*eventLoop { return nil }
func (s *Server) enterLoop(*conn) bool     { return false }
func (l *eventLoop) remove(*conn)          {}
func (l *eventLoop) stop()                 {}
func (l *eventLoop) hangUp()               {}
func (c *conn) leaveLoop() error           { return errors.ErrUnsupported }
func (c *conn) stepAway()                  {}
func (c *conn) writeNow(net.Buffers) (net.Buffers, int64, error) {
	return nil, 0, errors.ErrUnsupported
}
