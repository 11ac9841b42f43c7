//go:build !linux

package sockio

// Raw calls are wired for Linux only; elsewhere Wrap returns the connection as it is.
const supported = false

func (c *Conn) bind() {}

// WriteThenRead writes all of w, then reads into p (see the Linux version).
func (c *Conn) WriteThenRead(w, p []byte) (nw, nr int, err error) {
	if nw, err = c.Write(w); err != nil {
		return nw, 0, err
	}
	nr, err = c.Read(p)
	return nw, nr, err
}
