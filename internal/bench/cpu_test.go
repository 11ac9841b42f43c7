package bench

import (
	"os"
	"os/exec"
	"runtime"
	"testing"
	"time"
)

// TestCPUMeter: the meter reads a server's CPU from /proc (here this process by its pid) and the client's from
// getrusage, per operation: both read the same process here, so they must agree within /proc's clock tick.
func TestCPUMeter(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("/proc is Linux's") // the bench runs on Linux; elsewhere it reports no CPU figures
	}
	m := startCPU(selfClient, cpuProc{name: "server", pid: os.Getpid()})
	// Burn 200 ms of this process's CPU (not of the wall clock: the machine may be shared).
	start, _ := selfCPU()
	for x := 0; ; x++ {
		if x%1024 == 0 {
			if now, _ := selfCPU(); now-start >= 200*time.Millisecond {
				break
			}
		}
	}
	const ops = 1000
	perOp, busy, ok := m.stop(ops, runtime.NumCPU())
	if !ok || len(perOp) != 2 || perOp[0].Process != "server" || perOp[1].Process != clientProc {
		t.Fatalf("stop: %+v %v %v", perOp, busy, ok)
	}
	server, client := perOp[0].MicrosPerOp, perOp[1].MicrosPerOp
	if client < 200 {
		t.Errorf("client: %.1f µs per op, want at least 200 (200 ms over %d ops)", client, ops)
	}
	// /proc counts in ticks of 10 ms: two ticks apart at most, over ops operations.
	if tick := float64(2*clockTick/time.Microsecond) / ops; server < client-tick || server > client+tick {
		t.Errorf("the same process read two ways: %.1f µs per op from /proc, %.1f from getrusage", server, client)
	}
	if busy <= 0 {
		t.Errorf("busy %v, want a share of the CPUs", busy)
	}
	if _, ok := cpuTime(cpuProc{pid: -1}); ok {
		t.Error("a process that does not exist has a CPU time")
	}
	if _, _, ok := startCPU(selfClient, cpuProc{name: "gone", pid: -1}).stop(10, 2); ok {
		t.Error("a meter with an unreadable process reports figures")
	}
}

// TestCPUMeterLoadGenerator: a load generator's CPU is what the child this process ran used, once waited for: the
// meter's reading is the child's own (its wait status), and is not nothing.
func TestCPUMeterLoadGenerator(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the bench meters CPU on Linux")
	}
	m := startCPU(loadGenerator("sh"))
	cmd := exec.Command("sh", "-c", "i=0; while [ $i -lt 100000 ]; do i=$((i+1)); done")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	perOp, _, ok := m.stop(1, runtime.NumCPU())
	if !ok || len(perOp) != 1 || perOp[0].Process != "sh" {
		t.Fatalf("stop: %+v %v", perOp, ok)
	}
	own := cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	// Within a millisecond: the two readings round user and system time apart.
	if got, want := perOp[0].MicrosPerOp, float64(own.Microseconds()); own <= 0 || got < want-1000 || got > want+1000 {
		t.Errorf("the meter read %.0f µs for sh, which says it used %.0f µs", got, want)
	}
}
