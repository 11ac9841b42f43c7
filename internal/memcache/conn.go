package memcache

import (
	"errors"
	"net"
	"os"
	"runtime/debug"

	"github.com/keywaydb/keyway/internal/engine"
)

const (
	initialReadBuffer = 4 << 10
	// maxLine bounds a text command line. memcached closes a connection whose
	// line exceeds 2048 bytes unless it is a get; keyway allows long multi-get
	// lines up to maxGetLine.
	maxLine    = 2048
	maxGetLine = 1 << 20
	// flushThreshold writes replies out mid-batch so a pipeline of large
	// gets does not grow the reply buffer without bound.
	flushThreshold = 256 << 10
	// keepBuffer is the largest buffer kept between batches; larger ones were
	// grown for one big value and are released.
	keepBuffer = 64 << 10
	maxKeyLen  = 250
)

// needMore is returned by a request handler whose request is not complete in
// the buffer yet.
const needMore = -1

var errClose = errors.New("close connection")

// conn is one client connection. Only its own goroutine touches it.
type conn struct {
	srv *Server
	eng *engine.Engine
	nc  net.Conn

	// rbuf[rpos:rend] is input not yet answered.
	rbuf       []byte
	rpos, rend int
	// need is the total size of the request at rpos when a handler said it
	// needs more; the buffer grows to hold it.
	need int
	// swallow is how many bytes of a refused value are still to be discarded.
	swallow int64

	out []byte // replies not yet written

	closeAfterWrite bool
	toks            [maxTokens][]byte
	keys            [][]byte // scratch for multi-key gets

	// proto is fixed by the first byte a client sends, as memcached decides
	// it: after that, input in the other protocol is an error, not a switch.
	proto uint8
}

const (
	protoUnknown uint8 = iota
	protoText
	protoBinary
)

func newConn(s *Server, nc net.Conn) *conn {
	return &conn{srv: s, eng: s.eng, nc: nc, rbuf: make([]byte, initialReadBuffer)}
}

func (c *conn) serve() {
	defer c.nc.Close()
	defer func() {
		// A bug met by one request costs its connection, not the server.
		if r := recover(); r != nil {
			c.srv.log.Error("memcache: a request crashed its connection; closing it", "remote", c.nc.RemoteAddr().String(), "panic", r, "stack", string(debug.Stack()))
		}
	}()
	for {
		if c.rpos == c.rend {
			c.rpos, c.rend = 0, 0
			if cap(c.rbuf) > keepBuffer {
				c.rbuf = make([]byte, initialReadBuffer)
			}
		}
		c.makeRoom()
		n, err := c.nc.Read(c.rbuf[c.rend:])
		c.rend += n
		if n > 0 {
			if perr := c.process(); perr != nil {
				c.flush()
				return
			}
		}
		if len(c.out) > 0 {
			if werr := c.flush(); werr != nil {
				return
			}
		}
		if c.closeAfterWrite {
			return
		}
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) && !c.srv.closing() {
				continue
			}
			return
		}
	}
}

// makeRoom makes sure there is space to read into: it moves unanswered input
// to the front and grows the buffer to the size a pending request needs.
func (c *conn) makeRoom() {
	want := max(c.need, c.rend-c.rpos+1)
	if c.rpos > 0 && (c.rend == len(c.rbuf) || want > len(c.rbuf)-c.rpos) {
		copy(c.rbuf, c.rbuf[c.rpos:c.rend])
		c.rend -= c.rpos
		c.rpos = 0
	}
	if want > len(c.rbuf) {
		nb := make([]byte, max(want, 2*len(c.rbuf)))
		copy(nb, c.rbuf[c.rpos:c.rend])
		c.rend -= c.rpos
		c.rpos = 0
		c.rbuf = nb
	}
	if c.rend == len(c.rbuf) {
		nb := make([]byte, 2*len(c.rbuf))
		copy(nb, c.rbuf[:c.rend])
		c.rbuf = nb
	}
}

// process answers every complete request in the buffer.
func (c *conn) process() error {
	for c.rpos < c.rend {
		buf := c.rbuf[c.rpos:c.rend]
		if c.swallow > 0 {
			n := min(int64(len(buf)), c.swallow)
			c.swallow -= n
			c.rpos += int(n)
			continue
		}
		var n int
		var err error
		if c.proto == protoUnknown {
			c.proto = protoText
			if buf[0] == binaryRequestMagic {
				c.proto = protoBinary
			}
		}
		if c.proto == protoBinary {
			n, err = c.binaryRequest(buf)
		} else {
			n, err = c.textRequest(buf)
		}
		if err != nil {
			return err
		}
		if n == needMore {
			return nil
		}
		c.need = 0
		c.rpos += n
		if c.closeAfterWrite {
			return nil
		}
		if len(c.out) >= flushThreshold {
			if err := c.flush(); err != nil {
				return err
			}
		}
	}
	return nil
}

func (c *conn) flush() error {
	if len(c.out) == 0 {
		return nil
	}
	// No write deadline: a client that stops reading blocks only its own
	// goroutine, and Shutdown closes it when its grace period ends.
	_, err := c.nc.Write(c.out)
	if cap(c.out) > keepBuffer {
		c.out = nil
	} else {
		c.out = c.out[:0]
	}
	return err
}
