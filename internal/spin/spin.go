// Package spin is the adaptive spin-before-blocking that both doors use where a lone client's next packet is due
// within microseconds: look for it without blocking, again and again, for a short while, before parking the thread
// (the memcache door's event loops) or the goroutine (the SQL door's sessions) in the kernel or Go's poller.
//
// Why: a thread that blocks leaves its CPU idle, and on a virtual machine waking an idle CPU (or a parked goroutine
// and the thread that runs it) costs tens of microseconds; a client that sends its next request within microseconds
// of its reply (one sequential client: PHP, the seeds' loops) pays that wake-up on every request. A spin holds a CPU
// meanwhile, so callers spin only while the machine is not busy (the memcache door: a loop with one connection; the
// SQL door: at most one session with a statement in flight, and one spinner at a time, see Gate).
//
// The length follows the client: it starts at the base (Budget.Base); what comes just after a spin gave up (Late)
// makes the next spins half a base longer, up to MaxTimes the base; a find in the first half of a spin makes them a
// quarter of a base shorter, down to the base. A spin that finds nothing costs its CPU for nothing: after
// MissesAllowed misses in a row (a client idle, or slower than the longest spin), each further miss doubles the
// waits that go without a spin, up to 2^(MaxMisses-MissesAllowed)-1, after which one wait in that many still spins,
// to learn when the client comes back quicker; a find makes every wait spin again.
package spin

import (
	"sync/atomic"
	"time"
)

// The budget's bounds (see the package comment).
const (
	MissesAllowed = 8
	MaxMisses     = 14
	MaxTimes      = 3
	// LateBy, times the base, is how soon after a spin that found nothing what was waited for must come to count as
	// just late (Late). The blocking wait that found it includes the waiter's own wake-up, so it is generous.
	LateBy = 4
)

// Budget is one waiter's spin state. Its zero value with Base 0 never spins. Not safe for concurrent use: each
// waiter (an event loop, a session) has its own.
type Budget struct {
	Base   time.Duration // the spin's base length; 0: never spin
	length time.Duration // the spin's length now
	misses int           // spins in a row that found nothing
	skip   int           // waits still to go without a spin
}

// Wait calls poll again and again, for up to the spin's length, and reports whether poll found something (true) in
// time, and whether it spun at all (not with Base 0, nor while backing off). poll must not block.
func (b *Budget) Wait(poll func() bool) (found, spun bool) {
	if b.Base <= 0 {
		return false, false
	}
	if b.skip > 0 {
		b.skip--
		return false, false
	}
	length := max(b.length, b.Base)
	for start := time.Now(); time.Since(start) < length; {
		if poll() {
			b.misses = 0
			if time.Since(start) < length/2 { // in the first half: the spins may be shorter again, down to the base
				b.length = max(length-b.Base/4, b.Base)
			}
			return true, true
		}
	}
	b.misses = min(b.misses+1, MaxMisses)
	if b.misses > MissesAllowed {
		b.skip = 1<<(b.misses-MissesAllowed) - 1
	}
	return false, true
}

// Late tells the budget that what a spin waited for came within LateBy bases after it gave up: the next spins are
// longer, and the spin does not count as a miss.
func (b *Budget) Late() {
	b.length = min(max(b.length, b.Base)+b.Base/2, MaxTimes*b.Base)
	b.misses, b.skip = max(b.misses-1, 0), 0
}

// Blocked tells the budget how long the blocking wait after a spin that found nothing took: a short one was just
// late (Late).
func (b *Budget) Blocked(waited time.Duration) {
	if waited < LateBy*b.Base {
		b.Late()
	}
}

// State is the budget's length now, spins missed in a row and waits to go without a spin, for tests.
func (b *Budget) State() (length time.Duration, misses, skip int) { return b.length, b.misses, b.skip }

// SetState sets what State reports, for tests.
func (b *Budget) SetState(length time.Duration, misses, skip int) {
	b.length, b.misses, b.skip = length, misses, skip
}

// Gate decides when a waiter may spin: only while its client is alone, that is while few enough statements are in
// flight (Begin, End: the SQL door counts its sessions' commands) and no other waiter began one within Quiet (with
// several clients taking turns, the machine is busy with them even between their statements), and never two
// spinners at once, since a spin holds one of the machine's CPUs (two here).
type Gate struct {
	busy     atomic.Int32  // statements in flight
	spinning atomic.Int32  // 1 while a waiter spins
	lastWho  atomic.Uint64 // the waiter that began the last statement
	lastAt   atomic.Int64  // when (UnixNano)
}

// Quiet is how long after another waiter's statement began a waiter may not spin.
const Quiet = time.Millisecond

// Begin counts a statement of waiter who in flight; End must follow.
func (g *Gate) Begin(who uint64) {
	g.busy.Add(1)
	if g.lastWho.Load() != who {
		g.lastWho.Store(who)
	}
	g.lastAt.Store(time.Now().UnixNano())
}

// End ends what Begin began.
func (g *Gate) End() { g.busy.Add(-1) }

// TrySpin admits a spin of waiter who while at most maxBusy statements are in flight, no other waiter began one
// within Quiet, and nobody else spins; Done must follow an admitted spin.
func (g *Gate) TrySpin(who uint64, maxBusy int32) bool {
	if g.busy.Load() > maxBusy {
		return false
	}
	if g.lastWho.Load() != who && time.Now().UnixNano()-g.lastAt.Load() < int64(Quiet) {
		return false
	}
	return g.spinning.CompareAndSwap(0, 1)
}

// Done ends a spin TrySpin admitted.
func (g *Gate) Done() { g.spinning.Store(0) }
