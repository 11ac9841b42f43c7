package bench

import (
	"bytes"
	"fmt"
	"io"
	"sync"
	"time"
)

// Progress is the one-line status a long benchmark keeps on a terminal: the scenario, the round, how many runs are
// done and about how long is left. Every method is safe on a nil *Progress, which shows nothing, so the runners call
// it unconditionally; the caller creates one only when its output is a terminal.
//
// Time left is the mean wall time of the runs done so far times the runs left; before the first run ends it is the
// planned run time alone (Plan's hint), since starting servers and filling tables cannot be known in advance.
type Progress struct {
	w   io.Writer
	now func() time.Time

	mu       sync.Mutex
	total    int           // runs planned, over every suite
	done     int           // runs finished
	hint     time.Duration // the planned time of the runs not yet measured, before any has finished
	started  time.Time     // when the first run started
	status   string        // what is running now, without the counters
	drawn    bool          // a status line is on the screen
	lineTail []byte        // a log line written without its newline yet
}

// NewProgress draws the status line on w, a terminal.
func NewProgress(w io.Writer) *Progress { return &Progress{w: w, now: time.Now} }

// Plan adds runs to the total, with hint the time they are expected to take (their load generators' durations).
func (p *Progress) Plan(runs int, hint time.Duration) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.total += runs
	p.hint += hint
}

// Start says that a run begins: scenario ("sql oltp_point_select, 4 threads"), round (repetition) of rounds, and the
// target measured.
func (p *Progress) Start(scenario string, round, rounds int, target string) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.started.IsZero() {
		p.started = p.now()
	}
	p.status = fmt.Sprintf("%s · round %d/%d · %s", scenario, round, rounds, target)
	p.drawLocked()
}

// Done says that the run Start announced has ended. The line stays until the next Start redraws it, but log lines
// written in between no longer bring back the finished run's status.
func (p *Progress) Done() {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.done++
	p.status = ""
}

// Clear removes the status line, for the end of the benchmark.
func (p *Progress) Clear() {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.clearLocked()
	p.status = ""
}

// Log returns a writer for the benchmark's own log lines (the per-run results) that keeps them apart from the
// status line: the status is cleared before a line is written and drawn again after it.
func (p *Progress) Log(out io.Writer) io.Writer {
	if p == nil || out == nil {
		return out
	}
	return progressLog{p, out}
}

type progressLog struct {
	p   *Progress
	out io.Writer
}

func (l progressLog) Write(b []byte) (int, error) {
	p := l.p
	p.mu.Lock()
	defer p.mu.Unlock()
	// Only whole lines go out, so the status line is never drawn in the middle of one.
	p.lineTail = append(p.lineTail, b...)
	i := bytes.LastIndexByte(p.lineTail, '\n')
	if i < 0 {
		return len(b), nil
	}
	p.clearLocked()
	_, err := l.out.Write(p.lineTail[:i+1])
	p.lineTail = append(p.lineTail[:0], p.lineTail[i+1:]...)
	p.drawLocked()
	return len(b), err
}

// left is the estimated time to the end.
func (p *Progress) leftLocked() (time.Duration, bool) {
	if p.done == 0 {
		return p.hint, p.hint > 0
	}
	mean := p.now().Sub(p.started) / time.Duration(p.done)
	return mean * time.Duration(max(p.total-p.done, 0)), true
}

func (p *Progress) drawLocked() {
	if p.status == "" {
		return
	}
	line := fmt.Sprintf("%s · run %d/%d", p.status, min(p.done+1, p.total), p.total)
	if left, ok := p.leftLocked(); ok {
		line += " · about " + left.Round(time.Second).String() + " left"
	}
	// \r to the line's start, ESC[K erases it: the status is always one line, rewritten.
	fmt.Fprintf(p.w, "\r\x1b[K%s", line)
	p.drawn = true
}

func (p *Progress) clearLocked() {
	if p.drawn {
		fmt.Fprint(p.w, "\r\x1b[K")
		p.drawn = false
	}
}
