//go:build !linux

package sockio

import "net"

// Raw calls are wired for Linux only; elsewhere Wrap returns the connection as it is.
const supported = false

func (c *Conn) writeBuffers(v *net.Buffers) (int64, error) { return v.WriteTo(c.Conn) }
