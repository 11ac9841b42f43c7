package main

// keyway stats: a small top-like view of a running keyway, read from its admin listener's /status (JSON) and
// /metrics (the SQL door's counters). On a terminal it redraws every --interval and shows rates; otherwise (a
// pipe, a file) or with --once it prints one snapshot of the totals and exits. A backend user with several pools
// (clients that negotiated different protocol flags) shows on each pool's line the flags that tell it apart.

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/common/expfmt"

	"github.com/keywaydb/keyway/internal/server"
)

// statsDefaultAdmin is the admin address keyway.example.toml uses (the admin listener is off by default).
const statsDefaultAdmin = "127.0.0.1:9104"

func runStats(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("keyway stats", flag.ContinueOnError)
	fs.SetOutput(stderr)
	admin := fs.String("admin", statsDefaultAdmin, "the admin listener's `address` (host:port, [admin] listen)")
	interval := fs.Duration("interval", 2*time.Second, "how often the view refreshes on a terminal")
	once := fs.Bool("once", false, "print one snapshot and exit (the default when stdout is not a terminal)")
	token := fs.String("token", os.Getenv("KEYWAY_ADMIN_TOKEN"), "the admin `token`, when [admin] token is set (default $KEYWAY_ADMIN_TOKEN)")
	if status, done := parseFlags(fs, args, stdout, stderr); done {
		return status
	}
	if fs.NArg() > 0 || *interval <= 0 {
		fmt.Fprintln(stderr, "keyway stats: takes flags only (--admin, --interval > 0, --once, --token)")
		return 2
	}
	r := &statsReader{base: "http://" + *admin, token: *token, client: &http.Client{Timeout: 5 * time.Second}}
	if *once || !isTerminal(stdout) {
		snap, err := r.read()
		if err != nil {
			fmt.Fprintf(stderr, "keyway stats: %v\n", err)
			return 1
		}
		writeStats(stdout, *admin, snap, nil, 0)
		return 0
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var prev *statsSnapshot
	var prevAt time.Time
	for {
		snap, err := r.read()
		now := time.Now()
		fmt.Fprint(stdout, "\x1b[H\x1b[2J") // home, clear screen
		if err != nil {
			fmt.Fprintf(stdout, "keyway stats: %v (retrying every %s; ^C to quit)\n", err, *interval)
			prev = nil
		} else {
			writeStats(stdout, *admin, snap, prev, now.Sub(prevAt))
			prev, prevAt = snap, now
		}
		select {
		case <-ctx.Done():
			return 0
		case <-time.After(*interval):
		}
	}
}

// statsSnapshot is one reading: /status as the server types it, and /metrics summed by metric name.
type statsSnapshot struct {
	status  server.Status
	metrics map[string]float64
}

type statsReader struct {
	base, token string
	client      *http.Client
}

func (r *statsReader) get(path string) (*http.Response, error) {
	req, err := http.NewRequest(http.MethodGet, r.base+path, nil)
	if err != nil {
		return nil, err
	}
	if r.token != "" {
		req.Header.Set("Authorization", "Bearer "+r.token)
	}
	resp, err := r.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%w (is keyway running with [admin] listen, or --admin-listen, at this address?)", err)
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		hint := ""
		if resp.StatusCode == http.StatusUnauthorized {
			hint = " (give the admin token with --token or $KEYWAY_ADMIN_TOKEN)"
		}
		return nil, fmt.Errorf("GET %s: %s%s", r.base+path, resp.Status, hint)
	}
	return resp, nil
}

// read fetches /status and /metrics. /metrics is optional (a keyway without it, or one that protects it).
func (r *statsReader) read() (*statsSnapshot, error) {
	resp, err := r.get("/status")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	snap := &statsSnapshot{metrics: map[string]float64{}}
	if err := json.NewDecoder(resp.Body).Decode(&snap.status); err != nil {
		return nil, fmt.Errorf("GET %s/status: %w", r.base, err)
	}
	if resp, err := r.get("/metrics"); err == nil {
		defer resp.Body.Close()
		snap.metrics = sumMetrics(resp.Body)
	}
	return snap, nil
}

// sumMetrics reads the Prometheus text format (with prometheus/common's parser) and sums each counter's, gauge's
// and untyped metric's samples over their labels, which is all the view needs: totals per name. A body that does
// not parse gives what was read before the problem (the view shows "-" for the rest).
func sumMetrics(r io.Reader) map[string]float64 {
	out := map[string]float64{}
	var p expfmt.TextParser
	fams, _ := p.TextToMetricFamilies(r)
	for name, f := range fams {
		for _, m := range f.GetMetric() {
			switch {
			case m.Counter != nil:
				out[name] += m.GetCounter().GetValue()
			case m.Gauge != nil:
				out[name] += m.GetGauge().GetValue()
			case m.Untyped != nil:
				out[name] += m.GetUntyped().GetValue()
			}
		}
	}
	return out
}

