package gather

import (
	"sync/atomic"
	"testing"
	"time"
)

func TestWant(t *testing.T) {
	var g Gatherer
	for _, c := range []struct{ last, queued, max, want int }{
		{1, 0, 128, 0},      // a lone writer: nothing to wait for
		{0, 1, 128, 0},      // nothing answered yet
		{1, 1, 128, 2},      // two writers taking turns
		{4, 4, 128, 8},      // the halves of 8 writers
		{8, 0, 128, 8},      // everyone answered, nobody queued yet
		{8, 8, 128, 16},     // 8 answered, 8 more queued meanwhile
		{0, 3, 128, 0},      // the queue holds all there are
		{100, 50, 128, 128}, // capped
	} {
		if got := g.Want(c.last, c.queued, c.max); got != c.want {
			t.Errorf("Want(%d, %d, %d) = %d, want %d", c.last, c.queued, c.max, got, c.want)
		}
	}
}

// TestWaitRunsOutThenSkipsOnce: a wait that runs out spares the next batch its wait, once; a wait that is reached
// does not.
func TestWaitRunsOutThenSkipsOnce(t *testing.T) {
	var g Gatherer
	signal := make(chan struct{}, 1)
	g.Wait(time.Millisecond, signal, func() bool { return false })
	if got := g.Want(4, 4, 128); got != 0 {
		t.Fatalf("after a wait that ran out: Want = %d, want 0", got)
	}
	if got := g.Want(4, 4, 128); got != 8 {
		t.Fatalf("the batch after: Want = %d, want 8", got)
	}

	var reached atomic.Bool
	go func() {
		time.Sleep(time.Millisecond)
		signal <- struct{}{} // a prompt before the writes are there
		time.Sleep(time.Millisecond)
		reached.Store(true)
		signal <- struct{}{}
	}()
	g.Wait(time.Minute, signal, reached.Load)
	if !reached.Load() {
		t.Fatal("Wait returned before reached")
	}
	if got := g.Want(4, 4, 128); got != 8 {
		t.Fatalf("after a wait that was reached: Want = %d, want 8", got)
	}
}
