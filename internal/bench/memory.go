package bench

// The memcache suite's memory case: what the same items cost keyway and memcached at the same -m. Each case loads
// Items items (13-byte keys, values of one size or a mix of 10 B–4 KB) over one pipelined connection into a fresh
// server, waits for a commit round, then reads the process's RSS (and its peak) from /proc/PID/status and the items
// it holds from stats; then memcaslap runs gets and sets on the loaded store (its own keys beside the loaded ones, so
// its sets evict where the store is full). keyway with a data_dir (async durability) is stopped and started again on
// it: the restart time is from the start of the process until it accepts connections, its items loaded back.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/keywaydb/keyway/internal/peers"
)

// MemoryCase is one load of the memory case.
type MemoryCase struct {
	Items    int
	Value    int // bytes of every value; 0 is the mix: 10 B to 4 KB, log-uniform, the same sizes for every server
	MemoryMB int // -m of every server
}

// DefaultMemoryCases are the cases `keyway bench memcache` runs unless --memory says otherwise: a few minutes at 3
// repetitions on 2 cores. The 10,000,000-item case is --memory 10M/100/2048.
const DefaultMemoryCases = "1M/100/320,200K/mix/96"

// Mix bounds.
const (
	mixMin = 10
	mixMax = 4096
)

// memoryKeyLen is the loaded keys' length: "key:000000042".
const memoryKeyLen = 13

// ParseMemoryCases reads "ITEMS/VALUE/MB,...": ITEMS a count with an optional K or M, VALUE bytes or "mix", MB the
// -m of both servers. "none" (or "") is no case.
func ParseMemoryCases(s string) ([]MemoryCase, error) {
	s = strings.TrimSpace(s)
	if s == "" || s == "none" {
		return nil, nil
	}
	var cases []MemoryCase
	for _, f := range strings.Split(s, ",") {
		parts := strings.Split(strings.TrimSpace(f), "/")
		if len(parts) != 3 {
			return nil, fmt.Errorf("memory case %q: want ITEMS/VALUE/MB, like 1M/100/320 or 300K/mix/128", f)
		}
		var c MemoryCase
		n, err := parseCount(parts[0])
		if err != nil || n < 1 || n > 999_999_999 {
			return nil, fmt.Errorf("memory case %q: items %q: want a count from 1 to 999M, like 1000000, 300K or 10M", f, parts[0])
		}
		c.Items = n
		if parts[1] != "mix" {
			if c.Value, err = strconv.Atoi(parts[1]); err != nil || c.Value < 1 || c.Value > maxValueSize {
				return nil, fmt.Errorf("memory case %q: value %q: want bytes from 1 to %d, or mix (10 B to 4 KB)", f, parts[1], maxValueSize)
			}
		}
		if c.MemoryMB, err = strconv.Atoi(parts[2]); err != nil || c.MemoryMB < 1 {
			return nil, fmt.Errorf("memory case %q: MB %q: want the servers' -m, 1 or more", f, parts[2])
		}
		cases = append(cases, c)
	}
	return cases, nil
}

func parseCount(s string) (int, error) {
	mult := 1
	switch {
	case strings.HasSuffix(s, "M"):
		mult, s = 1_000_000, strings.TrimSuffix(s, "M")
	case strings.HasSuffix(s, "K"):
		mult, s = 1_000, strings.TrimSuffix(s, "K")
	}
	n, err := strconv.Atoi(s)
	return n * mult, err
}

// String is the case as ParseMemoryCases reads it.
func (c MemoryCase) String() string {
	v := "mix"
	if c.Value > 0 {
		v = strconv.Itoa(c.Value)
	}
	return formatCount(c.Items) + "/" + v + "/" + strconv.Itoa(c.MemoryMB)
}

func formatCount(n int) string {
	switch {
	case n%1_000_000 == 0:
		return strconv.Itoa(n/1_000_000) + "M"
	case n%1_000 == 0:
		return strconv.Itoa(n/1_000) + "K"
	}
	return strconv.Itoa(n)
}

