package bench

import (
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// cpuMeter measures the CPU time each process of a run used over a window (a drive): the servers by their
// /proc/PID/stat (user and system time, the exited threads included, in clock ticks of 10 ms), the client as this
// process's own (getrusage: the drive's goroutines are all it runs then). Where a figure cannot be read (not Linux,
// a process gone) the meter reports nothing rather than a wrong sum.
type cpuMeter struct {
	procs []cpuProc
	start []time.Duration
	t0    time.Time
	ok    bool
}

// cpuProc is a process to meter: its name in the report and its pid (0: this process, the client).
type cpuProc struct {
	name string
	pid  int
}

const clientProc = "client"

// startCPU starts metering procs and the client.
func startCPU(procs ...cpuProc) *cpuMeter {
	m := &cpuMeter{procs: append(slices.Clip(procs), cpuProc{name: clientProc}), ok: true}
	for _, p := range m.procs {
		t, ok := cpuTime(p.pid)
		m.ok = m.ok && ok
		m.start = append(m.start, t)
	}
	m.t0 = time.Now()
	return m
}

// stop ends the window: each process's CPU per operation in µs, in the order metered, and the share of the
// machine's CPUs they kept busy together; ok is false when a figure could not be read.
func (m *cpuMeter) stop(ops int, cpus int) (perOp []procCPU, busy float64, ok bool) {
	elapsed := time.Since(m.t0)
	if !m.ok || ops <= 0 || elapsed <= 0 || cpus <= 0 {
		return nil, 0, false
	}
	var total time.Duration
	for i, p := range m.procs {
		t, ok := cpuTime(p.pid)
		if !ok {
			return nil, 0, false
		}
		used := t - m.start[i]
		total += used
		perOp = append(perOp, procCPU{Process: p.name, MicrosPerOp: float64(used.Microseconds()) / float64(ops)})
	}
	return perOp, float64(total) / float64(elapsed*time.Duration(cpus)), true
}

// procCPU is one process's CPU per operation over a run.
type procCPU struct {
	Process     string
	MicrosPerOp float64
}

// cpuTime returns the CPU time process pid has used (0: this process).
func cpuTime(pid int) (time.Duration, bool) {
	if pid == 0 {
		return selfCPU()
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false
	}
	// The command name (field 2) is in parentheses and may hold spaces: count fields after its closing one.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state); utime and stime are fields 14 and 15.
	if len(f) < 13 {
		return 0, false
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return time.Duration(utime+stime) * clockTick, true
}

// clockTick is the unit of /proc's times (USER_HZ, 100 on Linux whatever the kernel's own tick).
const clockTick = 10 * time.Millisecond
