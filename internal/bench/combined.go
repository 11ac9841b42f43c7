package bench

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Report is every suite's results from one machine: what `keyway bench report` writes as report.json and draws as
// index.html, and what `keyway bench compare` reads. A suite that did not run is nil.
type Report struct {
	Machine Machine
	// Commands reproduce the report: each suite's keyway command, then the one that drew the report.
	Commands  []string
	Memcache  *MemcacheReport  `json:",omitempty"`
	SQL       *SQLReport       `json:",omitempty"`
	KV        *KVReport        `json:",omitempty"`
	Staleness *StalenessReport `json:",omitempty"`
	Cache     *CacheReport     `json:",omitempty"`
	Replicas  *ReplicasReport  `json:",omitempty"`
	Shard     *ShardReport     `json:",omitempty"`
}

// ReadReports reads JSON files written by `keyway bench report` (report.json) or by `keyway bench SUITE --json`,
// and gathers them into one Report. A file's kind is told by its fields, so any suite's output can be given as is;
// two files holding the same suite are an error, since the report would have to drop one. The machine is the first
// report.json's; with suite files alone it is zero, for the caller to fill.
func ReadReports(files ...string) (*Report, error) {
	r := &Report{}
	from := map[string]string{} // suite → the file it came from
	claim := func(suite, file string) error {
		if prev, ok := from[suite]; ok {
			return fmt.Errorf("bench: %s and %s both hold %s results: give one of them", prev, file, suite)
		}
		from[suite] = file
		return nil
	}
	for _, file := range files {
		b, err := os.ReadFile(file)
		if err != nil {
			return nil, fmt.Errorf("bench: %w", err)
		}
		var fields map[string]json.RawMessage
		if err := json.Unmarshal(b, &fields); err != nil {
			return nil, fmt.Errorf("bench: %s: not a benchmark's JSON: %w", file, err)
		}
		var sub Report
		switch {
		case fields["Machine"] != nil:
			err = json.Unmarshal(b, &sub)
		case fields["ShardCases"] != nil:
			err = json.Unmarshal(b, &sub.Shard)
		case fields["ReadYourWrites"] != nil:
			err = json.Unmarshal(b, &sub.Replicas)
		case fields["Restart"] != nil:
			err = json.Unmarshal(b, &sub.Cache)
		case fields["p50_ms"] != nil:
			err = json.Unmarshal(b, &sub.Staleness)
		case fields["Pairs"] != nil:
			err = json.Unmarshal(b, &sub.KV)
		case fields["Cases"] != nil:
			err = json.Unmarshal(b, &sub.SQL)
		case fields["Results"] != nil:
			err = json.Unmarshal(b, &sub.Memcache)
		default:
			return nil, fmt.Errorf("bench: %s: not the JSON of `keyway bench report` or of `keyway bench memcache|sql|kv|staleness|cache|replicas|shard --json`", file)
		}
		if err != nil {
			return nil, fmt.Errorf("bench: %s: %w", file, err)
		}
		if r.Machine.When.IsZero() {
			r.Machine = sub.Machine
		}
		r.Commands = append(r.Commands, sub.Commands...)
		if sub.Memcache != nil {
			if err := claim("memcache", file); err != nil {
				return nil, err
			}
			r.Memcache = sub.Memcache
			r.addCommand(sub.Machine, sub.Memcache.Command)
		}
		if sub.SQL != nil {
			if err := claim("sql", file); err != nil {
				return nil, err
			}
			r.SQL = sub.SQL
			r.addCommand(sub.Machine, sub.SQL.Command)
		}
		if sub.KV != nil {
			if err := claim("kv", file); err != nil {
				return nil, err
			}
			r.KV = sub.KV
			r.addCommand(sub.Machine, sub.KV.Command)
		}
		if sub.Staleness != nil {
			if err := claim("staleness", file); err != nil {
				return nil, err
			}
			r.Staleness = sub.Staleness
			r.addCommand(sub.Machine, sub.Staleness.Command)
		}
		if sub.Cache != nil {
			if err := claim("cache", file); err != nil {
				return nil, err
			}
			r.Cache = sub.Cache
			r.addCommand(sub.Machine, sub.Cache.Command)
		}
		if sub.Replicas != nil {
			if err := claim("replicas", file); err != nil {
				return nil, err
			}
			r.Replicas = sub.Replicas
			r.addCommand(sub.Machine, sub.Replicas.Command)
		}
		if sub.Shard != nil {
			if err := claim("shard", file); err != nil {
				return nil, err
			}
			r.Shard = sub.Shard
			r.addCommand(sub.Machine, sub.Shard.Command)
		}
	}
	if r.Memcache == nil && r.SQL == nil && r.KV == nil && r.Staleness == nil && r.Cache == nil && r.Replicas == nil && r.Shard == nil {
		return nil, errors.New("bench: no benchmark results in the files given")
	}
	return r, nil
}

