package bench

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/keywaydb/keyway/internal/peers"
)

// StalenessOptions configures RunStaleness.
type StalenessOptions struct {
	KeywayBinary string    // path; if empty, peers.KeywayBinary() builds one
	Writes       int       // direct commits measured; default 300
	Readers      int       // clients polling through keyway; default 4
	Out          io.Writer // progress lines; default io.Discard
	Progress     *Progress // the terminal's status line, or nil; the caller plans it with Plan
}

// Plan is RunStaleness's one run and about how long its writes take.
func (o StalenessOptions) Plan() (runs int, hint time.Duration) {
	o.ensureDefaults()
	return 1, time.Duration(o.Writes)*stalenessPause + stalenessSettle
}

// Pacing of the writes: a pause after each commit, and a wait after the last for the readers to see it.
const (
	stalenessPause  = 20 * time.Millisecond
	stalenessSettle = 2 * time.Second
)

func (o *StalenessOptions) ensureDefaults() {
	if o.Writes <= 0 {
		o.Writes = 300
	}
	if o.Readers <= 0 {
		o.Readers = 4
	}
	if o.Out == nil {
		o.Out = io.Discard
	}
}

// StalenessReport is how long a write made directly in MariaDB takes to be read through keyway's result cache.
type StalenessReport struct {
	Command   string  `json:"command,omitempty"` // the keyway command that made it, when the CLI ran it
	Writes    int     `json:"writes"`
	Reads     int64   `json:"reads"`
	Hits      string  `json:"sql_cache_hits"` // SHOW KEYWAY CACHE's figure after the run
	P50MS     float64 `json:"p50_ms"`
	P99MS     float64 `json:"p99_ms"`
	MaxMS     float64 `json:"max_ms"`
	Guarantee string  `json:"guarantee"`
	// Unseen counts writes no read returned before the readers stopped (stalenessSettle after the last commit):
	// their delays enter the figures as the time until then, a lower bound.
	Unseen int `json:"unseen,omitempty"`
}

