package spin

import (
	"testing"
	"time"
)

// TestBacksOff: past MissesAllowed spins in a row that find nothing, each further one doubles the waits that go
// without one, up to a cap; a wait that goes without a spin reports nothing found, and a find ends the backoff.
func TestBacksOff(t *testing.T) {
	b := Budget{Base: 100 * time.Microsecond}
	never := func() bool { return false }
	always := func() bool { return true }
	for miss := 1; miss <= MaxMisses+1; miss++ {
		if found, spun := b.Wait(never); found || !spun {
			t.Fatalf("miss %d: found %v spun %v", miss, found, spun)
		}
		m, want := min(miss, MaxMisses), 0
		if m > MissesAllowed {
			want = 1<<(m-MissesAllowed) - 1
		}
		if _, misses, skip := b.State(); skip != want || misses != m {
			t.Fatalf("after %d misses in a row: %d waits to go without a spin (misses %d), want %d", miss, skip, misses, want)
		}
		for n := want; n > 0; n-- { // the waits to be skipped do not look, so none finds even a ready one
			if found, spun := b.Wait(always); found || spun {
				t.Fatalf("a wait to be skipped spun (after miss %d)", miss)
			}
		}
	}
	if found, _ := b.Wait(always); !found {
		t.Fatal("a spin over a ready poll found nothing")
	}
	if _, misses, skip := b.State(); misses != 0 || skip != 0 {
		t.Fatalf("after a find: misses %d, skip %d", misses, skip)
	}
}

// TestLengthFollowsClient: what comes just after a spin gave up makes the next spins longer (half a base each time,
// up to MaxTimes the base) and does not count as a miss; finds early in a spin make them shorter again, down to the
// base. A long blocking wait changes nothing.
func TestLengthFollowsClient(t *testing.T) {
	const base = 10 * time.Millisecond
	b := Budget{Base: base}
	b.Wait(func() bool { return false })
	b.Blocked(LateBy*base + time.Millisecond) // not late
	if length, misses, _ := b.State(); length != 0 || misses != 1 {
		t.Fatalf("after a miss and a long wait: length %v misses %d", length, misses)
	}
	b.Blocked(base) // just late
	if length, misses, _ := b.State(); length != base+base/2 || misses != 0 {
		t.Fatalf("after a late find: length %v misses %d; want %v, 0", length, misses, base+base/2)
	}
	for range 2 * MaxTimes {
		b.Late()
	}
	if length, _, _ := b.State(); length != MaxTimes*base {
		t.Fatalf("length %v after many late finds, want the cap %v", length, MaxTimes*base)
	}
	for want := MaxTimes*base - base/4; ; want = max(want-base/4, base) {
		if found, _ := b.Wait(func() bool { return true }); !found {
			t.Fatal("a spin over a ready poll found nothing")
		}
		if length, _, _ := b.State(); length != want {
			t.Fatalf("length %v after an early find, want %v", length, want)
		}
		if want == base {
			break
		}
	}
}

// TestNoBase: a zero budget never spins.
func TestNoBase(t *testing.T) {
	var b Budget
	if found, spun := b.Wait(func() bool { return true }); found || spun {
		t.Fatal("a budget without a base spun")
	}
}

// TestGate: a spin is admitted while few enough statements are in flight, no other waiter began one lately, and one
// at a time.
func TestGate(t *testing.T) {
	var g Gate
	if !g.TrySpin(1, 0) {
		t.Fatal("an idle gate refused a spin")
	}
	if g.TrySpin(1, 1) {
		t.Fatal("a second spinner was admitted")
	}
	g.Done()
	g.Begin(1)
	if g.TrySpin(1, 0) {
		t.Fatal("a spin for a client's next command was admitted with a statement in flight")
	}
	if !g.TrySpin(1, 1) {
		t.Fatal("the one statement in flight may not spin for its reply")
	}
	g.Done()
	g.End()
	g.Begin(2)
	g.End()
	if g.TrySpin(1, 0) {
		t.Fatal("a waiter spun just after another's statement")
	}
	time.Sleep(Quiet + time.Millisecond)
	if !g.TrySpin(1, 0) {
		t.Fatal("a waiter may not spin long after another's statement")
	}
	g.Done()
	g.Begin(1)
	g.Begin(2)
	if g.TrySpin(1, 1) {
		t.Fatal("a spin was admitted with two statements in flight")
	}
	g.End()
	g.End()
}