// addCommand records a suite file's own command; a report.json (machine set) already lists its commands.
func (r *Report) addCommand(m Machine, cmd string) {
	if m.When.IsZero() && cmd != "" {
		r.Commands = append(r.Commands, cmd)
	}
}

// JSON is the report as indented JSON, as report.json holds it.
func (r *Report) JSON() ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false) // the commands hold "> file.json", to be read as written
	if err := enc.Encode(r); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// Scenario is one comparison the report draws: the same load on several targets, at one or more concurrencies.
type Scenario struct {
	ID       string // stable across runs, for compare: "memcache", "sql/oltp_point_select", "kv/load", "kv/fetch"
	Title    string
	Load     string // the load generator's command line, when the suite records it
	Unit     string // of the throughput: "ops/s" or "queries/s"
	Clients  string // what the concurrency counts: "clients", "threads"
	Baseline string // the target the suite divides by
	// LatencyNote says what latency the suite measures, truthfully: which percentiles, or why there are none.
	LatencyNote string
	Cases       []Case
	// Fit is what each target's statements cost, fitted over the cases (lone_client: the concurrency is the
	// selects per page); Targets are the lines that set the figures against their targets, met or not.
	Fit     []StatementCost
	Targets []string
}

// Case is one concurrency of a scenario.
type Case struct {
	Concurrency int
	Results     []Result  // throughput per target, in run order
	Latency     []Latency // per target, in the order of Results; empty when the load generator reports none
}

// Latency is one target's latency percentiles, in ms.
type Latency struct {
	Target      string
	Percentiles []Percentile
}

// Percentile is one latency percentile over the repetitions.
type Percentile struct {
	Name string // "p50", "p95", "p99"
	Series
}

// Scenarios flattens the suites into scenarios, in a fixed order: memcache, sql (per workload), kv load, kv fetch,
// then the cache suite's sysbench and PHP loops. Staleness, and the cache suite's staleness and restart, measure no
// throughput to compare and are drawn on their own.
func (r *Report) Scenarios() []Scenario {
	var out []Scenario
	if m := r.Memcache; m != nil && len(m.Results) > 0 {
		out = append(out, Scenario{
			ID: "memcache", Title: "memcache door: memcaslap gets and sets", Load: m.Load, Unit: "ops/s", Clients: "clients",
			Baseline:    memcachedTarget,
			LatencyNote: "memcaslap reports no latency percentiles, so this scenario has no latency chart.",
			Cases:       []Case{{Concurrency: memcacheConcurrency(m), Results: m.Results}},
		})
	}
	if s := r.SQL; s != nil {
		out = append(out, sqlScenarios(s, "sql/", "SQL door: sysbench ")...)
	}
	if kv := r.KV; kv != nil {
		load := Scenario{ID: "kv/load", Title: fmt.Sprintf("KV load: %d pairs, INSERT direct vs memcache set through keyway", kv.Pairs),
			Unit: "ops/s", Clients: "clients", Baseline: insertTarget, LatencyNote: "per-operation latency, p50 and p99."}
		fetch := Scenario{ID: "kv/fetch", Title: "KV fetch: prepared SELECT vs memcache get through keyway vs memcached",
			Unit: "ops/s", Clients: "clients", Baseline: selectTarget, LatencyNote: "per-operation latency, p50 and p99."}
		for _, c := range kv.Cases {
			k := Case{Concurrency: c.Concurrency, Results: c.Results}
			for _, l := range c.Latency {
				k.Latency = append(k.Latency, Latency{Target: l.Target, Percentiles: []Percentile{{"p50", l.P50}, {"p99", l.P99}}})
			}
			if c.Phase == "fetch" {
				fetch.Cases = append(fetch.Cases, k)
			} else {
				load.Cases = append(load.Cases, k)
			}
		}
		for _, s := range []Scenario{load, fetch} {
			if len(s.Cases) > 0 {
				out = append(out, s)
			}
		}
	}
	if c := r.Cache; c != nil {
		if c.SQL != nil {
			out = append(out, sqlScenarios(c.SQL, "cache/", "Cache: sysbench ")...)
		}
		for _, p := range c.PHP {
			out = append(out, Scenario{
				ID: "cache/php " + strings.TrimSpace(p.Query[strings.Index(p.Query, "*/")+2:]), Title: fmt.Sprintf("Cache: seed 003's PHP mysqli loop, %s (%d×)", p.Query, p.Loops),
				Unit: "ops/s", Clients: "clients", Baseline: directTarget,
				LatencyNote: "the loop is timed whole: no latency percentiles.",
				Cases:       []Case{{Concurrency: 1, Results: p.Results}},
			})
		}
	}
	if rp := r.Replicas; rp != nil && rp.SQL != nil {
		out = append(out, sqlScenarios(rp.SQL, "replicas/", "Replicas: sysbench ")...)
	}
	return out
}

