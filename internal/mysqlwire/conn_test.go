package mysqlwire

import (
	"bytes"
	"errors"
	"io"
	"testing"
)

// frames splits a byte stream into physical packets (length, seq, payload).
type frame struct {
	n   int
	seq uint8
}

func frames(t *testing.T, b []byte) []frame {
	t.Helper()
	var out []frame
	for len(b) > 0 {
		if len(b) < 4 {
			t.Fatalf("dangling %d bytes", len(b))
		}
		n := int(b[0]) | int(b[1])<<8 | int(b[2])<<16
		out = append(out, frame{n, b[3]})
		b = b[4:]
		if len(b) < n {
			t.Fatalf("frame of %d bytes has %d", n, len(b))
		}
		b = b[n:]
	}
	return out
}

func payload(n int) []byte {
	p := make([]byte, n)
	for i := range p {
		p[i] = byte(i*7 + i>>16)
	}
	return p
}

// TestSplitPackets writes payloads around the 16 MiB boundary and reads them back.
func TestSplitPackets(t *testing.T) {
	cases := []struct {
		n      int
		frames []int
	}{
		{0, []int{0}},
		{1, []int{1}},
		{bufSize + 3, []int{bufSize + 3}},
		{MaxPayload - 1, []int{MaxPayload - 1}},
		{MaxPayload, []int{MaxPayload, 0}}, // exactly 16 MiB − 1: an empty packet ends it
		{MaxPayload + 1, []int{MaxPayload, 1}},
		{2*MaxPayload + 5, []int{MaxPayload, MaxPayload, 5}},
	}
	for _, c := range cases {
		var out bytes.Buffer
		w := NewConnRW(nil, &out)
		w.seq = 250 // sequence ids wrap at 255
		p := payload(c.n)
		if err := w.WritePacket(p); err != nil {
			t.Fatal(err)
		}
		if err := w.WritePacket([]byte("next")); err != nil {
			t.Fatal(err)
		}
		if err := w.Flush(); err != nil {
			t.Fatal(err)
		}
		fs := frames(t, out.Bytes())
		if len(fs) != len(c.frames)+1 {
			t.Fatalf("%d bytes: %d frames, want %d", c.n, len(fs), len(c.frames)+1)
		}
		for i, want := range c.frames {
			if fs[i].n != want || fs[i].seq != uint8(250+i) {
				t.Fatalf("%d bytes: frame %d = %+v, want n=%d seq=%d", c.n, i, fs[i], want, uint8(250+i))
			}
		}
		r := NewConnRW(bytes.NewReader(out.Bytes()), io.Discard)
		r.MaxPacket = 3 * MaxPayload
		r.seq = 250
		got, err := r.ReadPacket()
		if err != nil {
			t.Fatalf("%d bytes: read: %v", c.n, err)
		}
		if !bytes.Equal(got, p) {
			t.Fatalf("%d bytes: payload differs", c.n)
		}
		if got, err := r.ReadPacket(); err != nil || string(got) != "next" {
			t.Fatalf("%d bytes: next packet %q %v", c.n, got, err)
		}
		if _, err := r.ReadPacket(); err != io.EOF {
			t.Fatalf("%d bytes: want io.EOF at the end, got %v", c.n, err)
		}
	}
}

func TestReadPacketErrors(t *testing.T) {
	cases := []struct {
		name  string
		in    []byte
		max   int
		want  error
		first bool // the first ReadPacket fails
	}{
		{"wrong sequence id", []byte{1, 0, 0, 1, 'x'}, 0, ErrPacketsOutOfOrder, true},
		{"truncated header", []byte{1, 0}, 0, io.ErrUnexpectedEOF, true},
		{"lying length", []byte{10, 0, 0, 0, 'a', 'b'}, 0, io.ErrUnexpectedEOF, true},
		{"too large", []byte{0xff, 0xff, 0xff, 0}, 100, ErrPacketTooLarge, true},
		{"split then wrong seq", append(append([]byte{0xff, 0xff, 0xff, 0}, make([]byte, MaxPayload)...), 0, 0, 0, 5), 2 * MaxPayload, ErrPacketsOutOfOrder, true},
		{"split then end", append([]byte{0xff, 0xff, 0xff, 0}, make([]byte, MaxPayload)...), 2 * MaxPayload, io.ErrUnexpectedEOF, true},
	}
	for _, c := range cases {
		r := NewConnRW(bytes.NewReader(c.in), io.Discard)
		r.MaxPacket = c.max
		_, err := r.ReadPacket()
		if !errors.Is(err, c.want) {
			t.Errorf("%s: got %v, want %v", c.name, err, c.want)
		}
	}
}

// TestRelayPacket relays a split packet and a small one under the destination's own sequence ids.
func TestRelayPacket(t *testing.T) {
	var src bytes.Buffer
	w := NewConnRW(nil, &src)
	big := payload(MaxPayload + 100)
	_ = w.WritePacket(big)
	_ = w.WritePacket([]byte{0xfe, 0, 0, 2, 0})
	_ = w.Flush()

	var dstBuf bytes.Buffer
	dst := NewConnRW(nil, &dstBuf)
	dst.seq = 7
	r := NewConnRW(bytes.NewReader(src.Bytes()), io.Discard)
	var head [8]byte
	n, h, err := r.RelayPacket(dst, head[:])
	if err != nil || n != len(big) || h != 8 || !bytes.Equal(head[:], big[:8]) {
		t.Fatalf("relay big: n=%d h=%d err=%v", n, h, err)
	}
	n, h, err = r.RelayPacket(dst, head[:])
	if err != nil || n != 5 || h != 5 || head[0] != 0xfe {
		t.Fatalf("relay small: n=%d h=%d err=%v", n, h, err)
	}
	if dst.Seq() != 10 || r.Seq() != 3 {
		t.Fatalf("sequence ids: dst %d src %d", dst.Seq(), r.Seq())
	}
	_ = dst.Flush()
	back := NewConnRW(bytes.NewReader(dstBuf.Bytes()), io.Discard)
	back.MaxPacket = 2 * MaxPayload
	back.seq = 7
	got, err := back.ReadPacket()
	if err != nil || !bytes.Equal(got, big) {
		t.Fatalf("relayed big packet differs: %v", err)
	}
	// Discarding relay.
	r = NewConnRW(bytes.NewReader(src.Bytes()), io.Discard)
	if n, _, err := r.RelayPacket(nil, nil); err != nil || n != len(big) {
		t.Fatalf("discard: %d %v", n, err)
	}
}

