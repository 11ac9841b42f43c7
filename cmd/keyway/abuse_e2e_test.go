package main

// End-to-end tests that no client can make the keyway process outgrow its
// memory limit by much (issue 11): a real keyway with -m 64, abusive raw
// clients, and the process's peak resident set read from /proc.

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keywaydb/keyway/internal/testenv"
)

// abuseMemoryLimitMB is the -m the abuse tests run keyway with.
const abuseMemoryLimitMB = 64

// abuseRSSBound is the peak RSS keyway may reach under abuse: 1.5 times its
// memory limit plus 64 MiB for the runtime, code and connections.
const abuseRSSBound = abuseMemoryLimitMB<<20*3/2 + 64<<20

// procMemory returns VmRSS and VmHWM (peak RSS) of pid in bytes.
func procMemory(pid int) (rss, hwm int64, err error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		name, v, ok := strings.Cut(line, ":")
		if !ok || name != "VmRSS" && name != "VmHWM" {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("/proc/%d/status: %q: %w", pid, line, err)
		}
		if name == "VmRSS" {
			rss = kb << 10
		} else {
			hwm = kb << 10
		}
	}
	return rss, hwm, nil
}

// rssWatch samples a keyway's RSS until stopped. Past twice the bound it
// kills the server: a regression must fail the test, not take the machine
// down with it.
type rssWatch struct {
	kw     *testenv.Process
	pid    int
	peak   atomic.Int64
	killed atomic.Bool
	stop   chan struct{}
	done   chan struct{}
}

func watchRSS(t *testing.T, kw *testenv.Process) *rssWatch {
	w := &rssWatch{kw: kw, pid: kw.Cmd.Process.Pid, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-w.stop:
				return
			case <-tick.C:
			}
			rss, hwm, err := procMemory(w.pid)
			if err != nil {
				return // exited
			}
			w.peak.Store(max(w.peak.Load(), rss, hwm))
			if rss > 2*abuseRSSBound && !w.killed.Swap(true) {
				kw.Kill()
				return
			}
		}
	}()
	t.Cleanup(w.close)
	return w
}

func (w *rssWatch) close() {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	<-w.done
}

// check fails the test if keyway's peak RSS passed the bound or it died.
func (w *rssWatch) check(t *testing.T, what string) {
	t.Helper()
	if _, hwm, err := procMemory(w.pid); err == nil {
		w.peak.Store(max(w.peak.Load(), hwm))
	}
	peak := w.peak.Load()
	t.Logf("%s: keyway peak RSS %d MiB (bound %d MiB)", what, peak>>20, abuseRSSBound>>20)
	if w.killed.Load() {
		t.Fatalf("%s: keyway's RSS passed %d MiB; killed it", what, 2*abuseRSSBound>>20)
	}
	if w.kw.Exited() {
		t.Fatalf("%s: keyway died:\n%s", what, w.kw.Output())
	}
	if peak > abuseRSSBound {
		t.Fatalf("%s: keyway's peak RSS %d MiB is over the bound of %d MiB", what, peak>>20, abuseRSSBound>>20)
	}
}

func dialAbuse(t *testing.T, addr string) net.Conn {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	return nc
}

// storeBig stores a value of n bytes under key over a fresh connection.
func storeBig(t *testing.T, addr, key string, n int) {
	t.Helper()
	nc := dialAbuse(t, addr)
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(30 * time.Second))
	fmt.Fprintf(nc, "set %s 0 0 %d\r\n", key, n)
	nc.Write(bytes.Repeat([]byte("v"), n))
	nc.Write([]byte("\r\n"))
	line, err := bufio.NewReader(nc).ReadString('\n')
	if line != "STORED\r\n" {
		t.Fatalf("set %s (%d bytes): %q, %v", key, n, line, err)
	}
}