// sqlScenarios is one scenario per workload of a sysbench report (and per client case: many_clients,
// connect_only); id and title prefix them.
func sqlScenarios(s *SQLReport, id, title string) []Scenario {
	var out []Scenario
	byWorkload := map[string]int{}
	for _, c := range s.Cases {
		i, ok := byWorkload[c.Workload]
		if !ok {
			i = len(out)
			byWorkload[c.Workload] = i
			sc := Scenario{
				ID: id + c.Workload, Title: title + c.Workload, Load: s.Load, Unit: "queries/s",
				Clients: "threads", Baseline: directTarget,
				LatencyNote: "sysbench reports one latency percentile here, the 95th: p95 is charted; p50 and p99 were not measured.",
			}
			switch c.Workload {
			case manyClientsWorkload:
				sc.Title = fmt.Sprintf("SQL door: many clients, each one point select a second (MariaDB max_connections %d, keyway's pool %d)",
					c.ServerMaxConnections, c.Pool)
				sc.Load = fmt.Sprintf("Go clients (go-sql-driver), one connection each held for the run, %s once a second each", manyClientsQuery)
				sc.Unit, sc.Clients = "queries/s", "clients"
				sc.LatencyNote = "p50 and p99 of the selects that were answered (refused and failed ones are counted as errors, not timed)."
			case connectWorkload:
				sc.Title = "SQL door: PHP mysqli connect + close, one process"
				sc.Load = "php: mysqli_connect(HOST, 'app', 'secret', 'test', PORT); mysqli_close(); in a loop"
				sc.Unit, sc.Clients = "connects/s", "clients"
				sc.LatencyNote = "the loop counts connects: no latency percentiles."
			case loneWorkload:
				sc.Title = "SQL door: one PHP client, pages of point selects, a new connection per page"
				sc.Load = "php: per page mysqli_connect(HOST, 'app', 'secret', 'test', PORT); N × mysqli_query('" + loneQuery +
					"', random id); mysqli_close(); one page after another, every run warmed first (each row read once)"
				sc.Unit, sc.Clients = "pages/s", "selects"
				sc.LatencyNote = "the loop counts pages: no latency percentiles; the µs a page is the inverse of pages/s, and the fit below splits it into the connect's and the statements'."
				sc.Fit = s.StatementCosts
			}
			out = append(out, sc)
		}
		k := Case{Concurrency: c.Threads, Results: c.Results}
		if c.Workload == loneWorkload {
			k.Concurrency = c.PageSize
			out[i].Targets = append(out[i].Targets, loneVerdicts(c)...)
		}
		for _, res := range c.Results {
			var ps []Percentile
			for _, p := range []struct {
				name string
				s    *Series
			}{{"p50", res.P50}, {"p95", res.P95}, {"p99", res.P99}} {
				if p.s != nil {
					ps = append(ps, Percentile{p.name, *p.s})
				}
			}
			if len(ps) > 0 {
				k.Latency = append(k.Latency, Latency{Target: res.Target, Percentiles: ps})
			}
		}
		out[i].Cases = append(out[i].Cases, k)
	}
	return out
}

// memcacheConcurrency is the report's concurrency, or for reports written before it was recorded, memcaslap's -c.
func memcacheConcurrency(m *MemcacheReport) int {
	if m.Concurrency > 0 {
		return m.Concurrency
	}
	if sm := memcaslapConcRE.FindStringSubmatch(m.Load); sm != nil {
		n, _ := strconv.Atoi(sm[1])
		return n
	}
	return 0
}

var memcaslapConcRE = regexp.MustCompile(`-c (\d+)`)