// valueLen is the length of item i's value.
func (c MemoryCase) valueLen(i int) int {
	if c.Value > 0 {
		return c.Value
	}
	// splitmix64 of i: a fixed, well spread u in [0, 1), so every server gets the same sizes.
	z := uint64(i)*0x9e3779b97f4a7c15 + 0x9e3779b97f4a7c15
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	z ^= z >> 31
	u := float64(z>>11) / (1 << 53)
	return int(math.Round(mixMin * math.Pow(mixMax/float64(mixMin), u)))
}

// describe is the case in words.
func (c MemoryCase) describe() string {
	v := fmt.Sprintf("%d-byte values", c.Value)
	if c.Value == 0 {
		var sum int64
		for i := range c.Items {
			sum += int64(c.valueLen(i))
		}
		v = fmt.Sprintf("values of 10 B to 4 KB, log-uniform (mean %d B, %.0f MiB in all)", sum/int64(c.Items), float64(sum)/(1<<20))
	}
	return fmt.Sprintf("%s items, %d-byte keys, %s, -m %d", groupDigits(c.Items), memoryKeyLen, v, c.MemoryMB)
}

func groupDigits(n int) string {
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// Memory case targets, in run order.
const (
	memKeywayMemory = "keyway-memory" // no data_dir
	memKeywayAsync  = "keyway-async"  // data_dir, async durability; restarted on it
)

// MemoryCaseReport is one case's results: per target, every repetition.
type MemoryCaseReport struct {
	Case        string // as --memory takes it: "1M/100/320"
	Description string
	Items       int
	Value       int // 0: the mix
	MemoryMB    int
	Load        string // the memcaslap command run on the loaded store
	Results     []MemoryResult
}

// MemoryResult is one target's figures in one case. The Series' runs are in repetition order.
type MemoryResult struct {
	Target string
	RSSMiB Series // VmRSS after the load and a pause for a commit round
	// AnonMiB is the part of it that is not a file's pages (RssAnon): RSS less the program's own text and data
	// mapped from its binary, which for keyway (a Go binary with a SQL parser) is some 30 MiB and for memcached 1.
	AnonMiB Series
	// FileMiB is the part of it that is pages of files (RssFile): the binary's text and data and the libraries'
	// (read from their files, and dropped and read again when memory is short). RSS is the two (and RssShmem, none).
	FileMiB Series
	// StartMiB is VmRSS before the load, once the server accepts connections: what the program costs with no item
	// (its binary's pages, runtime, empty tables; with a data_dir, Pebble's). AddedMiB is RSSMiB less it, per run:
	// what the items cost, which is what the server's design decides; the start is what its make-up does.
	StartMiB    Series
	AddedMiB    Series
	PeakMiB     Series // VmHWM then: the most the process held during the load
	Held        Series // curr_items after the load
	LoadSeconds Series
	// After a restart on the data_dir (keyway-async only): the seconds from the start of the process until it
	// accepted connections, the items it held then, and its RSS after the pause.
	BeforeStop     *Series `json:",omitempty"` // items held just before the stop, after memcaslap's run
	RestartSeconds *Series `json:",omitempty"`
	RestartHeld    *Series `json:",omitempty"`
	RestartRSSMiB  *Series `json:",omitempty"`
	// memcaslap on the loaded store: ops/s, and the 99th percentile of all its operations' latency in µs as
	// memcaslap's log2 histogram gives it (the upper bound of the bucket holding it: a power of two).
	Ops   Series
	P99us Series
}

// memoryRun is one repetition's figures for one target.
type memoryRun struct {
	rss, anon, file, peak, held, load float64
	start                             float64 // VmRSS before the load
	restart, rHeld, rRSS              float64
	before                            float64 // items held just before the stop (memcaslap's sets added some)
	hasRestart                        bool
	ops, p99                          float64
}

func (r *MemoryResult) add(m memoryRun) {
	r.RSSMiB.Runs = append(r.RSSMiB.Runs, m.rss)
	r.AnonMiB.Runs = append(r.AnonMiB.Runs, m.anon)
	r.FileMiB.Runs = append(r.FileMiB.Runs, m.file)
	r.StartMiB.Runs = append(r.StartMiB.Runs, m.start)
	r.AddedMiB.Runs = append(r.AddedMiB.Runs, m.rss-m.start)
	r.PeakMiB.Runs = append(r.PeakMiB.Runs, m.peak)
	r.Held.Runs = append(r.Held.Runs, m.held)
	r.LoadSeconds.Runs = append(r.LoadSeconds.Runs, m.load)
	r.Ops.Runs = append(r.Ops.Runs, m.ops)
	r.P99us.Runs = append(r.P99us.Runs, m.p99)
	if m.hasRestart {
		r.BeforeStop = appendRun(r.BeforeStop, m.before)
		r.RestartSeconds = appendRun(r.RestartSeconds, m.restart)
		r.RestartHeld = appendRun(r.RestartHeld, m.rHeld)
		r.RestartRSSMiB = appendRun(r.RestartRSSMiB, m.rRSS)
	}
}

func (r *MemoryResult) summarize() {
	for _, s := range []*Series{&r.RSSMiB, &r.AnonMiB, &r.FileMiB, &r.StartMiB, &r.AddedMiB, &r.PeakMiB, &r.Held, &r.LoadSeconds, &r.Ops, &r.P99us, r.BeforeStop, r.RestartSeconds, r.RestartHeld, r.RestartRSSMiB} {
		if s != nil {
			s.summarize()
		}
	}
}

// settle is the pause after a load before RSS is read: past the async commit interval (1 s), so the store has
// handed the load to the disk and a collection has run.
const settle = 2 * time.Second

// memoryStarter is one memory case's target: memcached, or keyway with or without a data_dir.
type memoryStarter struct {
	name    string
	persist bool
}

// runMemory runs every case, reps times, the targets alternating within each repetition.
func runMemory(ctx context.Context, o MemcacheOptions, bin string) ([]MemoryCaseReport, error) {
	var out []MemoryCaseReport
	targets := []memoryStarter{{memcachedTarget, false}, {memKeywayMemory, false}, {memKeywayAsync, true}}
	for _, c := range o.MemoryCases {
		ml, err := newMemoryMemcaslap(o, c)
		if err != nil {
			return nil, err
		}
		rep := MemoryCaseReport{Case: c.String(), Description: c.describe(), Items: c.Items, Value: c.Value, MemoryMB: c.MemoryMB, Load: ml.describe()}
		fmt.Fprintf(o.Out, "memory case %s: %s\n", rep.Case, rep.Description)
		rep.Results = make([]MemoryResult, len(targets))
		for rep_ := 1; rep_ <= o.Repetitions; rep_++ {
			for i, t := range targets {
				rep.Results[i].Target = t.name
				if err := ctx.Err(); err != nil {
					ml.close()
					return nil, err
				}
				o.Progress.Start("memory "+rep.Case, rep_, o.Repetitions, t.name)
				m, err := runMemoryOnce(ctx, bin, t, c, ml)
				o.Progress.Done()
				if err != nil {
					ml.close()
					return nil, fmt.Errorf("bench: memory case %s, %s, repetition %d: %w", rep.Case, t.name, rep_, err)
				}
				rep.Results[i].add(m)
				restart := ""
				if m.hasRestart {
					restart = fmt.Sprintf("; restart %.2fs, %d items back, RSS %.1f MiB", m.restart, int64(m.rHeld), m.rRSS)
				}
				fmt.Fprintf(o.Out, "rep %d/%d %-14s RSS %7.1f MiB (peak %.1f), %d items, load %.2fs; memcaslap %.0f ops/s, p99 %.0f µs%s\n",
					rep_, o.Repetitions, t.name, m.rss, m.peak, int64(m.held), m.load, m.ops, m.p99, restart)
			}
		}
		ml.close()
		for i := range rep.Results {
			rep.Results[i].summarize()
		}
		out = append(out, rep)
	}
	return out, nil
}

// runMemoryOnce starts a fresh server for t, loads c into it, measures, runs memcaslap, and (with persistence)
// restarts it on its data_dir.
func runMemoryOnce(ctx context.Context, bin string, t memoryStarter, c MemoryCase, ml *memcaslap) (m memoryRun, err error) {
	mb := strconv.Itoa(c.MemoryMB)
	var dataDir string
	start := func() (*peers.Process, error) {
		if t.name == memcachedTarget {
			mc, err := peers.StartMemcached(ctx, "-m", mb)
			if err != nil {
				return nil, err
			}
			return mc.Process(), nil
		}
		args := []string{"-m", mb}
		if t.persist {
			args = append(args, "--data-dir", dataDir, "--durability", "async")
		}
		return peers.StartKeywayBinary(ctx, bin, args...)
	}
	if t.persist {
		if dataDir, err = os.MkdirTemp("", "keyway-bench-memory-"); err != nil {
			return m, fmt.Errorf("make data dir: %w", err)
		}
		defer os.RemoveAll(dataDir)
	}
	p, err := start()
	if err != nil {
		return m, fmt.Errorf("start: %w", err)
	}
	defer func() {
		if p != nil {
			if serr := p.Stop(); serr != nil && err == nil {
				err = fmt.Errorf("stop: %w", serr)
			}
		}
	}()
	rssKB, err := procStatusKB(p.Cmd.Process.Pid, "VmRSS")
	if err != nil {
		return m, err
	}
	m.start = float64(rssKB) / 1024
	took, err := loadItems(ctx, p.Addr, c)
	if err != nil {
		return m, fmt.Errorf("load: %w", err)
	}
	m.load = took.Seconds()
	if m.rss, m.anon, m.file, m.peak, m.held, err = measure(ctx, p); err != nil {
		return m, err
	}
	s, err := ml.runLatency(ctx, p.Addr)
	if err != nil {
		return m, err
	}
	m.ops, m.p99 = s.ops, s.p99
	if !t.persist {
		return m, nil
	}
	if m.before, err = itemsHeld(p.Addr); err != nil {
		return m, err
	}
	if err := p.Stop(); err != nil {
		p = nil
		return m, fmt.Errorf("stop before the restart: %w", err)
	}
	began := time.Now()
	if p, err = start(); err != nil {
		return m, fmt.Errorf("restart: %w", err)
	}
	m.restart, m.hasRestart = time.Since(began).Seconds(), true
	if m.rHeld, err = itemsHeld(p.Addr); err != nil {
		return m, err
	}
	if m.rRSS, _, _, _, _, err = measure(ctx, p); err != nil {
		return m, err
	}
	return m, nil
}

// measure waits settle, then reads the process's RSS, anonymous RSS, file-backed RSS and peak RSS in MiB and the
// items it holds.
func measure(ctx context.Context, p *peers.Process) (rss, anon, file, peak, held float64, err error) {
	select {
	case <-ctx.Done():
		return 0, 0, 0, 0, 0, ctx.Err()
	case <-time.After(settle):
	}
	pid := p.Cmd.Process.Pid
	rssKB, err1 := procStatusKB(pid, "VmRSS")
	anonKB, err2 := procStatusKB(pid, "RssAnon")
	fileKB, err3 := procStatusKB(pid, "RssFile")
	peakKB, err4 := procStatusKB(pid, "VmHWM")
	held, err5 := itemsHeld(p.Addr)
	if err := errors.Join(err1, err2, err3, err4, err5); err != nil {
		return 0, 0, 0, 0, 0, err
	}
	return float64(rssKB) / 1024, float64(anonKB) / 1024, float64(fileKB) / 1024, float64(peakKB) / 1024, held, nil
}

// loadItems sets c's items over one connection, pipelined in batches of noreply sets, each batch ended by mn so the
// client waits for the server once a batch, and returns the time it took.
func loadItems(ctx context.Context, addr string, c MemoryCase) (time.Duration, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	w := bufio.NewWriterSize(conn, 256<<10)
	r := bufio.NewReader(conn)
	value := strings.Repeat("v", max(c.Value, mixMax))
	var line []byte
	const batch = 500
	began := time.Now()
	for i := range c.Items {
		n := c.valueLen(i)
		line = append(line[:0], "set key:"...)
		line = appendPadded(line, i, 9)
		line = append(line, " 0 0 "...)
		line = strconv.AppendInt(line, int64(n), 10)
		line = append(line, " noreply\r\n"...)
		line = append(line, value[:n]...)
		line = append(line, "\r\n"...)
		if _, err := w.Write(line); err != nil {
			return 0, err
		}
		if i%batch == batch-1 || i == c.Items-1 {
			if err := ctx.Err(); err != nil {
				return 0, err
			}
			w.WriteString("mn\r\n")
			if err := w.Flush(); err != nil {
				return 0, err
			}
			reply, err := r.ReadString('\n')
			if err != nil {
				return 0, err
			}
			if reply != "MN\r\n" {
				return 0, fmt.Errorf("after a batch of sets ending at item %d: %q, want MN (a set failed?)", i, reply)
			}
		}
	}
	return time.Since(began), nil
}

// appendPadded appends i in decimal, zero-padded to width digits.
func appendPadded(b []byte, i, width int) []byte {
	s := strconv.Itoa(i)
	for range width - len(s) {
		b = append(b, '0')
	}
	return append(b, s...)
}

// itemsHeld reads curr_items from the server's stats.
func itemsHeld(addr string) (float64, error) {
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.WriteString(conn, "stats\r\n"); err != nil {
		return 0, err
	}
	r := bufio.NewReader(conn)
	v := -1.0
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return 0, fmt.Errorf("stats: %w", err)
		}
		if line == "END\r\n" {
			break
		}
		if f := strings.Fields(line); len(f) == 3 && f[1] == "curr_items" {
			v, _ = strconv.ParseFloat(f[2], 64)
		}
	}
	if v < 0 {
		return 0, errors.New("stats: no curr_items")
	}
	return v, nil
}

