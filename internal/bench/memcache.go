package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/keywaydb/keyway/internal/peers"
)

// MemcacheOptions configures RunMemcache. Zero fields take the defaults
// EnsureDefaults documents.
type MemcacheOptions struct {
	KeywayBinary string        // path; if empty, peers.KeywayBinary() builds one
	Duration     time.Duration // per run, whole seconds (memcaslap's unit); default 10s
	Repetitions  int           // default 3
	Concurrency  int           // memcaslap -c; default 8
	ValueSize    int           // bytes, memcaslap -X; default 400
	SetRatio     float64       // share of sets, the rest gets; default 0.1
	MemoryMB     int           // -m for memcached and keyway; default 1024
	// MemoryCases are the memory case's loads (see memory.go), run after the throughput runs; none when empty.
	// The CLI's --memory gives DefaultMemoryCases unless told otherwise.
	MemoryCases    []MemoryCase
	MemoryDuration time.Duration // memcaslap's run on each loaded store, whole seconds; default 5s
	MemoryOnly     bool          // run the memory case alone, without the throughput runs
	Out            io.Writer     // progress lines; default io.Discard
	Progress       *Progress     // the terminal's status line, or nil; the caller plans it with Plan
}

// Plan is how many runs RunMemcache makes and the time its load generator runs in all.
func (o MemcacheOptions) Plan() (runs int, hint time.Duration) {
	o.EnsureDefaults()
	if !o.MemoryOnly {
		runs = o.Repetitions * 4 // memcached and three keyways
		hint = time.Duration(runs) * o.Duration
	}
	for _, c := range o.MemoryCases {
		// memcached, keyway-memory, keyway-async; each loads (about 4 µs an item here), pauses and runs memcaslap,
		// and keyway-async restarts and pauses again.
		load := time.Duration(c.Items) * 4 * time.Microsecond
		runs += o.Repetitions * 3
		hint += time.Duration(o.Repetitions) * (3*(load+settle+o.MemoryDuration) + settle + load/2)
	}
	return runs, hint
}

// Memcache benchmark targets, in run order. memcachedTarget is the baseline.
const (
	memcachedTarget = "memcached"
	keywayMemory    = "keyway-memory"
	keywayAsync     = "keyway-async"
	keywaySync      = "keyway-sync"
)

// keyLength is the fixed key size memcaslap generates (its own default).
const keyLength = 64

// maxValueSize keeps values under memcached's default 1 MiB item limit with
// room for the item header and key.
const maxValueSize = 1000 * 1000

// EnsureDefaults replaces zero fields with their defaults.
func (o *MemcacheOptions) EnsureDefaults() {
	if o.Duration == 0 {
		o.Duration = 10 * time.Second
	}
	if o.Repetitions == 0 {
		o.Repetitions = 3
	}
	if o.Concurrency == 0 {
		o.Concurrency = 8
	}
	if o.ValueSize == 0 {
		o.ValueSize = 400
	}
	if o.SetRatio == 0 {
		o.SetRatio = 0.1
	}
	if o.MemoryMB == 0 {
		o.MemoryMB = 1024
	}
	if o.MemoryDuration == 0 {
		o.MemoryDuration = 5 * time.Second
	}
	if o.Out == nil {
		o.Out = io.Discard
	}
}

