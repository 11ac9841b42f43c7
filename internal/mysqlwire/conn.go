// Package mysqlwire speaks the MySQL client/server protocol (4.1 and later) on both sides of keyway: the server
// side (keyway answering an application's driver) and the client side (keyway logging in to a MariaDB or MySQL
// backend). It frames packets, negotiates capabilities, runs the handshake and authentication
// (mysql_native_password and caching_sha2_password, optional TLS) and encodes the few packets keyway writes itself
// (OK, ERR, EOF). It does not interpret statements or result sets: the SQL door relays those packet by packet.
// It also reads OK packets whole (ParseOK, okpacket.go): the session-state changes a server reports under
// CLIENT_SESSION_TRACK, which the SQL door's per-statement leases and the replica work's GTIDs will use (issue 39;
// nothing calls it yet), and StripSessionState, which rewrites an OK packet for a client that did not ask for them.
//
// Invariants:
//   - A Conn is used by one goroutine at a time. It tracks one sequence id shared by both directions, as the
//     protocol does: every packet read must carry the expected id (else ErrPacketsOutOfOrder) and every packet
//     written gets the next one. ResetSeq starts a new command exchange.
//   - Buffers: a slice returned by ReadPacket is owned by the Conn and valid only until its next read; copy what
//     must outlive that. The write buffer is owned by the Conn: Begin hands it out with the 4-byte header reserved in
//     front of the payload, Finish fills the header in place (no second buffer, no per-packet allocation) and the
//     bytes reach the network on Flush (or earlier, once the buffer passes flushThreshold, so a long result streams
//     in bounded memory).
//   - Logical packets of MaxPayload (16 MiB − 1) bytes or more travel split into MaxPayload-sized physical packets
//     and a final shorter one (possibly empty); ReadPacket joins them, Finish splits them, RelayPacket streams them.
//   - Nothing here panics on input: lengths are checked before slicing and malformed input is an error.
//   - Pre-auth memory bound: until ServerHandshake has authenticated a client, no packet longer than
//     MaxHandshakePacket is accepted; a longer header is refused with ER_NET_PACKET_TOO_LARGE before its body is
//     read, so an unauthenticated peer can make keyway hold at most about MaxHandshakePacket plus the two 16 KiB
//     I/O buffers.
//   - Server-side authentication of a name without an account runs against a decoy account (ServerConfig.DecoyPlugins)
//     and can never succeed; its packets and its ERR 1045 are those of an account with a wrong password.
//
// Constants and password scrambles come from github.com/go-mysql-org/go-mysql/mysql (the protocol's names and
// well-tested hashes). Packet framing and the handshakes are keyway's own: go-mysql's packet.Conn allocates a
// buffer per packet and reads whole packets, while the relay needs to stream a packet of any size through a bounded
// buffer and write headers into the payload's buffer.
package mysqlwire

import (
	"bufio"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/keywaydb/keyway/internal/sockio"
)

const (
	// MaxPayload is the largest payload of one physical packet; a logical packet this long or longer continues in
	// the next physical packet.
	MaxPayload = 1<<24 - 1
	// DefaultMaxPacket bounds the logical packets ReadPacket accepts when Conn.MaxPacket is 0: MariaDB's and
	// MySQL 8's default max_allowed_packet is 16–64 MiB.
	DefaultMaxPacket = 64 << 20
	// MaxHandshakePacket bounds every packet a client sends before it is authenticated (ServerHandshake sets
	// Conn.MaxPacket to it for its duration). A HandshakeResponse41 is fixed fields (32 bytes), a user name (MariaDB:
	// at most 80 characters, 320 bytes in utf8mb4), auth data (a length-encoded string: 20–32 bytes for the plugins
	// keyway speaks, 512 for an RSA-encrypted password in its own packet), a database name (64 characters, 256
	// bytes), a plugin name (64) and connection attributes, which libmysqlclient caps at 64 KiB in all
	// (MAX_CONNECTION_ATTR_STORAGE_LENGTH). 64 KiB + 4 KiB therefore fits every legitimate response and is all a
	// stranger can make keyway buffer (instead of DefaultMaxPacket).
	MaxHandshakePacket = 64<<10 + 4<<10

	headerSize = 4
	// bufSize is the read buffer and the usual write buffer size.
	bufSize = 16 << 10
	// flushThreshold: once the write buffer holds this much after a finished packet, it is written out, so a reply
	// streams rather than accumulating in memory.
	flushThreshold = 16 << 10
)