// procStatusKB reads a kB field of /proc/PID/status.
func procStatusKB(pid int, field string) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			f := strings.Fields(rest)
			if len(f) > 0 {
				return strconv.ParseInt(f[0], 10, 64)
			}
		}
	}
	return 0, fmt.Errorf("/proc/%d/status has no %s", pid, field)
}

// newMemoryMemcaslap is memcaslap for a memory case: the case's value sizes (the mix as bands of it), the suite's
// concurrency and set share, the memory duration, and -S so that it prints its latency histogram.
func newMemoryMemcaslap(o MemcacheOptions, c MemoryCase) (*memcaslap, error) {
	path, err := peers.LookPath("memcaslap")
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	f, err := os.CreateTemp("", "keyway-memcaslap-mem-*.cfg")
	if err != nil {
		return nil, fmt.Errorf("bench: memcaslap config: %w", err)
	}
	var values, words string
	if c.Value > 0 {
		values = fmt.Sprintf("%d %d 1\n", c.Value, c.Value)
		words = fmt.Sprintf("values %d B", c.Value)
	} else {
		// The log-uniform mix in bands of a factor 4, each with its share of ln(4096/10).
		lo, total := mixMin, math.Log(mixMax/float64(mixMin))
		var shares []string
		for lo < mixMax {
			hi := min(lo*4, mixMax)
			share := math.Log(float64(hi)/float64(lo)) / total
			values += fmt.Sprintf("%d %d %s\n", lo, hi, formatShare(share))
			shares = append(shares, fmt.Sprintf("%d-%d B %s", lo, hi, formatShare(share)))
			lo = hi + 1
		}
		words = "values " + strings.Join(shares, ", ")
	}
	cfg := fmt.Sprintf("key\n%d %d 1\nvalue\n%scmd\n0 %s\n1 %s\n", keyLength, keyLength, values,
		formatShare(o.SetRatio), formatShare(1-o.SetRatio))
	_, werr := f.WriteString(cfg)
	if err := errors.Join(werr, f.Close()); err != nil {
		_ = os.Remove(f.Name())
		return nil, fmt.Errorf("bench: memcaslap config: %w", err)
	}
	secs := strconv.Itoa(int(o.MemoryDuration / time.Second))
	return &memcaslap{
		path:    path,
		cfgPath: f.Name(),
		args: []string{
			"-T", strconv.Itoa(memcaslapThreads(runtime.NumCPU(), o.Concurrency)),
			"-c", strconv.Itoa(o.Concurrency),
			"-t", secs + "s",
			"-S", secs + "s",
		},
		timeout: o.MemoryDuration + 2*time.Minute,
		load: fmt.Sprintf("keys %d B, %s, set share %s, get share %s", keyLength, words,
			formatShare(o.SetRatio), formatShare(1-o.SetRatio)),
	}, nil
}