// Validate reports every invalid field at once.
func (o *MemcacheOptions) Validate() error {
	var errs []error
	if o.Duration < time.Second || o.Duration%time.Second != 0 {
		errs = append(errs, fmt.Errorf("duration %v: memcaslap runs for whole seconds; use 1s or more in whole seconds", o.Duration))
	}
	if o.Repetitions < 1 {
		errs = append(errs, fmt.Errorf("repetitions %d: use 1 or more", o.Repetitions))
	}
	if o.Concurrency < 1 {
		errs = append(errs, fmt.Errorf("concurrency %d: use 1 or more", o.Concurrency))
	}
	if o.ValueSize < 1 || o.ValueSize > maxValueSize {
		errs = append(errs, fmt.Errorf("value size %d: use 1 to %d bytes", o.ValueSize, maxValueSize))
	}
	if o.SetRatio < 0 || o.SetRatio > 1 {
		errs = append(errs, fmt.Errorf("set ratio %g: use a share between 0 and 1 (0 means the default 0.1)", o.SetRatio))
	}
	if o.MemoryMB < 1 {
		errs = append(errs, fmt.Errorf("memory %d MB: use 1 or more", o.MemoryMB))
	}
	if o.MemoryOnly && len(o.MemoryCases) == 0 {
		errs = append(errs, errors.New("memory only, with no memory case: give the cases (--memory 1M/100/320) or run the throughput too"))
	}
	if len(o.MemoryCases) > 0 && (o.MemoryDuration < time.Second || o.MemoryDuration%time.Second != 0) {
		errs = append(errs, fmt.Errorf("memory duration %v: memcaslap runs for whole seconds; use 1s or more in whole seconds", o.MemoryDuration))
	}
	for _, c := range o.MemoryCases {
		if c.Items < 1 || c.Value < 0 || c.Value > maxValueSize || c.MemoryMB < 1 {
			errs = append(errs, fmt.Errorf("memory case %+v: items and MB 1 or more, value 0 (the mix) to %d bytes", c, maxValueSize))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("bench: invalid memcache options: %w", err)
	}
	return nil
}

// MemcacheReport is the outcome of RunMemcache.
type MemcacheReport struct {
	Command     string   `json:",omitempty"` // the keyway command that made it, when the CLI ran it
	Concurrency int      // memcaslap -c
	Results     []Result // memcached, keyway-memory, keyway-async, keyway-sync
	// Ratios of medians against memcached: "memory/memcached",
	// "async/memcached", "sync/memcached".
	Ratios map[string]float64
	Load   string // the memcaslap command line, for the record
	// Memory is the memory case, one report per load (none when it was not run).
	Memory []MemoryCaseReport `json:",omitempty"`
}

// RunMemcache benchmarks memcached and keyway's memcache door (in memory,
// persistent async, persistent sync) with memcaslap, alternating targets
// within each repetition and starting a fresh server for every run.
func RunMemcache(ctx context.Context, o MemcacheOptions) (*MemcacheReport, error) {
	o.EnsureDefaults()
	if err := o.Validate(); err != nil {
		return nil, err
	}
	bin, err := prepare(o.KeywayBinary, "memcaslap", "memcached")
	if err != nil {
		return nil, err
	}
	rep := &MemcacheReport{Concurrency: o.Concurrency}
	if !o.MemoryOnly {
		ml, err := newMemcaslap(o)
		if err != nil {
			return nil, err
		}
		defer ml.close()

		mb := strconv.Itoa(o.MemoryMB)
		targets := []target{
			memcachedStarter(mb),
			keywayStarter(keywayMemory, bin, false, "-m", mb),
			keywayStarter(keywayAsync, bin, true, "-m", mb, "--durability", "async"),
			keywayStarter(keywaySync, bin, true, "-m", mb, "--durability", "sync"),
		}
		fmt.Fprintf(o.Out, "memcache bench: %s\n", ml.describe())
		results, err := runTargets(ctx, targets, o.Repetitions, ml.run, meter{client: loadGenerator("memcaslap")}, o.Out, o.Progress,
			fmt.Sprintf("memcache, concurrency %d", o.Concurrency))
		if err != nil {
			return nil, err
		}
		rep.Results, rep.Ratios, rep.Load = results, ratios(results, memcachedTarget), ml.describe()
	}
	if rep.Memory, err = runMemory(ctx, o, bin); err != nil {
		return nil, err
	}
	return rep, nil
}

// WriteText writes the report as a table: per target the min, median and max
// ops/s and the median's ratio to memcached.
func (r *MemcacheReport) WriteText(w io.Writer) {
	if len(r.Results) > 0 {
		if r.Load != "" {
			fmt.Fprintf(w, "load: %s\n", r.Load)
		}
		writeTable(w, r.Results, memcachedTarget, r.Ratios)
		writeCPU(w, r.Results)
	}
	for i, m := range r.Memory {
		if i > 0 || len(r.Results) > 0 {
			fmt.Fprintln(w)
		}
		m.WriteText(w)
	}
}

// memcachedStarter starts a real memcached with -m mb (and its default
// threads).
func memcachedStarter(mb string) target {
	return target{
		name: memcachedTarget,
		start: func(ctx context.Context) (running, error) {
			m, err := peers.StartMemcached(ctx, "-m", mb)
			if err != nil {
				return running{}, err
			}
			return running{m.Addr, m.Stop, []cpuProc{procOf("memcached", m.Process())}}, nil
		},
	}
}

// keywayStarter starts `keyway serve` with args, plus a fresh
// --data-dir when persistent; stop removes the data directory.
func keywayStarter(name, bin string, persistent bool, args ...string) target {
	return target{
		name: name,
		start: func(ctx context.Context) (running, error) {
			argv := slices.Clone(args)
			var dataDir string
			if persistent {
				var err error
				if dataDir, err = os.MkdirTemp("", "keyway-bench-"); err != nil {
					return running{}, fmt.Errorf("make data dir: %w", err)
				}
				argv = append(argv, "--data-dir", dataDir)
			}
			p, err := peers.StartKeywayBinary(ctx, bin, argv...)
			if err != nil {
				if dataDir != "" {
					_ = os.RemoveAll(dataDir)
				}
				return running{}, err
			}
			stop := func() error {
				err := p.Stop()
				if dataDir != "" {
					err = errors.Join(err, os.RemoveAll(dataDir))
				}
				return err
			}
			return running{p.Addr, stop, []cpuProc{procOf("keyway", p)}}, nil
		},
	}
}

// memcaslap drives one server per run with libmemcached's memaslap (Debian
// names it memcaslap).
type memcaslap struct {
	path    string
	cfgPath string   // -F file: key, value and cmd distributions
	args    []string // without -s and -F
	timeout time.Duration
	load    string // the -F file's contents in words, for describe
}

// newMemcaslap writes the -F configuration and fixes the command line. The
// caller must close it to remove the configuration file.
func newMemcaslap(o MemcacheOptions) (*memcaslap, error) {
	path, err := peers.LookPath("memcaslap")
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	f, err := os.CreateTemp("", "keyway-memcaslap-*.cfg")
	if err != nil {
		return nil, fmt.Errorf("bench: memcaslap config: %w", err)
	}
	// Sections: "start_len end_len proportion" for key and value; cmd lines
	// are "type proportion" with 0 = set, 1 = get. -X overrides the value
	// section, which is kept consistent anyway.
	cfg := fmt.Sprintf("key\n%d %d 1\nvalue\n%d %d 1\ncmd\n0 %s\n1 %s\n",
		keyLength, keyLength, o.ValueSize, o.ValueSize,
		formatShare(o.SetRatio), formatShare(1-o.SetRatio))
	_, werr := f.WriteString(cfg)
	if err := errors.Join(werr, f.Close()); err != nil {
		_ = os.Remove(f.Name())
		return nil, fmt.Errorf("bench: memcaslap config: %w", err)
	}
	return &memcaslap{
		path:    path,
		cfgPath: f.Name(),
		args: []string{
			"-T", strconv.Itoa(memcaslapThreads(runtime.NumCPU(), o.Concurrency)),
			"-c", strconv.Itoa(o.Concurrency),
			"-t", strconv.Itoa(int(o.Duration/time.Second)) + "s",
			"-X", strconv.Itoa(o.ValueSize),
		},
		// memcaslap fills a window of keys before the timed run starts.
		timeout: o.Duration + 2*time.Minute,
		load: fmt.Sprintf("keys %d B, values %d B, set share %s, get share %s",
			keyLength, o.ValueSize, formatShare(o.SetRatio), formatShare(1-o.SetRatio)),
	}, nil
}

// formatShare prints a proportion rounded to 6 places, so 1-0.3 prints as
// 0.7 and the cmd section sums to 1.
func formatShare(x float64) string {
	return strconv.FormatFloat(math.Round(x*1e6)/1e6, 'f', -1, 64)
}

// memcaslapThreads is the thread count: one per CPU, but memcaslap insists
// that the concurrency be a multiple of it.
func memcaslapThreads(cpus, concurrency int) int {
	t := max(1, min(cpus, concurrency))
	for concurrency%t != 0 {
		t--
	}
	return t
}

func (m *memcaslap) close() { _ = os.Remove(m.cfgPath) }

func (m *memcaslap) describe() string {
	return "memcaslap -s 127.0.0.1:PORT " + strings.Join(m.args, " ") + " -F CFG (CFG: " + m.load + ")"
}

// run benchmarks the server at addr once.
func (m *memcaslap) run(ctx context.Context, addr string) (sample, error) {
	ctx, cancel := context.WithTimeout(ctx, m.timeout)
	defer cancel()
	argv := append(append([]string{"-s", addr}, m.args...), "-F", m.cfgPath)
	cmd := exec.CommandContext(ctx, m.path, argv...)
	cmd.WaitDelay = 2 * time.Second
	out, err := cmd.CombinedOutput()
	if err != nil {
		return sample{}, fmt.Errorf("memcaslap %s: %w\n%s", strings.Join(argv, " "), err, tail(out))
	}
	s, err := parseMemcaslap(out)
	if err != nil {
		return sample{}, fmt.Errorf("memcaslap %s: %w\n%s", strings.Join(argv, " "), err, tail(out))
	}
	note := fmt.Sprintf("(ops %d in %.1fs; gets %d, sets %d, get misses %d)", s.ops, s.seconds, s.gets, s.sets, s.getMisses)
	return sample{ops: s.tps, n: s.ops, note: note}, nil
}

// memcaslapSummary is what parseMemcaslap extracts from memcaslap's final
// report.
type memcaslapSummary struct {
	tps                   float64 // "TPS:", ops/s over the timed run
	ops                   int64
	seconds               float64
	gets, sets, getMisses int64
}

// The final summary line, e.g.
// "Run time: 3.0s Ops: 581689 TPS: 193883 Net_rate: 101.4M/s".
var memcaslapSummaryRE = regexp.MustCompile(`(?m)^Run time: ([0-9.]+)s Ops: ([0-9]+) TPS: ([0-9]+)`)

// Counters printed above it: "cmd_get: 523516" etc.
var memcaslapCounterRE = regexp.MustCompile(`(?m)^(cmd_get|cmd_set|get_misses): ([0-9]+)\s*$`)

func parseMemcaslap(out []byte) (memcaslapSummary, error) {
	var s memcaslapSummary
	// With -S, memcaslap prints periodic summaries too; the last is final.
	all := memcaslapSummaryRE.FindAllSubmatch(out, -1)
	if len(all) == 0 {
		return s, errors.New(`no "Run time: ... Ops: ... TPS: ..." summary in memcaslap's output`)
	}
	m := all[len(all)-1]
	var err1, err2, err3 error
	s.seconds, err1 = strconv.ParseFloat(string(m[1]), 64)
	s.ops, err2 = strconv.ParseInt(string(m[2]), 10, 64)
	s.tps, err3 = strconv.ParseFloat(string(m[3]), 64)
	if err := errors.Join(err1, err2, err3); err != nil {
		return s, fmt.Errorf("memcaslap summary %q: %w", m[0], err)
	}
	for _, c := range memcaslapCounterRE.FindAllSubmatch(out, -1) {
		n, err := strconv.ParseInt(string(c[2]), 10, 64)
		if err != nil {
			continue // counters only annotate the progress line
		}
		switch string(c[1]) {
		case "cmd_get":
			s.gets = n
		case "cmd_set":
			s.sets = n
		case "get_misses":
			s.getMisses = n
		}
	}
	if s.tps <= 0 {
		return s, fmt.Errorf("memcaslap reported %s ops/s: the server answered nothing", m[3])
	}
	return s, nil
}

// tail returns the end of a command's output for an error message.
func tail(out []byte) string {
	const n = 2048
	s := strings.TrimSpace(string(out))
	if len(s) > n {
		s = "…" + s[len(s)-n:]
	}
	return s
}