func TestPeekHead(t *testing.T) {
	r := NewConnRW(bytes.NewReader([]byte{3, 0, 0, 0, 0xfb, 'a', 'b'}), io.Discard)
	n, h, err := r.PeekHead(1)
	if err != nil || n != 3 || len(h) != 1 || h[0] != 0xfb {
		t.Fatalf("peek: %d %x %v", n, h, err)
	}
	p, err := r.ReadPacket() // not consumed by the peek
	if err != nil || string(p) != "\xfbab" {
		t.Fatalf("read after peek: %q %v", p, err)
	}
	r = NewConnRW(bytes.NewReader([]byte{3, 0, 0, 9}), io.Discard)
	if _, _, err := r.PeekHead(1); !errors.Is(err, ErrPacketsOutOfOrder) {
		t.Fatalf("peek wrong seq: %v", err)
	}
}

// TestWriteAllocs: building a packet in the write buffer allocates nothing.
func TestWriteAllocs(t *testing.T) {
	w := NewConnRW(nil, io.Discard)
	allocs := testing.AllocsPerRun(100, func() {
		b := w.Begin()
		b = append(b, 0x03)
		b = append(b, "SELECT 1"...)
		_ = w.Finish(b)
		_ = w.Flush()
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per packet", allocs)
	}
	var src bytes.Buffer
	sw := NewConnRW(nil, &src)
	for range 200 {
		_ = sw.WritePacket([]byte("row data row data"))
	}
	_ = sw.Flush()
	r := NewConnRW(bytes.NewReader(src.Bytes()), io.Discard)
	var head [16]byte
	allocs = testing.AllocsPerRun(100, func() {
		_, _, _ = r.RelayPacket(w, head[:])
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per relayed packet", allocs)
	}
}

func TestErrOK(t *testing.T) {
	e := NewError(ERAccessDenied, "28000", "Access denied for user '%s'@'%s' (using password: YES)", "x", "h")
	got := ParseError(AppendError(nil, e))
	if *got != *e {
		t.Fatalf("round trip: %+v", got)
	}
	ok := AppendOK(nil, 0, 300, 70000, StatusAutocommit|StatusMoreResultsExists, 1)
	st, good := OKStatus(ok)
	if !good || st != StatusAutocommit|StatusMoreResultsExists {
		t.Fatalf("OK status %x %v", st, good)
	}
	for _, n := range []uint64{0, 250, 251, 65535, 65536, 1<<24 - 1, 1 << 24, 1<<64 - 1} {
		b := AppendLenEnc(nil, n)
		got, k, ok := ReadLenEnc(b)
		if !ok || got != n || k != len(b) {
			t.Fatalf("lenenc %d: %d %d %v", n, got, k, ok)
		}
	}
}

// FuzzPacketReader feeds arbitrary bytes to ReadPacket and RelayPacket: they must return errors, never panic,
// and never hand out more than MaxPacket bytes.
func FuzzPacketReader(f *testing.F) {
	f.Add([]byte{1, 0, 0, 0, 0x0e})
	f.Add([]byte{9, 0, 0, 0, 0x03, 'S', 'E', 'L', 'E', 'C', 'T', ' ', '1'})
	f.Add([]byte{0, 0, 0, 0})
	f.Add([]byte{5, 0, 0, 0, 'a'})
	f.Add([]byte{1, 0, 0, 7, 'x'})
	f.Add([]byte{0xff, 0xff, 0xff, 0, 1, 2, 3})
	f.Add([]byte{2, 0, 0, 0, 0xfe, 0, 3, 0, 0, 1, 'z'})
	f.Fuzz(func(t *testing.T, data []byte) {
		r := NewConnRW(bytes.NewReader(data), io.Discard)
		r.MaxPacket = 1 << 16
		for range 64 {
			p, err := r.ReadPacket()
			if err != nil {
				break
			}
			if len(p) > r.MaxPacket {
				t.Fatalf("packet of %d bytes beyond MaxPacket", len(p))
			}
			_, _ = OKStatus(p)
			_ = ParseError(p)
			_, _, _ = ReadLenEnc(p)
			_, _, _, _ = parseHandshakeResponse(p, ClientProtocol41|ClientPluginAuth|ClientPluginAuthLenenc|ClientConnectWithDB)
			_, _, _, _ = parseHandshakeResponse(p, ClientProtocol41|ClientSecureConnection)
		}
		dst := NewConnRW(nil, io.Discard)
		r = NewConnRW(bytes.NewReader(data), io.Discard)
		var head [16]byte
		for range 64 {
			if _, _, err := r.RelayPacket(dst, head[:]); err != nil {
				break
			}
		}
		_, _, _, _ = ReadServerHandshake(NewConnRW(bytes.NewReader(data), io.Discard))
	})
}