// memcaslapResult is a run of memcaslap with its latency.
type memcaslapResult struct {
	ops, p99 float64
}

// runLatency runs memcaslap once on addr and reads its ops/s and p99.
func (m *memcaslap) runLatency(ctx context.Context, addr string) (memcaslapResult, error) {
	ctx, cancel := context.WithTimeout(ctx, m.timeout)
	defer cancel()
	argv := append(append([]string{"-s", addr}, m.args...), "-F", m.cfgPath)
	cmd := exec.CommandContext(ctx, m.path, argv...)
	cmd.WaitDelay = 2 * time.Second
	out, err := cmd.CombinedOutput()
	if err != nil {
		return memcaslapResult{}, fmt.Errorf("memcaslap %s: %w\n%s", strings.Join(argv, " "), err, tail(out))
	}
	s, err := parseMemcaslap(out)
	if err != nil {
		return memcaslapResult{}, fmt.Errorf("memcaslap %s: %w\n%s", strings.Join(argv, " "), err, tail(out))
	}
	p99, err := parseMemcaslapP99(out)
	if err != nil {
		return memcaslapResult{}, fmt.Errorf("memcaslap %s: %w\n%s", strings.Join(argv, " "), err, tail(out))
	}
	return memcaslapResult{ops: s.tps, p99: p99}, nil
}