// TestAbuseMultiGetMemory: one request line that names one 1 MB value a
// thousand times, from a client that does not read, must not make keyway
// hold a copy of the value per key (the unfixed server reached > 1 GB). The
// same for the binary protocol's getkq chains and meta mg pipelines.
func TestAbuseMultiGetMemory(t *testing.T) {
	kw := testenv.NewKeyway(t, "-m", strconv.Itoa(abuseMemoryLimitMB))
	w := watchRSS(t, kw)
	const size, repeat = 1000000, 1000
	storeBig(t, kw.Addr, "big", size)

	line := "get" + strings.Repeat(" big", repeat) + "\r\n"
	var binReqs []byte
	for i := 0; i < repeat; i++ {
		binReqs = append(binReqs, binGetKQ("big")...)
	}
	noop := make([]byte, 24)
	noop[0], noop[1] = 0x80, 0x0a
	binReqs = append(binReqs, noop...)
	meta := strings.Repeat("mg big v\r\n", repeat) + "mn\r\n"
	var stalled []net.Conn
	for _, in := range []string{line, "gets" + line[3:], "gat 0" + line[3:], string(binReqs), meta} {
		nc := dialAbuse(t, kw.Addr)
		nc.SetWriteDeadline(time.Now().Add(10 * time.Second))
		if _, err := nc.Write([]byte(in)); err != nil {
			t.Fatal(err)
		}
		stalled = append(stalled, nc)
	}
	// Nobody reads: keyway answers until the sockets are full, then waits.
	time.Sleep(3 * time.Second)
	w.check(t, "1000-key requests unread")

	// The replies are intact: read the first get's all the way through.
	nc := stalled[0]
	nc.SetReadDeadline(time.Now().Add(60 * time.Second))
	br := bufio.NewReaderSize(nc, 1<<16)
	value := make([]byte, size+2)
	for i := 0; i < repeat; i++ {
		head, err := br.ReadString('\n')
		if err != nil || head != "VALUE big 0 1000000\r\n" {
			t.Fatalf("reply %d: %q, %v", i, head, err)
		}
		if _, err := io.ReadFull(br, value); err != nil || value[0] != 'v' || string(value[size:]) != "\r\n" {
			t.Fatalf("reply %d: value: %v", i, err)
		}
	}
	if end, err := br.ReadString('\n'); end != "END\r\n" {
		t.Fatalf("after %d values: %q, %v", repeat, end, err)
	}
	w.check(t, "after reading one reply")
}

// binGetKQ is a binary getkq request for key.
func binGetKQ(key string) []byte {
	b := make([]byte, 24, 24+len(key))
	b[0], b[1] = 0x80, 0x0d
	binary.BigEndian.PutUint16(b[2:], uint16(len(key)))
	binary.BigEndian.PutUint32(b[8:], uint32(len(key)))
	return append(b, key...)
}

