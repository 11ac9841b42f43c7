// Package gather is the short wait a group committer makes, before it takes its next batch, for the writers its
// last batch answered: the container's committer (MySQL commits) and the store's (Pebble syncs) both use it.
//
// Why: with one commit in flight, writers that each wait for their write before sending the next (a PHP page, a
// gomemcache client) split into two halves that take turns. The writes answered by one commit arrive while the next
// batch, the other half, is already being committed, and wait for all of it before theirs starts: 8 such writers
// make batches of 4, and each write waits for two commits. A commit's cost hardly grows with its writes (one round
// trip, one fsync), so a wait for the answered writers, shorter than a commit, makes batches of 8 and commits more
// writes per second.
//
// The policy (Gatherer.Want): wait for as many writes as the last batch and the queue held together; not when
// that is fewer than two (a lone writer pays no wait), nor when the queue already holds them, nor right after a
// wait that ran out (writers that pause between writes, or send other commands meanwhile, make every other batch
// wait, not every one). A wait lasts at most as long as the last commit took, and at most the committer's limit.
//
// A Gatherer belongs to one committer and is used by one goroutine at a time (the committer in flight); the
// caller orders hand-overs between goroutines (a mutex, or starting the next committer).
package gather

import "time"

// Limit is how long a wait lasts at most, however long the last commit took: a committer's default limit.
const Limit = time.Millisecond

// Gatherer holds a committer's gathering state: its reusable timer and whether its last wait ran out.
type Gatherer struct {
	timer  *time.Timer
	missed bool
}

// Want returns how many writes the next batch should wait for, given the writes the last batch held and those
// queued now, capped at most; 0 means take the batch now. A call that returns 0 because the last wait ran out
// forgets that, so the batch after waits again.
func (g *Gatherer) Want(last, queued, most int) int {
	want := min(last+queued, most)
	if want < 2 || queued >= want {
		return 0
	}
	if g.missed {
		g.missed = false
		return 0
	}
	return want
}

// Wait waits until reached reports true, asking it after each signal, or for d. It records whether the wait ran
// out, for Want. reached runs on the caller's goroutine; a signal is only a prompt to ask again.
func (g *Gatherer) Wait(d time.Duration, signal <-chan struct{}, reached func() bool) {
	if g.timer == nil {
		g.timer = time.NewTimer(d)
	} else {
		g.timer.Reset(d)
	}
	defer g.timer.Stop()
	for {
		select {
		case <-signal:
			if reached() {
				g.missed = false
				return
			}
		case <-g.timer.C:
			g.missed = !reached()
			return
		}
	}
}