// The block after "Total Statistics (N events)" holds "Log2 Dist:" then rows "K: c_K c_K+1 c_K+2 c_K+3", where c_k
// counts the operations whose latency in µs lay in (2^(k-1), 2^k].
var (
	memcaslapTotalRE = regexp.MustCompile(`(?s)Total Statistics \(\d+ events\).*?Log2 Dist:\n(.*?)\n\s*\n`)
	memcaslapRowRE   = regexp.MustCompile(`(?m)^\s*(\d+):((?:\s+\d+)+)\s*$`)
)

// parseMemcaslapP99 is the upper bound in µs of the log2 bucket that holds the 99th percentile of every operation
// memcaslap timed (gets and sets).
func parseMemcaslapP99(out []byte) (float64, error) {
	all := memcaslapTotalRE.FindAllSubmatch(out, -1)
	if len(all) == 0 {
		return 0, errors.New(`no "Total Statistics ... Log2 Dist:" histogram in memcaslap's output (run with -S)`)
	}
	counts := map[int]int64{}
	var total int64
	for _, row := range memcaslapRowRE.FindAllSubmatch(all[len(all)-1][1], -1) {
		k, _ := strconv.Atoi(string(row[1]))
		for j, f := range strings.Fields(string(row[2])) {
			n, _ := strconv.ParseInt(f, 10, 64)
			counts[k+j] += n
			total += n
		}
	}
	if total == 0 {
		return 0, errors.New("memcaslap's latency histogram is empty")
	}
	var seen int64
	for k := 0; k < 64; k++ {
		seen += counts[k]
		if seen*100 >= total*99 {
			return math.Ldexp(1, k), nil
		}
	}
	return 0, errors.New("memcaslap's latency histogram: no 99th percentile")
}