var (
	// ErrPacketsOutOfOrder: a packet arrived with a sequence id other than the expected one. The stream cannot be
	// trusted any more: close the connection (after telling a client with ER_NET_PACKETS_OUT_OF_ORDER).
	ErrPacketsOutOfOrder = errors.New("mysqlwire: packets out of order")
	// ErrPacketTooLarge: a logical packet is longer than Conn.MaxPacket.
	ErrPacketTooLarge = errors.New("mysqlwire: packet larger than the maximum allowed")
	// ErrMalformed: a packet's contents do not fit its declared structure.
	ErrMalformed = errors.New("mysqlwire: malformed packet")
)

// Conn is one MySQL protocol connection, from either side. It owns its read buffer, reassembly buffer and write
// buffer (see the package invariants).
type Conn struct {
	nc  net.Conn
	br  *bufio.Reader // reads src (through connReader)
	src io.Reader     // nc, or a test reader
	w   io.Writer     // nc, or a test writer
	seq uint8

	// raw is nc when it is a socket with raw calls (sockio) and no TLS runs over it: where FlushBeforeReply can hold
	// a request for the read that fetches its reply. held says the write buffer is such a request.
	raw  *sockio.Conn
	held bool

	// rbuf is the reassembly buffer ReadPacket returns slices of.
	rbuf []byte
	// wbuf holds finished packets not yet written, then the packet being built from pktStart.
	wbuf     []byte
	pktStart int

	// MaxPacket bounds logical packets accepted by ReadPacket; 0 means DefaultMaxPacket.
	MaxPacket int
	// Capabilities are the negotiated capability flags, set by the handshakes.
	Capabilities uint32
	// ExtCapabilities are the negotiated MariaDB extended capabilities (ExtProtocolCaps), set by the handshakes.
	ExtCapabilities uint32
	// TLS is true once the connection runs over TLS.
	TLS bool

	// capture, while on, keeps a copy of every packet RelayPacket reads (see StartCapture).
	capture struct {
		on, over bool
		limit    int
		buf      []byte
	}
}

// NewConn wraps nc. The Conn takes nc over: close it with Conn.Close. A socket is read and written with raw system
// calls (sockio), which the SQL door's relay, a read and a write per packet batch on each side, needs cheap.
func NewConn(nc net.Conn) *Conn {
	nc = sockio.Wrap(nc)
	c := &Conn{nc: nc, src: nc, w: nc}
	c.raw, _ = nc.(*sockio.Conn)
	if b, ok := buffers.Get().(*connBuffers); ok {
		c.wbuf = b.w[:0]
		c.br = b.r
		c.br.Reset(connReader{c})
	} else {
		c.wbuf = make([]byte, 0, bufSize)
		c.br = bufio.NewReaderSize(connReader{c}, bufSize)
	}
	return c
}

// connBuffers are a Conn's read and write buffers, kept for the next connection (Recycle): a client that connects
// for every request (PHP) would otherwise allocate and clear 32 KiB each time.
type connBuffers struct {
	r *bufio.Reader
	w []byte
}

var buffers sync.Pool

// Recycle closes the connection and gives its buffers to the next NewConn. c must not be used after it, by any
// goroutine.
func (c *Conn) Recycle() {
	_ = c.Close()
	if c.br == nil || cap(c.wbuf) != bufSize || c.br.Size() != bufSize {
		return // a buffer grown for a large packet goes with the connection
	}
	c.br.Reset(nil)
	buffers.Put(&connBuffers{r: c.br, w: c.wbuf[:0]})
	c.br, c.wbuf = nil, nil
}

// NewConnRW builds a Conn over a plain reader and writer, for tests and fuzzing: deadlines and TLS are unavailable.
func NewConnRW(r io.Reader, w io.Writer) *Conn {
	c := &Conn{src: r, w: w, wbuf: make([]byte, 0, bufSize)}
	c.br = bufio.NewReaderSize(connReader{c}, bufSize)
	return c
}

// connReader is what a Conn's read buffer reads from: src, or, when a request is held (FlushBeforeReply), the
// request's write and the read of its reply in one wait.
type connReader struct{ c *Conn }

func (r connReader) Read(p []byte) (int, error) {
	c := r.c
	if !c.held {
		return c.src.Read(p)
	}
	c.held = false
	_, n, err := c.raw.WriteThenRead(c.wbuf, p)
	c.resetWrite()
	return n, err
}

// SetSpinner makes the connection's reads spin with s before they wait for data (sockio.Spinner; nil: never). A
// connection without raw calls (TLS, not a socket) never spins.
func (c *Conn) SetSpinner(s *sockio.Spinner) {
	if c.raw != nil {
		c.raw.SetSpinner(s)
	}
}

