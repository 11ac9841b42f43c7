//go:build !linux

package sockio

// Raw calls are wired for Linux only; elsewhere Wrap returns the connection as it is.
const supported = false

func (c *Conn) bind() {}