// MemoryRow is one figure of a memory case across its targets: "min / median / max" per target, with the ratio of
// its median to memcached's after it.
type MemoryRow struct {
	Figure string
	Cells  []string // in the order of the case's Results
}

// Rows lays the case out as the text and the page print it.
func (c MemoryCaseReport) Rows() []MemoryRow {
	figures := []struct {
		name   string
		digits int
		get    func(*MemoryResult) *Series
	}{
		{"RSS after the load, MiB", 1, func(r *MemoryResult) *Series { return &r.RSSMiB }},
		{"anonymous RSS (RssAnon), MiB", 1, func(r *MemoryResult) *Series { return &r.AnonMiB }},
		{"file pages in RSS (RssFile: binary, libraries), MiB", 1, func(r *MemoryResult) *Series { return &r.FileMiB }},
		{"RSS at start (before the load), MiB", 1, func(r *MemoryResult) *Series { return &r.StartMiB }},
		{"RSS the load added (after less at start), MiB", 1, func(r *MemoryResult) *Series { return &r.AddedMiB }},
		{"peak RSS, MiB", 1, func(r *MemoryResult) *Series { return &r.PeakMiB }},
		{"items held", 0, func(r *MemoryResult) *Series { return &r.Held }},
		{"load, s", 2, func(r *MemoryResult) *Series { return &r.LoadSeconds }},
		{"memcaslap ops/s", 0, func(r *MemoryResult) *Series { return &r.Ops }},
		{"memcaslap p99 (log2 bucket), µs", 0, func(r *MemoryResult) *Series { return &r.P99us }},
		{"items before the stop", 0, func(r *MemoryResult) *Series { return r.BeforeStop }},
		{"restart, s", 2, func(r *MemoryResult) *Series { return r.RestartSeconds }},
		{"items after the restart", 0, func(r *MemoryResult) *Series { return r.RestartHeld }},
		{"RSS after the restart, MiB", 1, func(r *MemoryResult) *Series { return r.RestartRSSMiB }},
	}
	var base *MemoryResult
	for i := range c.Results {
		if c.Results[i].Target == memcachedTarget {
			base = &c.Results[i]
		}
	}
	var rows []MemoryRow
	for _, f := range figures {
		row := MemoryRow{Figure: f.name}
		any := false
		for i := range c.Results {
			s := f.get(&c.Results[i])
			if s == nil || len(s.Runs) == 0 {
				row.Cells = append(row.Cells, "-")
				continue
			}
			any = true
			num := func(v float64) string { return strconv.FormatFloat(v, 'f', f.digits, 64) }
			cell := num(s.Min) + " / " + num(s.Median) + " / " + num(s.Max)
			if base != nil && &c.Results[i] != base {
				if b := f.get(base); b != nil && b.Median > 0 {
					cell += fmt.Sprintf(" (%.2fx)", s.Median/b.Median)
				}
			}
			row.Cells = append(row.Cells, cell)
		}
		if any {
			rows = append(rows, row)
		}
	}
	return rows
}