// NetConn returns the underlying connection (nil for NewConnRW).
func (c *Conn) NetConn() net.Conn { return c.nc }

// Close closes the underlying connection without flushing.
func (c *Conn) Close() error {
	if c.nc == nil {
		return nil
	}
	return c.nc.Close()
}

// SetDeadline sets the read and write deadline of the underlying connection.
func (c *Conn) SetDeadline(t time.Time) error {
	if c.nc == nil {
		return nil
	}
	return c.nc.SetDeadline(t)
}

// Seq returns the sequence id the next packet (read or written) must carry.
func (c *Conn) Seq() uint8 { return c.seq }

// ResetSeq starts a new command exchange: the next packet carries sequence id 0.
func (c *Conn) ResetSeq() { c.seq = 0 }

// Buffered reports how many received bytes wait in the read buffer.
func (c *Conn) Buffered() int { return c.br.Buffered() }

// upgradeTLS switches the connection to TLS (server side when server is true). Bytes already buffered are the
// start of the TLS handshake (a client need not wait after its SSLRequest) and are fed to it first.
func (c *Conn) upgradeTLS(cfg *tls.Config, server bool) error {
	if c.nc == nil {
		return errors.New("mysqlwire: TLS needs a network connection")
	}
	raw := c.nc
	if n := c.br.Buffered(); n > 0 {
		p, _ := c.br.Peek(n)
		raw = NewPrefixConn(c.nc, append([]byte(nil), p...))
		_, _ = c.br.Discard(n)
	}
	var tc *tls.Conn
	if server {
		tc = tls.Server(raw, cfg)
	} else {
		tc = tls.Client(raw, cfg)
	}
	if err := tc.Handshake(); err != nil {
		return fmt.Errorf("mysqlwire: TLS handshake: %w", err)
	}
	c.nc, c.src, c.w, c.raw, c.TLS = tc, tc, tc, nil, true
	c.br.Reset(connReader{c})
	return nil
}

// readHeader reads one physical packet header, checks its sequence id and returns the payload length.
func (c *Conn) readHeader() (int, error) {
	h, err := c.br.Peek(headerSize)
	if err != nil {
		if len(h) > 0 && err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return 0, err
	}
	n := int(h[0]) | int(h[1])<<8 | int(h[2])<<16
	if h[3] != c.seq {
		return 0, fmt.Errorf("%w: got sequence id %d, want %d", ErrPacketsOutOfOrder, h[3], c.seq)
	}
	_, _ = c.br.Discard(headerSize)
	c.seq++
	return n, nil
}