// TestAbusePartialValuesMemory: 300 connections each announce a 999,000
// byte value, send most of it and stall. keyway must bound what all of them
// hold together, refusing values past its budget with memcached's "out of
// memory" error and swallowing their bytes so each connection stays in step.
func TestAbusePartialValuesMemory(t *testing.T) {
	kw := testenv.NewKeyway(t, "-m", strconv.Itoa(abuseMemoryLimitMB))
	w := watchRSS(t, kw)
	const conns, size, sent = 300, 999000, 900000
	body := bytes.Repeat([]byte("p"), sent)
	ncs := make([]net.Conn, conns)
	for i := range ncs {
		ncs[i] = dialAbuse(t, kw.Addr)
	}
	var wg sync.WaitGroup
	errs := make(chan error, conns)
	sem := make(chan struct{}, 16)
	for i, nc := range ncs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			nc.SetWriteDeadline(time.Now().Add(30 * time.Second))
			if _, err := fmt.Fprintf(nc, "set k%d 0 0 %d\r\n", i, size); err != nil {
				errs <- err
				return
			}
			if _, err := nc.Write(body); err != nil {
				errs <- fmt.Errorf("conn %d: %w", i, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	w.check(t, "300 stalled 999,000-byte values")

	// Each stalled connection was either refused at once or waits for the
	// rest of its value.
	refused := 0
	for i, nc := range ncs {
		nc.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
		line, err := bufio.NewReader(nc).ReadString('\n')
		var ne net.Error
		switch {
		case line == "SERVER_ERROR out of memory storing object\r\n":
			refused++
		case err != nil && errors.As(err, &ne) && ne.Timeout() && line == "":
		default:
			t.Fatalf("conn %d: %q, %v", i, line, err)
		}
	}
	t.Logf("%d of %d partial values refused", refused, conns)
	if refused == 0 {
		t.Fatalf("no partial value was refused")
	}
	// A refused connection stays in step: the rest of its value is
	// swallowed and its next command answered.
	for i, nc := range ncs {
		nc.SetDeadline(time.Now().Add(10 * time.Second))
		nc.Write(bytes.Repeat([]byte("p"), size-sent))
		nc.Write([]byte("\r\nget k" + strconv.Itoa(i) + "\r\n"))
	}
	for i, nc := range ncs {
		br := bufio.NewReader(nc)
		var got []byte
		for !bytes.HasSuffix(got, []byte("END\r\n")) {
			b, err := br.ReadByte()
			if err != nil {
				t.Fatalf("conn %d: after %q: %v", i, got, err)
			}
			got = append(got, b)
		}
		ok := bytes.HasPrefix(got, []byte("STORED\r\nVALUE ")) || string(got) == "END\r\n"
		if !ok {
			t.Fatalf("conn %d: %q", i, got)
		}
		nc.Close()
	}
	w.check(t, "after completing the values")

	// The budget is returned when connections close: a large value is
	// accepted again.
	deadline := time.Now().Add(10 * time.Second)
	for {
		nc := dialAbuse(t, kw.Addr)
		nc.SetDeadline(time.Now().Add(10 * time.Second))
		fmt.Fprintf(nc, "set after 0 0 %d\r\n", size)
		nc.Write(bytes.Repeat([]byte("a"), size))
		nc.Write([]byte("\r\n"))
		line, err := bufio.NewReader(nc).ReadString('\n')
		nc.Close()
		if line == "STORED\r\n" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("large set after the abusers left: %q, %v", line, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestAbuseSQLPreAuthMemory: 300 strangers on the SQL door each announce a
// 16 MiB packet before logging in and start sending it. keyway must not
// buffer what a client sends before it has authenticated beyond what a
// handshake can need: each gets ER_NET_PACKET_TOO_LARGE and is closed (the
// unfixed server allocated each announced packet, 300 × 16 MiB).
func TestAbuseSQLPreAuthMemory(t *testing.T) {
	d := startSQLDoor(t)
	w := watchRSS(t, d.kw)
	const conns = 300
	chunk := bytes.Repeat([]byte("x"), 64<<10)
	var wg sync.WaitGroup
	var refused atomic.Int64
	sem := make(chan struct{}, 32)
	for range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			nc, err := net.DialTimeout("tcp", d.addr, 5*time.Second)
			if err != nil {
				return
			}
			defer nc.Close()
			nc.SetDeadline(time.Now().Add(20 * time.Second))
			r := bufio.NewReader(nc)
			var hdr [4]byte
			if _, err := io.ReadFull(r, hdr[:]); err != nil { // the greeting
				return
			}
			greeting := int(hdr[0]) | int(hdr[1])<<8 | int(hdr[2])<<16
			if _, err := r.Discard(greeting); err != nil {
				return
			}
			// A handshake response announced at 16 MiB - 1 bytes, sequence 1, then its body as fast as keyway takes it.
			nc.Write([]byte{0xff, 0xff, 0xff, 1})
			go func() {
				for i := 0; i < 64; i++ { // 4 MiB, unless keyway closes first
					if _, err := nc.Write(chunk); err != nil {
						return
					}
				}
			}()
			if _, err := io.ReadFull(r, hdr[:]); err != nil {
				return
			}
			body := make([]byte, int(hdr[0])|int(hdr[1])<<8|int(hdr[2])<<16)
			if _, err := io.ReadFull(r, body); err == nil && len(body) >= 3 && body[0] == 0xff &&
				binary.LittleEndian.Uint16(body[1:]) == 1153 {
				refused.Add(1)
			}
		}()
	}
	wg.Wait()
	w.check(t, "300 clients announcing 16 MiB before login")
	if n := refused.Load(); n != conns {
		t.Fatalf("%d of %d clients got ER_NET_PACKET_TOO_LARGE (1153)", n, conns)
	}
	// The door still serves.
	if out, err := mariadbCLI(t, "-h", "127.0.0.1", "-P", strconv.Itoa(d.port), "-u", "app", "-psecret", "--skip-ssl", "-N", "-e", "SELECT 41+1"); err != nil || strings.TrimSpace(out) != "42" {
		t.Fatalf("after the abuse: %q %v", out, err)
	}
}