// CaseLabel names a concurrency in the scenario's unit: "1 thread", "8 clients".
func (s Scenario) CaseLabel(n int) string {
	word := s.Clients
	if n == 1 {
		word = strings.TrimSuffix(word, "s")
	}
	return strconv.Itoa(n) + " " + word
}

// PercentileNames are the latency percentiles a scenario has, in order.
func (s Scenario) PercentileNames() []string {
	var names []string
	for _, c := range s.Cases {
		for _, l := range c.Latency {
			for _, p := range l.Percentiles {
				if !slices.Contains(names, p.Name) {
					names = append(names, p.Name)
				}
			}
		}
	}
	return names
}

// Win is one row of the "who wins" table: at one concurrency of a scenario, the target with the highest median
// throughput and how far ahead of the next one it is.
type Win struct {
	ScenarioID, Scenario string
	Concurrency          int
	Label                string // the concurrency in words: "8 clients"
	Unit                 string
	Winner               string
	WinnerMedian         float64
	RunnerUp             string
	RunnerUpMedian       float64
	Ratio                float64 // WinnerMedian / RunnerUpMedian
	// Clear is true when the winner's slowest run beat the runner-up's fastest: the win is beyond the noise seen.
	// It is false when either ran once, since one run shows no noise to be beyond.
	Clear bool
	Runs  int // the fewer runs of the two
}

// Wins is the "who wins" table: one row per scenario and concurrency with two targets or more.
func (r *Report) Wins() []Win {
	var wins []Win
	for _, s := range r.Scenarios() {
		for _, c := range s.Cases {
			if len(c.Results) < 2 {
				continue
			}
			ranked := slices.Clone(c.Results)
			slices.SortStableFunc(ranked, func(a, b Result) int { return -cmp.Compare(a.Median, b.Median) })
			w, u := ranked[0], ranked[1]
			win := Win{ScenarioID: s.ID, Scenario: s.Title, Concurrency: c.Concurrency, Label: s.CaseLabel(c.Concurrency), Unit: s.Unit,
				Winner: w.Target, WinnerMedian: w.Median, RunnerUp: u.Target, RunnerUpMedian: u.Median,
				Runs: min(len(w.Runs), len(u.Runs))}
			win.Clear = win.Runs > 1 && w.Min > u.Max
			if u.Median > 0 {
				win.Ratio = w.Median / u.Median
			}
			wins = append(wins, win)
		}
	}
	return wins
}

// SetCommand records the keyway command that made the report.
func (r *MemcacheReport) SetCommand(c string) { r.Command = c }

// SetCommand records the keyway command that made the report.
func (r *SQLReport) SetCommand(c string) { r.Command = c }

// SetCommand records the keyway command that made the report.
func (r *KVReport) SetCommand(c string) { r.Command = c }

// SetCommand records the keyway command that made the report.
func (r *StalenessReport) SetCommand(c string) { r.Command = c }

// Add puts one suite's report (what RunMemcache, RunSQL, RunKV or RunStaleness returned) in r.
func (r *Report) Add(suite any) error {
	switch s := suite.(type) {
	case *MemcacheReport:
		r.Memcache = s
	case *SQLReport:
		r.SQL = s
	case *KVReport:
		r.KV = s
	case *StalenessReport:
		r.Staleness = s
	case *CacheReport:
		r.Cache = s
	case *ReplicasReport:
		r.Replicas = s
	case *ShardReport:
		r.Shard = s
	default:
		return fmt.Errorf("bench: %T is not a suite's report", suite)
	}
	return nil
}

// WriteWins prints the "who wins" table.
func (r *Report) WriteWins(w io.Writer) {
	wins := r.Wins()
	sw, ww, uw := len("scenario"), len("winner"), len("runner-up")
	for _, x := range wins {
		sw, ww, uw = max(sw, len(x.ScenarioID)), max(ww, len(x.Winner)), max(uw, len(x.RunnerUp))
	}
	fmt.Fprintf(w, "%-*s  %11s  %-*s  %-*s  %6s  %s\n", sw, "scenario", "concurrency", ww, "winner", uw, "runner-up", "ratio", "beyond noise")
	for _, x := range wins {
		clear := "no"
		switch {
		case x.Clear:
			clear = "yes"
		case x.Runs < 2:
			clear = "unknown: one run"
		}
		fmt.Fprintf(w, "%-*s  %11d  %-*s  %-*s  %5.2fx  %s\n", sw, x.ScenarioID, x.Concurrency, ww, x.Winner, uw, x.RunnerUp, x.Ratio, clear)
	}
}