// ReadPacket reads one logical packet, joining split physical packets. The returned slice is owned by c and valid
// until the next read on c. A header announcing more than MaxPacket bytes is ErrPacketTooLarge (the payload is
// not read: close the connection); a stream that ends inside a packet is io.ErrUnexpectedEOF.
func (c *Conn) ReadPacket() ([]byte, error) {
	limit := c.MaxPacket
	if limit <= 0 {
		limit = DefaultMaxPacket
	}
	c.rbuf = c.rbuf[:0]
	for {
		n, err := c.readHeader()
		if err != nil {
			if err == io.EOF && len(c.rbuf) > 0 {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
		if len(c.rbuf)+n > limit {
			return nil, fmt.Errorf("%w: %d bytes announced, at most %d allowed", ErrPacketTooLarge, len(c.rbuf)+n, limit)
		}
		start := len(c.rbuf)
		c.rbuf = grow(c.rbuf, n)
		if _, err := io.ReadFull(c.br, c.rbuf[start:start+n]); err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
		if n < MaxPayload {
			// Shrink a buffer a huge packet left behind, so an idle connection holds little memory.
			if cap(c.rbuf) > 1<<20 && len(c.rbuf) < bufSize {
				out := make([]byte, len(c.rbuf), bufSize)
				copy(out, c.rbuf)
				c.rbuf = out
			}
			return c.rbuf, nil
		}
	}
}

// grow extends b by n bytes (contents of the new bytes unspecified).
func grow(b []byte, n int) []byte {
	if cap(b)-len(b) >= n {
		return b[:len(b)+n]
	}
	nb := make([]byte, len(b)+n, 2*cap(b)+n)
	copy(nb, b)
	return nb
}

// Begin starts a packet at the end of the write buffer and returns the buffer with the 4 header bytes reserved;
// append the payload to it and pass the result to Finish. Only one packet may be open at a time.
func (c *Conn) Begin() []byte {
	c.pktStart = len(c.wbuf)
	return append(c.wbuf, 0, 0, 0, 0)
}

// Finish completes the packet Begin started: it writes the header in place (splitting a payload of MaxPayload
// bytes or more into several physical packets) and keeps b as the write buffer. It flushes when the buffer has
// grown past flushThreshold.
func (c *Conn) Finish(b []byte) error {
	n := len(b) - c.pktStart - headerSize
	if n < MaxPayload {
		putHeader(b[c.pktStart:], n, c.seq)
		c.seq++
		c.wbuf = b
	} else {
		c.wbuf = c.split(b)
	}
	if len(c.wbuf) >= flushThreshold {
		return c.Flush()
	}
	return nil
}

// split rewrites the oversize packet that starts at c.pktStart in b as physical packets of at most MaxPayload
// bytes. Rare (16 MiB packets), so it may allocate.
func (c *Conn) split(b []byte) []byte {
	payload := b[c.pktStart+headerSize:]
	out := make([]byte, c.pktStart, len(b)+(len(payload)/MaxPayload+1)*headerSize)
	copy(out, b[:c.pktStart])
	for {
		k := min(len(payload), MaxPayload)
		out = appendHeader(out, k, c.seq)
		c.seq++
		out = append(out, payload[:k]...)
		payload = payload[k:]
		if k < MaxPayload {
			return out
		}
	}
}

func putHeader(b []byte, n int, seq uint8) {
	b[0], b[1], b[2], b[3] = byte(n), byte(n>>8), byte(n>>16), seq
}

func appendHeader(b []byte, n int, seq uint8) []byte {
	return append(b, byte(n), byte(n>>8), byte(n>>16), seq)
}

// WritePacket appends one packet with payload p to the write buffer (copying p). Call Flush to send it.
func (c *Conn) WritePacket(p []byte) error {
	return c.Finish(append(c.Begin(), p...))
}

// Flush writes the buffered packets to the network.
func (c *Conn) Flush() error {
	c.held = false
	if len(c.wbuf) == 0 {
		return nil
	}
	_, err := c.w.Write(c.wbuf)
	c.resetWrite()
	return err
}

// FlushBeforeReply is Flush for a request whose reply the caller reads next, and nothing else before it: on a plain
// socket the request is held until that read, which writes it and then waits for the reply without first trying a
// read that would find nothing (sockio.Conn.WriteThenRead); a failed write is then that read's error. Anywhere else
// (TLS, a test reader, bytes already buffered for reading) it is Flush. A Flush or Discard before the read ends the
// hold as it would end buffering.
func (c *Conn) FlushBeforeReply() error {
	if c.raw == nil || len(c.wbuf) == 0 || c.br.Buffered() > 0 {
		return c.Flush()
	}
	c.held = true
	return nil
}

// resetWrite empties the write buffer after its bytes went out.
func (c *Conn) resetWrite() {
	if cap(c.wbuf) > 4*bufSize {
		c.wbuf = make([]byte, 0, bufSize) // let a huge packet's buffer go
	} else {
		c.wbuf = c.wbuf[:0]
	}
}

// Discard drops buffered, unflushed packets (after an error, before writing an ERR instead).
func (c *Conn) Discard() { c.wbuf, c.held = c.wbuf[:0], false }

// PeekHead returns the next packet's payload length and up to max of its leading payload bytes without consuming
// the packet (the slice is c's read buffer, valid until the next read). It checks the sequence id.
func (c *Conn) PeekHead(max int) (int, []byte, error) {
	h, err := c.br.Peek(headerSize)
	if err != nil {
		if len(h) > 0 && err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return 0, nil, err
	}
	n := int(h[0]) | int(h[1])<<8 | int(h[2])<<16
	if h[3] != c.seq {
		return 0, nil, fmt.Errorf("%w: got sequence id %d, want %d", ErrPacketsOutOfOrder, h[3], c.seq)
	}
	k := min(n, max, bufSize-headerSize)
	b, err := c.br.Peek(headerSize + k)
	if err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return 0, nil, err
	}
	return n, b[headerSize:], nil
}

// Pending reports how many bytes wait in the write buffer.
func (c *Conn) Pending() int { return len(c.wbuf) }

// RelayPacket reads one logical packet from c and writes it to dst under dst's sequence ids, streaming it through
// c's read buffer: a packet of any size is never held whole. It copies up to len(head) leading payload bytes into
// head (so the caller can tell OK, ERR, EOF and rows apart) and returns the logical length and how many bytes of head
// it filled. Errors reading c and writing dst are told apart by WriteError. A nil dst discards the packet.
func (c *Conn) RelayPacket(dst *Conn, head []byte) (n, h int, err error) {
	for first := true; ; first = false {
		k, err := c.readHeader()
		if err != nil {
			if err == io.EOF && !first {
				err = io.ErrUnexpectedEOF
			}
			return n, h, err
		}
		n += k
		if dst != nil {
			dst.wbuf = appendHeader(dst.wbuf, k, dst.seq)
			dst.seq++
		}
		c.captureHeader(k)
		for rem := k; rem > 0; {
			p, err := c.br.Peek(min(rem, bufSize))
			if len(p) == 0 {
				if err == io.EOF {
					err = io.ErrUnexpectedEOF
				}
				return n, h, err
			}
			if first && h == 0 {
				h = copy(head, p)
			}
			if dst != nil {
				dst.wbuf = append(dst.wbuf, p...)
			}
			c.captureBytes(p)
			_, _ = c.br.Discard(len(p))
			rem -= len(p)
			if dst != nil && len(dst.wbuf) >= flushThreshold {
				if err := dst.Flush(); err != nil {
					return n, h, &WriteError{err}
				}
			}
		}
		if k < MaxPayload {
			return n, h, nil
		}
	}
}

// StartCapture makes RelayPacket keep a copy of the packets it reads from c, up to limit bytes in all, for a
// reply cache to replay later (see StopCapture and WriteCaptured). Packets of MaxPayload or more (16 MiB) are
// not kept: such a reply is never captured.
func (c *Conn) StartCapture(limit int) {
	c.capture.on, c.capture.over, c.capture.limit = true, false, limit
	c.capture.buf = c.capture.buf[:0]
}

// StopCapture ends a capture and returns what it kept (a fresh slice the caller owns), or ok false when the
// reply did not fit.
func (c *Conn) StopCapture() (captured []byte, ok bool) {
	on, over := c.capture.on, c.capture.over
	c.capture.on = false
	if !on || over {
		return nil, false
	}
	return append([]byte(nil), c.capture.buf...), true
}

// SpoilCapture says a packet of the reply was read past the capture (ReadPacket): the capture is not kept.
func (c *Conn) SpoilCapture() { c.capture.over = true }

func (c *Conn) captureHeader(k int) {
	if !c.capture.on || c.capture.over {
		return
	}
	if k >= MaxPayload || len(c.capture.buf)+3+k > c.capture.limit {
		c.capture.over = true
		return
	}
	c.capture.buf = append(c.capture.buf, byte(k), byte(k>>8), byte(k>>16))
}

func (c *Conn) captureBytes(p []byte) {
	if c.capture.on && !c.capture.over {
		c.capture.buf = append(c.capture.buf, p...)
	}
}

// WriteCaptured writes the packets of a capture (StopCapture) under c's sequence ids, as RelayPacket wrote them
// when they were captured. Call Flush to send them.
func (c *Conn) WriteCaptured(captured []byte) error {
	for len(captured) >= 3 {
		k := int(captured[0]) | int(captured[1])<<8 | int(captured[2])<<16
		if len(captured) < 3+k {
			return errors.New("mysqlwire: truncated capture")
		}
		c.wbuf = appendHeader(c.wbuf, k, c.seq)
		c.seq++
		c.wbuf = append(c.wbuf, captured[3:3+k]...)
		captured = captured[3+k:]
	}
	return nil
}

// WriteError marks an error writing to the destination of RelayPacket, as opposed to reading its source.
type WriteError struct{ Err error }

func (e *WriteError) Error() string { return "mysqlwire: write: " + e.Err.Error() }
func (e *WriteError) Unwrap() error { return e.Err }

// NewPrefixConn returns nc with prefix put back in front of its bytes: reads return prefix first, then what nc
// reads. It hands bytes already read off a connection (a buffered TLS start, a server's handshake) to the next
// reader of that connection (crypto/tls, a driver). prefix belongs to the returned conn from then on; every other
// method is nc's.
func NewPrefixConn(nc net.Conn, prefix []byte) net.Conn {
	return &prefixConn{Conn: nc, prefix: prefix}
}

// prefixConn reads prefix before the connection's own bytes.
type prefixConn struct {
	net.Conn
	prefix []byte
}

func (p *prefixConn) Read(b []byte) (int, error) {
	if len(p.prefix) > 0 {
		n := copy(b, p.prefix)
		p.prefix = p.prefix[n:]
		return n, nil
	}
	return p.Conn.Read(b)
}
