package server

import (
	"slices"
	"sync"
	"testing"
	"time"
)

// TestProcsGovernor: GOMAXPROCS goes up by one as soon as an event loop keeps a thread of its own, stays up while any
// loop keeps one, and goes back down only once none has for lowerProcsAfter, so a loop that parks and wakes again
// within that time (a client connecting per request) changes nothing.
func TestProcsGovernor(t *testing.T) {
	var mu sync.Mutex
	var set []int
	g := &procsGovernor{base: 2, set: func(n int) {
		mu.Lock()
		defer mu.Unlock()
		set = append(set, n)
	}}
	settings := func() []int {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(set)
	}
	expect := func(want []int, why string) {
		t.Helper()
		if got := settings(); !slices.Equal(got, want) {
			t.Fatalf("GOMAXPROCS set to %v, want %v: %s", got, want, why)
		}
	}
	waitFor := func(want []int, why string) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); !slices.Equal(settings(), want); time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				expect(want, why)
			}
		}
	}

	g.loopThread(true)
	expect([]int{3}, "a loop keeps a thread: one P more at once")
	g.loopThread(true)
	g.loopThread(false)
	time.Sleep(2 * lowerProcsAfter)
	expect([]int{3}, "one loop still keeps its thread")
	g.loopThread(false)
	waitFor([]int{3, 2}, "no loop keeps a thread: back to the base")

	g.loopThread(true)
	g.loopThread(false)
	g.loopThread(true) // within lowerProcsAfter: the lowering that the park started does nothing
	time.Sleep(2 * lowerProcsAfter)
	expect([]int{3, 2, 3}, "a loop parked and woke again at once")
	g.loopThread(false)
	waitFor([]int{3, 2, 3, 2}, "no loop keeps a thread")
}
