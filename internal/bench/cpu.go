package bench

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// cpuMeter measures the CPU time each process of a run used over a window (a drive): the servers by their
// /proc/PID/stat (user and system time, the exited threads included, in clock ticks of 10 ms), a client that is
// this process as its own (getrusage: the drive's goroutines are all it runs then), and a client that is a load
// generator this process ran and waited for (sysbench, memcaslap, php) as what the exited children used (getrusage
// of the children: it counts a child once it has been waited for, and nothing else exits inside the window). Where
// a figure cannot be read (not Linux, a process gone) the meter reports nothing rather than a wrong sum.
type cpuMeter struct {
	procs []cpuProc
	start []time.Duration
	t0    time.Time
	ok    bool
}

// cpuProc is a process to meter: its name in the report and its pid (0: this process), or, with children, the
// load generators this process waited for.
type cpuProc struct {
	name     string
	pid      int
	children bool
}

const clientProc = "client"

// selfClient is the client when it is this process's own goroutines (kv).
var selfClient = cpuProc{name: clientProc}

// loadGenerator is the client when it is a command this process runs and waits for, under its name.
func loadGenerator(name string) cpuProc { return cpuProc{name: name, children: true} }

// startCPU starts metering procs and the client, which is reported last.
func startCPU(client cpuProc, procs ...cpuProc) *cpuMeter {
	m := &cpuMeter{procs: append(slices.Clip(procs), client), ok: true}
	for _, p := range m.procs {
		t, ok := cpuTime(p)
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
		t, ok := cpuTime(p)
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

// cpuTime returns the CPU time p has used.
func cpuTime(p cpuProc) (time.Duration, bool) {
	switch {
	case p.children:
		return childrenCPU()
	case p.pid == 0:
		return selfCPU()
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(p.pid) + "/stat")
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

// CPU is what a target's runs cost in CPU, per repetition: each process's CPU per operation in µs (the servers, then
// the client), and the share of the machine's CPUs they kept busy together (0–1). The servers' figures come in clock
// ticks of 10 ms, so a run of less than a second or so is coarse (see cpuMeter).
type CPU struct {
	Processes []ProcessCPU
	Busy      Series
}

// ProcessCPU is one process's CPU per operation, in µs.
type ProcessCPU struct {
	Process     string
	MicrosPerOp Series
}

// add records one run.
func (c *CPU) add(procs []procCPU, busy float64) {
	for _, p := range procs {
		q := entry(&c.Processes, func(q ProcessCPU) bool { return q.Process == p.Process }, ProcessCPU{Process: p.Process})
		q.MicrosPerOp.Runs = append(q.MicrosPerOp.Runs, p.MicrosPerOp)
	}
	c.Busy.Runs = append(c.Busy.Runs, busy)
}

func (c *CPU) summarize() {
	for i := range c.Processes {
		c.Processes[i].MicrosPerOp.summarize()
	}
	c.Busy.summarize()
}

// text is the medians: "keyway 15.8 µs + mariadb 3.5 µs + client 8.4 µs = 27.7 µs, 75% of the CPUs busy".
func (c *CPU) text() string {
	return cpuText(c.Processes, func(p ProcessCPU) string { return p.Process }, func(p ProcessCPU) float64 { return p.MicrosPerOp.Median }) +
		fmt.Sprintf(", %.0f%% of the CPUs busy", 100*c.Busy.Median)
}

// runCPUText is one run's figures, as the progress lines print them.
func runCPUText(procs []procCPU, busy float64, cpus int) string {
	return cpuText(procs, func(p procCPU) string { return p.Process }, func(p procCPU) float64 { return p.MicrosPerOp }) +
		fmt.Sprintf(", %.0f%% of %d CPUs busy", 100*busy, cpus)
}

// cpuText prints processes' CPU per op ("keyway 15.8 µs + mariadb 3.5 µs + client 8.4 µs = 27.7 µs").
func cpuText[P any](procs []P, name func(P) string, us func(P) float64) string {
	var b strings.Builder
	var total float64
	for i, p := range procs {
		if i > 0 {
			b.WriteString(" + ")
		}
		fmt.Fprintf(&b, "%s %.1f µs", name(p), us(p))
		total += us(p)
	}
	fmt.Fprintf(&b, " = %.1f µs", total)
	return b.String()
}

// entry is the element of *list that is, appending fresh when none is.
func entry[T any](list *[]T, is func(T) bool, fresh T) *T {
	i := slices.IndexFunc(*list, is)
	if i < 0 {
		*list = append(*list, fresh)
		i = len(*list) - 1
	}
	return &(*list)[i]
}