// WriteText prints the case as a table: a figure a row, a target a column.
func (c MemoryCaseReport) WriteText(w io.Writer) {
	runs := 0
	if len(c.Results) > 0 {
		runs = len(c.Results[0].RSSMiB.Runs)
	}
	fmt.Fprintf(w, "memory %s: %s; %d runs each, min / median / max (median's ratio to memcached)\n", c.Case, c.Description, runs)
	fmt.Fprintf(w, "  memcaslap on the loaded store: %s\n", c.Load)
	rows := c.Rows()
	fw := 0
	for _, r := range rows {
		fw = max(fw, len([]rune(r.Figure)))
	}
	widths := make([]int, len(c.Results))
	for i, r := range c.Results {
		widths[i] = len(r.Target)
		for _, row := range rows {
			widths[i] = max(widths[i], len([]rune(row.Cells[i])))
		}
	}
	fmt.Fprintf(w, "  %-*s", fw, "figure")
	for i, r := range c.Results {
		fmt.Fprintf(w, "  %-*s", widths[i], r.Target)
	}
	fmt.Fprintln(w)
	for _, row := range rows {
		fmt.Fprintf(w, "  %s%s", row.Figure, strings.Repeat(" ", fw-len([]rune(row.Figure))))
		for i, cell := range row.Cells {
			fmt.Fprintf(w, "  %s%s", cell, strings.Repeat(" ", widths[i]-len([]rune(cell))))
		}
		fmt.Fprintln(w)
	}
}
