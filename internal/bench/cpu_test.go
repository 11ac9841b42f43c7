package bench

import (
	"os"
	"runtime"
	"testing"
	"time"
)

// TestCPUMeter: the meter reads a server's CPU from /proc (here this process by its pid, so the figure must
// match what getrusage says) and the client's from getrusage, per operation.
func TestCPUMeter(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("/proc is Linux's") // the bench runs on Linux; elsewhere it reports no CPU figures
	}
	m := startCPU(cpuProc{name: "server", pid: os.Getpid()})
	burn := time.Now().Add(200 * time.Millisecond)
	for x := 0; time.Now().Before(burn); x++ {
	}
	perOp, busy, ok := m.stop(1000, runtime.NumCPU())
	if !ok || len(perOp) != 2 || perOp[0].Process != "server" || perOp[1].Process != clientProc {
		t.Fatalf("stop: %+v %v %v", perOp, busy, ok)
	}
	// 200 ms of CPU over 1000 operations is 200 µs each; /proc counts in 10 ms ticks.
	for _, p := range perOp {
		if p.MicrosPerOp < 150 || p.MicrosPerOp > 400 {
			t.Errorf("%s: %.1f µs per op, want about 200", p.Process, p.MicrosPerOp)
		}
	}
	if busy <= 0 || busy > 1.01 {
		t.Errorf("busy %v, want a share of the CPUs", busy)
	}
	if _, ok := cpuTime(-1); ok {
		t.Error("a process that does not exist has a CPU time")
	}
	if _, _, ok := startCPU(cpuProc{name: "gone", pid: -1}).stop(10, 2); ok {
		t.Error("a meter with an unreadable process reports figures")
	}
}