// RunStaleness measures, for writes made directly in MariaDB, the time from the commit to the first read through
// keyway's SQL door (a cached point select, polled by Readers clients) that returns the write or a later one.
func RunStaleness(ctx context.Context, o StalenessOptions) (*StalenessReport, error) {
	o.ensureDefaults()
	bin, err := prepare(o.KeywayBinary, "mariadbd", "mariadb-install-db")
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(o.Out, "staleness bench: starting MariaDB\n")
	m, err := peers.StartMariaDB(ctx)
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	defer m.Stop()
	direct, err := sql.Open("mysql", m.AppDSN)
	if err != nil {
		return nil, err
	}
	defer direct.Close()
	for _, q := range []string{"CREATE TABLE fresh (id INT PRIMARY KEY, v BIGINT NOT NULL)", "INSERT INTO fresh VALUES (1, 0)"} {
		if _, err := direct.ExecContext(ctx, q); err != nil {
			return nil, fmt.Errorf("bench: %s: %w", q, err)
		}
	}
	cfg, err := writeKeywaySQLConfig(m.Socket, true, keywayLimits{})
	if err != nil {
		return nil, err
	}
	defer os.Remove(cfg)
	kw, err := keywaySQLStarter(keywayTarget, bin, cfg).start(ctx)
	if err != nil {
		return nil, err
	}
	defer kw.stop()
	through, err := sql.Open("mysql", sqlUser+":"+sqlPassword+"@tcp("+kw.addr+")/"+sqlDatabase)
	if err != nil {
		return nil, err
	}
	defer through.Close()
	through.SetMaxIdleConns(o.Readers + 1)
	if err := waitFresh(ctx, through); err != nil {
		return nil, err
	}

	commits := make([]time.Time, o.Writes+1)
	var mu sync.Mutex
	firstSeen := map[int64]time.Time{}
	var reads, readErrs int64
	var lastErr error // the readers' last failed read, for the message when a write is never read
	done := make(chan struct{})
	var wg sync.WaitGroup
	for range o.Readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-done:
					return
				default:
				}
				var v int64
				if err := through.QueryRowContext(ctx, "SELECT v FROM fresh WHERE id = 1").Scan(&v); err != nil {
					mu.Lock()
					readErrs, lastErr = readErrs+1, err
					mu.Unlock()
					continue
				}
				now := time.Now()
				mu.Lock()
				reads++
				if _, ok := firstSeen[v]; !ok {
					firstSeen[v] = now
				}
				mu.Unlock()
			}
		}()
	}
	fmt.Fprintf(o.Out, "staleness bench: %d direct commits, %d readers through keyway\n", o.Writes, o.Readers)
	o.Progress.Start("staleness", 1, 1, fmt.Sprintf("%d writes, %d readers", o.Writes, o.Readers))
	defer o.Progress.Done()
	for i := 1; i <= o.Writes; i++ {
		if _, err := direct.ExecContext(ctx, "UPDATE fresh SET v = ? WHERE id = 1", i); err != nil {
			close(done)
			wg.Wait()
			return nil, err
		}
		commits[i] = time.Now()
		time.Sleep(stalenessPause)
	}
	time.Sleep(stalenessSettle)
	close(done)
	wg.Wait()
	stopped := time.Now()

	var delays []time.Duration
	unseen := 0
	for i := 1; i <= o.Writes; i++ {
		// The first read returning i or a later value.
		var first time.Time
		for v, at := range firstSeen {
			if v >= int64(i) && (first.IsZero() || at.Before(first)) {
				first = at
			}
		}
		if first.IsZero() {
			// Stale for longer than the readers ran: counted as the time until they stopped, a lower bound, and
			// reported, rather than dropped from the figures or ending the bench.
			unseen++
			first = stopped
		}
		delays = append(delays, max(0, first.Sub(commits[i])))
	}
	if unseen > 0 {
		latest := int64(-1)
		for v := range firstSeen {
			latest = max(latest, v)
		}
		fmt.Fprintf(o.Out, "staleness bench: %d of %d writes never read through keyway within %v of the last commit (latest value read %d; %d reads, %d failed reads, the last: %v)\n",
			unseen, o.Writes, stalenessSettle, latest, reads, readErrs, lastErr)
	}
	slices.Sort(delays)
	rep := &StalenessReport{Writes: o.Writes, Reads: reads, P50MS: percentileMS(delays, 0.50), P99MS: percentileMS(delays, 0.99),
		MaxMS: float64(delays[len(delays)-1]) / float64(time.Millisecond), Guarantee: "max_staleness 1s", Unseen: unseen}
	var name string
	rows, err := through.QueryContext(ctx, "SHOW KEYWAY CACHE")
	if err == nil {
		for rows.Next() {
			var v string
			if rows.Scan(&name, &v) == nil && name == "sql_cache_hits_total" {
				rep.Hits = v
			}
		}
		rows.Close()
	}
	return rep, nil
}

// waitFresh waits until keyway's binlog follower vouches for the cache.
func waitFresh(ctx context.Context, db *sql.DB) error {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		rows, err := db.QueryContext(ctx, "SHOW KEYWAY CACHE")
		if err == nil {
			for rows.Next() {
				var name, v string
				if rows.Scan(&name, &v) == nil && strings.HasPrefix(name, "cache_fresh{") && v == "1" {
					rows.Close()
					return nil
				}
			}
			rows.Close()
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("bench: keyway's binlog follower never vouched for the cache")
}

// WriteText prints the figures.
func (r *StalenessReport) WriteText(w io.Writer) {
	fmt.Fprintf(w, "direct write → first fresh read through keyway's SQL cache (%d writes, %d reads, %s cache hits; %s)\n",
		r.Writes, r.Reads, r.Hits, r.Guarantee)
	fmt.Fprintf(w, "p50 %.2f ms  p99 %.2f ms  max %.2f ms\n", r.P50MS, r.P99MS, r.MaxMS)
	if r.Unseen > 0 {
		fmt.Fprintf(w, "STALE: %d of %d writes were never read through keyway before the readers stopped, %v after the last commit; "+
			"their delays are counted as the time until then (a lower bound)\n", r.Unseen, r.Writes, stalenessSettle)
	}
}