// writeStats draws one view of snap. With prev (the reading elapsed before) it shows rates too.
func writeStats(w io.Writer, admin string, snap *statsSnapshot, prev *statsSnapshot, elapsed time.Duration) {
	st := &snap.status
	rate := func(cur, old float64) string {
		if prev == nil || elapsed <= 0 {
			return ""
		}
		return fmt.Sprintf(" (%.0f/s)", (cur-old)/elapsed.Seconds())
	}
	fmt.Fprintf(w, "keyway at %s\n", admin)

	if st.Memcache.Listen == "" {
		fmt.Fprintln(w, "memcache   off")
	} else {
		m := st.Memcache.Stats
		var pm map[string]int64
		if prev != nil {
			pm = prev.status.Memcache.Stats
		}
		mr := func(name string) string { return rate(float64(m[name]), float64(pm[name])) }
		fmt.Fprintf(w, "memcache   %s  connections %d  items %d  memory %s of %s  evictions %d\n",
			st.Memcache.Listen, m["curr_connections"], m["curr_items"], bytesText(m["bytes"]), bytesText(m["limit_maxbytes"]), m["evictions"])
		fmt.Fprintf(w, "           gets %d%s  hits %s  sets %d%s\n",
			m["cmd_get"], mr("cmd_get"), ratio(m["get_hits"], m["get_hits"]+m["get_misses"]), m["cmd_set"], mr("cmd_set"))
	}
	store := "memory only (nothing kept across a restart)"
	if st.Store.DataDir != "" {
		store = "data_dir " + st.Store.DataDir + "  durability " + st.Store.Durability
	}
	fmt.Fprintf(w, "store      %s\n", store)

	for _, g := range st.Groups {
		state := "up"
		if !g.Up {
			state = "DOWN"
			if g.LastError != "" {
				state += ": " + g.LastError
			}
		}
		fmt.Fprintf(w, "group      %s  %s  %s\n", g.Name, g.Primary, state)
	}
	if st.SQL != nil {
		var pq float64
		if prev != nil {
			pq = prev.metrics["keyway_sql_queries_total"]
		}
		fmt.Fprintf(w, "sql        %s  connections %.0f  queries %.0f%s\n", st.SQL.Listen,
			snap.metrics["keyway_sql_connections"], snap.metrics["keyway_sql_queries_total"], rate(snap.metrics["keyway_sql_queries_total"], pq))
		apart := poolsApart(st.SQL.Pools)
		for i, p := range st.SQL.Pools {
			fmt.Fprintf(w, "  pool     %s  %s  %sopen %d  idle %d  in_use %d  waits %d  errors %d\n",
				p.Group, p.User, apart[i], p.Open, p.Idle, p.InUse, p.Waits, p.Errors)
		}
	}
	if c := st.SQLCache; c != nil {
		fmt.Fprintf(w, "sql cache  hits %s  entries %d  memory %s  fresh %v\n",
			ratio(c.Hits, c.Hits+c.Misses), c.Entries, bytesText(c.Bytes), c.Fresh)
	}
	for _, b := range st.Binlog {
		fmt.Fprintf(w, "binlog     %s  %s  lag %dms  commits %d  gaps %d  reconnects %d\n",
			b.Group, b.State, b.LagMS, b.Commits, b.Gaps, b.Reconn)
	}
	names := make([]string, 0, len(st.Containers))
	for name := range st.Containers {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		c := st.Containers[name]
		checked := "checked"
		if !c.Checked {
			checked = "NOT CHECKED (waiting for its backend)"
		}
		line := fmt.Sprintf("container  %s  %s  %s  get %s  set %s  write %s  batches %d  rows %d",
			name, c.Table, checked, c.Get, c.Set, c.Write, c.GroupCommit.Batches, c.GroupCommit.BatchedSets)
		if wb := c.WriteBehind; wb != nil {
			line += fmt.Sprintf("  pending %d  written %d  dropped %d", wb.Pending, wb.Written, wb.Dropped)
		}
		fmt.Fprintln(w, line)
	}
}

// poolsApart says, for each pool, what tells it apart from the other pools of its group and user ("" for a pool
// that has none): the protocol flags its clients negotiated that some of those others did not ("+NAME") and the
// ones they negotiated and its clients did not ("-NAME"), by their names without CLIENT_ (the mariadb CLI and PHP
// mysqli, say, get a pool each), and its collation id when theirs differ. Each is followed by two spaces.
func poolsApart(pools []server.PoolStatus) []string {
	type owner struct{ group, user string }
	count := map[owner]int{}          // pools per group and user
	has := map[owner]map[string]int{} // how many of them have each flag
	collations := map[owner]map[int]bool{}
	for _, p := range pools {
		o := owner{p.Group, p.User}
		count[o]++
		if collations[o] == nil {
			collations[o] = map[int]bool{}
		}
		collations[o][p.Collation] = true
		if has[o] == nil {
			has[o] = map[string]int{}
		}
		for _, c := range p.Capabilities {
			has[o][c]++
		}
	}
	out := make([]string, len(pools))
	for i, p := range pools {
		o := owner{p.Group, p.User}
		if count[o] < 2 {
			continue
		}
		own := map[string]bool{}
		for _, c := range p.Capabilities {
			own[c] = true
		}
		var plus, minus []string
		for c, n := range has[o] {
			short := strings.TrimPrefix(strings.TrimPrefix(c, "MARIADB_"), "CLIENT_")
			switch {
			case n == count[o]: // every pool of the owner has it
			case own[c]:
				plus = append(plus, "+"+short)
			default:
				minus = append(minus, "-"+short)
			}
		}
		sort.Strings(plus)
		sort.Strings(minus)
		apart := append(plus, minus...)
		if len(collations[o]) > 1 { // clients that asked for different character sets
			apart = append(apart, "collation "+strconv.Itoa(p.Collation))
		}
		if d := strings.Join(apart, " "); d != "" {
			out[i] = d + "  "
		}
	}
	return out
}

// ratio is part of whole as a percentage, or "-" when whole is 0.
func ratio(part, whole int64) string {
	if whole == 0 {
		return "-"
	}
	return strconv.FormatFloat(100*float64(part)/float64(whole), 'f', 1, 64) + "%"
}

// bytesText shows n in binary units, as keyway's sizes are written.
func bytesText(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return strconv.FormatInt(n, 10) + " B"
}
