package bench

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// TestProgress checks the status line: drawn on Start, kept apart from log lines, with a time left once a run has
// ended; and a nil Progress does nothing.
func TestProgress(t *testing.T) {
	var nilP *Progress
	nilP.Plan(1, time.Second)
	nilP.Start("x", 1, 1, "y")
	nilP.Done()
	nilP.Clear()
	if w := nilP.Log(nil); w != nil {
		t.Fatal("nil Progress wrapped a nil writer")
	}

	var screen, log bytes.Buffer
	p := NewProgress(&screen)
	clock := time.Unix(0, 0)
	p.now = func() time.Time { return clock }
	p.Plan(4, 8*time.Second)
	p.Start("memcache, concurrency 8", 1, 2, "memcached")
	if s := screen.String(); !strings.Contains(s, "memcache, concurrency 8 · round 1/2 · memcached · run 1/4 · about 8s left") {
		t.Fatalf("status %q", s)
	}
	clock = clock.Add(3 * time.Second)
	p.Done()
	lw := p.Log(&log)
	lw.Write([]byte("rep 1/2 memcached "))
	lw.Write([]byte("1000 ops/s\n"))
	if log.String() != "rep 1/2 memcached 1000 ops/s\n" {
		t.Fatalf("log %q: lines must go out whole", log.String())
	}
	if s := screen.String(); !strings.HasSuffix(s, "about 8s left\r\x1b[K") {
		t.Fatalf("the status was not cleared for the log line: %q", s)
	}
	p.Start("memcache, concurrency 8", 1, 2, "keyway-memory")
	// One run took 3s, three are left.
	if s := screen.String(); !strings.HasSuffix(s, "\r\x1b[Kmemcache, concurrency 8 · round 1/2 · keyway-memory · run 2/4 · about 9s left") {
		t.Fatalf("status after one run: %q", s)
	}
	p.Clear()
	if !strings.HasSuffix(screen.String(), "\r\x1b[K") {
		t.Fatalf("Clear left the status on screen: %q", screen.String())
	}
}
