package mysqlwire

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/keywaydb/keyway/internal/testenv"
)

// socketPair returns a Conn over one end of a real TCP connection and the other end, raw.
func socketPair(t *testing.T) (*Conn, net.Conn) {
	t.Helper()
	nc, peer := testenv.ConnPair(t, "tcp")
	c := NewConn(nc)
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(10 * time.Second))
	return c, peer
}

// silent reports whether peer receives nothing within a short wait.
func silent(t *testing.T, peer net.Conn) bool {
	t.Helper()
	peer.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	n, err := peer.Read(make([]byte, 64))
	peer.SetReadDeadline(time.Time{})
	return n == 0 && errors.Is(err, os.ErrDeadlineExceeded)
}

// FlushBeforeReply on a socket holds the request until the read of its reply, which sends it and returns the reply;
// a Flush in between sends it at once, a Discard drops it. On a test writer it is Flush.
func TestFlushBeforeReply(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("requests are held on Linux only (sockio)")
	}
	request := []byte{0x03, 'S', 'E', 'L', 'E', 'C', 'T', ' ', '1'}
	wire := append([]byte{byte(len(request)), 0, 0, 0}, request...)

	t.Run("held until the reply is read", func(t *testing.T) {
		c, peer := socketPair(t)
		c.ResetSeq()
		if err := c.WritePacket(request); err != nil {
			t.Fatal(err)
		}
		if err := c.FlushBeforeReply(); err != nil {
			t.Fatal(err)
		}
		if !silent(t, peer) {
			t.Fatal("the request went out before the read of its reply")
		}
		go func() {
			got := make([]byte, len(wire))
			if _, err := io.ReadFull(peer, got); err != nil || !bytes.Equal(got, wire) {
				peer.Close()
				return
			}
			peer.Write([]byte{3, 0, 0, 1, 0x00, 0x00, 0x00}) // an OK packet, sequence 1
		}()
		reply, err := c.ReadPacket()
		if err != nil || !bytes.Equal(reply, []byte{0, 0, 0}) {
			t.Fatalf("reply %x, err %v", reply, err)
		}
		if c.Pending() != 0 {
			t.Fatalf("%d bytes left in the write buffer", c.Pending())
		}
	})
	t.Run("a Flush sends it", func(t *testing.T) {
		c, peer := socketPair(t)
		c.ResetSeq()
		c.WritePacket(request)
		c.FlushBeforeReply()
		if err := c.Flush(); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, len(wire))
		if _, err := io.ReadFull(peer, got); err != nil || !bytes.Equal(got, wire) {
			t.Fatalf("peer got %x, err %v", got, err)
		}
	})
	t.Run("a Discard drops it", func(t *testing.T) {
		c, peer := socketPair(t)
		c.ResetSeq()
		c.WritePacket(request)
		c.FlushBeforeReply()
		c.Discard()
		c.Flush()
		if !silent(t, peer) {
			t.Fatal("a discarded request was sent")
		}
	})
	t.Run("a failed send is the read's error", func(t *testing.T) {
		c, peer := socketPair(t)
		peer.Close()
		time.Sleep(50 * time.Millisecond)
		c.ResetSeq()
		c.WritePacket(request)
		c.FlushBeforeReply()
		if _, err := c.ReadPacket(); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("err %v, want the closed connection's", err)
		}
	})
	t.Run("a test writer", func(t *testing.T) {
		var out bytes.Buffer
		c := NewConnRW(bytes.NewReader(nil), &out)
		c.WritePacket(request)
		if err := c.FlushBeforeReply(); err != nil || !bytes.Equal(out.Bytes(), wire) {
			t.Fatalf("wrote %x (err %v), want %x at once", out.Bytes(), err, wire)
		}
	})
}

// A held request costs its exchange one read, the reply's, where Flush and a read make two (the read that finds
// nothing, then the one after the wait). Counted on this goroutine's own thread, against a peer that takes a moment
// to answer.
func TestFlushBeforeReplyReadsOnce(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("requests are held on Linux only (sockio)")
	}
	c, peer := socketPair(t)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if _, ok := testenv.ThreadReads(); !ok {
		t.Skip("no per-thread I/O accounting here")
	}
	go func() {
		req := make([]byte, 4+9)
		for {
			if _, err := io.ReadFull(peer, req); err != nil {
				return
			}
			time.Sleep(200 * time.Microsecond)
			if _, err := peer.Write([]byte{3, 0, 0, 1, 0x00, 0x00, 0x00}); err != nil {
				return
			}
		}
	}()
	const exchanges = 100
	count := func(flush func() error) float64 {
		before, _ := testenv.ThreadReads()
		for range exchanges {
			c.ResetSeq()
			c.WritePacket([]byte{0x03, 'S', 'E', 'L', 'E', 'C', 'T', ' ', '1'})
			if err := flush(); err != nil {
				t.Fatal(err)
			}
			if _, err := c.ReadPacket(); err != nil {
				t.Fatal(err)
			}
		}
		after, _ := testenv.ThreadReads()
		return float64(after-before) / exchanges
	}
	flushed, held := count(c.Flush), count(c.FlushBeforeReply)
	t.Logf("reads per exchange: Flush %.2f, FlushBeforeReply %.2f", flushed, held)
	if flushed < 1.5 {
		t.Skipf("Flush and a read made %.2f reads per exchange: the count does not see the read that finds nothing", flushed)
	}
	if held > 1.2 {
		t.Errorf("FlushBeforeReply made %.2f reads per exchange (Flush: %.2f), want 1", held, flushed)
	}
}
