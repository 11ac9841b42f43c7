package admin

import (
	"embed"
	"encoding/json"
	"math"
	"net/http"
	"sort"
	"strconv"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/keywaydb/keyway/internal/chart"
	"github.com/keywaydb/keyway/internal/stats"
)

// The dashboard: GET / serves one embedded page (web/index.html: no fetched fonts, scripts or styles) whose script
// polls GET /api/dashboard and swaps in the charts of GET /api/chart/{name}.svg, drawn here from the sampler's ring
// by internal/chart (the same charts as the benchmark report).

//go:embed web/index.html
var webFS embed.FS

// dashboardTopDigests is how many digests /api/dashboard lists, the most total time first.
const dashboardTopDigests = 10

// Dashboard is the body of GET /api/dashboard.
type Dashboard struct {
	Time            time.Time `json:"time"`
	IntervalSeconds float64   `json:"interval_seconds"` // between samples
	WindowSeconds   float64   `json:"window_seconds"`   // what the series and charts span
	// Totals are cumulative counts since start: memcache_ops (the commands of memcacheOps) and sql_queries.
	Totals map[string]float64 `json:"totals"`
	// Now is the latest interval's figure of every series (null when it cannot be derived: no traffic).
	Now map[string]*float64 `json:"now"`
	// Series, only with ?series=1: "t" holds each point's time (Unix seconds), the rest one value per point.
	Series     map[string][]*float64 `json:"series,omitempty"`
	Charts     []string              `json:"charts"` // names for /api/chart/{name}.svg
	Groups     []GroupRow            `json:"groups"`
	Containers []ContainerRow        `json:"containers"`
	Store      StoreRow              `json:"store"`
	Digests    []DigestRow           `json:"digests"`
	// ShardMapVersion is the shard map's version, absent without sharding.
	ShardMapVersion *float64 `json:"shard_map_version,omitempty"`
}

// GroupRow is one member of a backend group.
type GroupRow struct {
	Group     string  `json:"group"`
	Address   string  `json:"address"`
	Role      string  `json:"role"`  // "primary" (replicas when they exist)
	State     string  `json:"state"` // "up" or "down"
	PoolInUse float64 `json:"pool_in_use"`
	PoolOpen  float64 `json:"pool_open"`
	PoolMax   float64 `json:"pool_max"` // per pool (one pool per user and capability set)
	// PoolWaiting are the statements waiting for a connection; Pinned the SQL sessions that keep theirs.
	PoolWaiting float64  `json:"pool_waiting"`
	Pinned      float64  `json:"pinned"`
	LagSeconds  *float64 `json:"lag_seconds,omitempty"`
	BinlogState string   `json:"binlog,omitempty"` // "following" or "not following"; "" without a follower
	// Cache is the group's cached copies (keyway_cache_fresh): "fresh" while a follower vouches for them, else
	// "not fresh" and how they are kept (see cacheState).
	Cache string `json:"cache,omitempty"`
}

// ContainerRow is one container.
type ContainerRow struct {
	Name    string `json:"name"`
	Table   string `json:"table"`
	Group   string `json:"group"`
	Checked bool   `json:"checked"`
	Get     string `json:"get"`
	Set     string `json:"set"`
	Delete  string `json:"delete"`
	Flush   string `json:"flush"`
	Write   string `json:"write"` // "sync" or "async"
	// Group commit: statements run and rows they carried.
	Batches     float64 `json:"group_commit_batches"`
	BatchedRows float64 `json:"group_commit_rows"`
	// Write-behind (async containers): rows queued, written, dropped, and rounds that failed.
	Pending      float64 `json:"write_behind_pending"`
	Written      float64 `json:"write_behind_written"`
	Dropped      float64 `json:"write_behind_dropped"`
	FailedRounds float64 `json:"write_behind_failed_rounds"`
}

// StoreRow is the local store.
type StoreRow struct {
	UsedBytes  float64 `json:"used_bytes"`
	LimitBytes float64 `json:"limit_bytes"`
	Items      float64 `json:"items"`
	Evictions  float64 `json:"evictions"`
	Persistent bool    `json:"persistent"`
	Durability string  `json:"durability"` // "none", "async", "sync"
}

// DigestRow is one SQL digest.
type DigestRow struct {
	Digest  string  `json:"digest"`
	Text    string  `json:"text"`
	Class   string  `json:"class"`
	Calls   int64   `json:"calls"`
	TotalMS float64 `json:"total_ms"`
	AvgMS   float64 `json:"avg_ms"`
	// Candidate is the KV/cache mark from /candidates: "cached" (answered from the result cache), "key-value"
	// (key-value shaped, not cached: the reason is in WhyNot), or "".
	Candidate string `json:"candidate,omitempty"`
	WhyNot    string `json:"why_not,omitempty"`
}

// chartDef is one chart of the page: its title, Y axis and the series it draws.
type chartDef struct {
	name, title, ylabel string
	series              []string
	labels              []string
	min0                bool
	scale               float64 // applied to values (bytes → MiB); 0 means 1
}

var charts = []chartDef{
	{name: "memcache_ops", title: "memcache ops/s", ylabel: "ops/s", series: []string{seriesMCOps}, labels: []string{"ops/s"}, min0: true},
	{name: "memcache_hit_ratio", title: "memcache get hit ratio", ylabel: "ratio", series: []string{seriesMCHit}, labels: []string{"hits"}, min0: true},
	{name: "memcache_latency", title: "memcache latency", ylabel: "ms", series: []string{seriesMCP50, seriesMCP99}, labels: []string{"p50", "p99"}, min0: true},
	{name: "sql_ops", title: "SQL queries/s", ylabel: "queries/s", series: []string{seriesSQLOps}, labels: []string{"queries/s"}, min0: true},
	{name: "sql_hit_ratio", title: "SQL result cache hit ratio", ylabel: "ratio", series: []string{seriesSQLHit}, labels: []string{"hits"}, min0: true},
	{name: "sql_latency", title: "SQL latency", ylabel: "ms", series: []string{seriesSQLP50, seriesSQLP99}, labels: []string{"p50", "p99"}, min0: true},
	{name: "connections", title: "client connections", ylabel: "connections", series: []string{seriesMCConns, seriesSQLConns}, labels: []string{"memcache", "SQL"}, min0: true},
	{name: "store_memory", title: "store memory", ylabel: "MiB", series: []string{seriesStoreBytes, seriesStoreLimit}, labels: []string{"used", "limit"}, min0: true, scale: 1.0 / (1 << 20)},
	{name: "containers", title: "containers", ylabel: "rows or batches", series: []string{seriesBatches, seriesWBPending, seriesWBDroppedPS}, labels: []string{"group-commit batches/s", "write-behind queue", "dropped rows/s"}, min0: true},
}

func chartNames() []string {
	out := make([]string, len(charts))
	for i, c := range charts {
		out[i] = c.name
	}
	return out
}

// chartCache keeps the SVGs drawn for one sample, so viewers polling together draw each chart once a second.
type chartCache struct {
	mu  sync.Mutex
	seq uint64
	svg map[string][]byte
}

func (s *Server) page(w http.ResponseWriter, r *http.Request) {
	b, err := webFS.ReadFile("web/index.html")
	if err != nil { // cannot happen: the file is embedded
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	// The page loads nothing from elsewhere; say so to the browser too.
	w.Header().Set("Content-Security-Policy", "default-src 'self'; img-src 'self'; style-src 'self' 'unsafe-inline'; script-src 'self' 'unsafe-inline'")
	_, _ = w.Write(b)
}

// apiDashboard serves the dashboard's figures.
func (s *Server) apiDashboard(w http.ResponseWriter, r *http.Request) {
	d := s.dashboard(r.URL.Query().Get("series") == "1")
	w.Header().Set("Cache-Control", "no-store")
	s.writeJSON(w, d)
}

func (s *Server) dashboard(withSeries bool) Dashboard {
	d := Dashboard{Time: time.Now().UTC(), Totals: map[string]float64{}, Now: map[string]*float64{},
		Charts: chartNames(), Groups: []GroupRow{}, Containers: []ContainerRow{}, Digests: []DigestRow{}}
	if s.sampler != nil {
		d.IntervalSeconds = s.sampler.interval.Seconds()
		d.WindowSeconds = (time.Duration(s.sampler.size) * s.sampler.interval).Seconds()
		ring, last, _ := s.sampler.snapshot()
		for _, n := range seriesNames {
			d.Now[n] = nil
			if len(ring) > 0 {
				d.Now[n] = num(ring[len(ring)-1].v[n])
			}
		}
		if withSeries {
			d.Series = map[string][]*float64{}
			for _, p := range ring {
				d.Series["t"] = append(d.Series["t"], num(float64(p.at.UnixMilli())/1000))
				for _, n := range seriesNames {
					d.Series[n] = append(d.Series[n], num(p.v[n]))
				}
			}
		}
		if last != nil {
			var ops float64
			for _, n := range memcacheOps {
				v, _ := last.sum(memcacheMetric(n))
				ops += v
			}
			d.Totals["memcache_ops"] = ops
			d.Totals["sql_queries"], _ = last.sum(sqlQueries)
			d.Groups = groupRows(last)
			d.Containers = containerRows(last)
			d.Store = storeRow(last)
			if v, ok := last.sum(stats.ShardMapVersion); ok {
				d.ShardMapVersion = num(v)
			}
		}
	}
	d.Digests = s.digestRows()
	return d
}

// num is v for JSON: nil (null) for NaN or an infinity, which JSON cannot carry.
func num(v float64) *float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return nil
	}
	return &v
}

func labels(m *dto.Metric) map[string]string {
	out := make(map[string]string, len(m.GetLabel()))
	for _, l := range m.GetLabel() {
		out[l.GetName()] = l.GetValue()
	}
	return out
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Untyped != nil:
		return m.Untyped.GetValue()
	}
	return math.NaN()
}

// each calls fn for every child of family name.
func (g *gathered) each(name string, fn func(l map[string]string, v float64)) {
	for _, m := range g.families[name].GetMetric() {
		fn(labels(m), value(m))
	}
}

// cacheState is a group's cache column: fresh, or not fresh and what that means for reads.
func cacheState(mode string, fresh bool) string {
	switch {
	case fresh:
		return "fresh"
	case mode == "binlog":
		return "not fresh: follower behind, reads go to MySQL"
	case mode == "ttl":
		return "not fresh: copies live up to the ttl"
	case mode == "none":
		return "not fresh: only keyway's writes refresh copies"
	}
	return "not fresh: no usable binlog, reads go to MySQL"
}

func groupRows(g *gathered) []GroupRow {
	rows := []GroupRow{}
	idx := map[[2]string]int{}
	g.each(stats.BackendUp, func(l map[string]string, v float64) {
		state := "down"
		if v == 1 {
			state = "up"
		}
		idx[[2]string{l["group"], l["address"]}] = len(rows)
		rows = append(rows, GroupRow{Group: l["group"], Address: l["address"], Role: l["role"], State: state})
	})
	maxOpen := map[string]float64{}
	g.each(stats.BackendPoolMaxConnections, func(l map[string]string, v float64) { maxOpen[l["group"]] = v })
	g.each("keyway_backend_pool_connections", func(l map[string]string, v float64) {
		i, ok := idx[[2]string{l["group"], l["address"]}]
		if !ok {
			return
		}
		switch l["state"] {
		case "in_use":
			rows[i].PoolInUse += v
		case "open":
			rows[i].PoolOpen += v
		}
	})
	g.each("keyway_backend_pool_waiting", func(l map[string]string, v float64) {
		if i, ok := idx[[2]string{l["group"], l["address"]}]; ok {
			rows[i].PoolWaiting += v
		}
	})
	pinned := map[string]float64{}
	g.each("keyway_sql_pinned_sessions", func(l map[string]string, v float64) { pinned[l["group"]] += v })
	lag := map[string]float64{}
	g.each("keyway_binlog_lag_seconds", func(l map[string]string, v float64) { lag[l["group"]] = v })
	following := map[string]float64{}
	g.each("keyway_binlog_following", func(l map[string]string, v float64) { following[l["group"]] = v })
	cache := map[string]string{}
	g.each("keyway_cache_fresh", func(l map[string]string, v float64) { cache[l["group"]] = cacheState(l["mode"], v == 1) })
	for i := range rows {
		r := &rows[i]
		r.PoolMax = maxOpen[r.Group]
		if r.Role == "primary" || r.Role == "" {
			r.Pinned = pinned[r.Group]
		}
		r.Cache = cache[r.Group]
		if r.Role == "primary" || r.Role == "" {
			if v, ok := lag[r.Group]; ok {
				r.LagSeconds = num(v)
			}
			if v, ok := following[r.Group]; ok {
				r.BinlogState = "not following"
				if v == 1 {
					r.BinlogState = "following"
				}
			}
		}
	}
	sort.SliceStable(rows, func(i, j int) bool { return rows[i].Group < rows[j].Group })
	return rows
}

func containerRows(g *gathered) []ContainerRow {
	rows := []ContainerRow{}
	idx := map[string]int{}
	g.each(stats.ContainerInfo, func(l map[string]string, _ float64) {
		idx[l["container"]] = len(rows)
		rows = append(rows, ContainerRow{Name: l["container"], Table: l["table"], Group: l["group"],
			Get: l["get"], Set: l["set"], Delete: l["delete"], Flush: l["flush"], Write: l["write"]})
	})
	set := func(name string, fn func(r *ContainerRow, v float64)) {
		g.each(name, func(l map[string]string, v float64) {
			if i, ok := idx[l["container"]]; ok {
				fn(&rows[i], v)
			}
		})
	}
	set(stats.ContainerChecked, func(r *ContainerRow, v float64) { r.Checked = v == 1 })
	set(stats.ContainerBatches, func(r *ContainerRow, v float64) { r.Batches = v })
	set(stats.ContainerBatchedRows, func(r *ContainerRow, v float64) { r.BatchedRows = v })
	set(stats.ContainerWBPending, func(r *ContainerRow, v float64) { r.Pending = v })
	set(stats.ContainerWBWritten, func(r *ContainerRow, v float64) { r.Written = v })
	set(stats.ContainerWBDropped, func(r *ContainerRow, v float64) { r.Dropped = v })
	set(stats.ContainerWBFailedRounds, func(r *ContainerRow, v float64) { r.FailedRounds = v })
	sort.SliceStable(rows, func(i, j int) bool { return rows[i].Name < rows[j].Name })
	return rows
}

func storeRow(g *gathered) StoreRow {
	var st StoreRow
	st.UsedBytes, _ = g.sum("keyway_memcache_bytes")
	st.LimitBytes, _ = g.sum("keyway_memcache_limit_maxbytes")
	st.Items, _ = g.sum("keyway_memcache_curr_items")
	st.Evictions, _ = g.sum(memcacheMetric("evictions"))
	g.each(stats.StoreInfo, func(l map[string]string, _ float64) {
		st.Persistent = l["persistent"] == "on"
		st.Durability = l["durability"]
	})
	return st
}

// digestRows are the top digests by total time, marked from the candidates list.
func (s *Server) digestRows() []DigestRow {
	rows := []DigestRow{}
	if s.o.Digests == nil {
		return rows
	}
	type candidate struct {
		Digest   string `json:"digest"`
		KeyValue bool   `json:"key_value"`
		Cached   bool   `json:"cached"`
		WhyNot   string `json:"why_not"`
	}
	marks := map[string]candidate{}
	if s.o.Candidates != nil {
		// Candidates is typed by the SQL door; its JSON form is the contract (as /candidates shows it).
		if b, err := json.Marshal(s.o.Candidates()); err == nil {
			var list []candidate
			if json.Unmarshal(b, &list) == nil {
				for _, c := range list {
					marks[c.Digest] = c
				}
			}
		}
	}
	snap := s.o.Digests.Snapshot() // the most total time first
	for _, d := range snap[:min(len(snap), dashboardTopDigests)] {
		row := DigestRow{Digest: d.Digest, Text: d.Normalized, Class: d.Class, Calls: d.Count,
			TotalMS: float64(d.SumLatency.Microseconds()) / 1000, AvgMS: float64(d.AvgLatency.Microseconds()) / 1000}
		if c, ok := marks[d.Digest]; ok {
			switch {
			case c.Cached:
				row.Candidate = "cached"
			case c.KeyValue:
				row.Candidate, row.WhyNot = "key-value", c.WhyNot
			}
		}
		rows = append(rows, row)
	}
	return rows
}

// apiChart serves one chart of the page as SVG, drawn from the sampler's ring (once per sample).
func (s *Server) apiChart(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	var def *chartDef
	for i := range charts {
		if charts[i].name+".svg" == name {
			def = &charts[i]
		}
	}
	if def == nil || s.sampler == nil {
		http.NotFound(w, r)
		return
	}
	ring, _, seq := s.sampler.snapshot()
	s.charts.mu.Lock()
	if s.charts.seq != seq || s.charts.svg == nil {
		s.charts.seq, s.charts.svg = seq, map[string][]byte{}
	}
	svg := s.charts.svg[def.name]
	s.charts.mu.Unlock()
	if svg == nil {
		var err error
		if svg, err = drawChart(*def, ring, time.Now()); err != nil {
			s.log.Debug("admin: drawing a chart", "chart", def.name, "err", err)
			http.Error(w, "cannot draw chart: "+err.Error(), http.StatusInternalServerError)
			return
		}
		s.charts.mu.Lock()
		if s.charts.seq == seq {
			s.charts.svg[def.name] = svg
		}
		s.charts.mu.Unlock()
	}
	w.Header().Set("Content-Type", "image/svg+xml")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Content-Length", strconv.Itoa(len(svg)))
	_, _ = w.Write(svg)
}

// drawChart draws def's series over the ring, X in seconds before now.
func drawChart(def chartDef, ring []point, now time.Time) ([]byte, error) {
	scale := def.scale
	if scale == 0 {
		scale = 1
	}
	series := make([]chart.Series, len(def.series))
	for i, n := range def.series {
		s := chart.Series{Name: def.labels[i], X: make([]float64, len(ring)), Y: make([]float64, len(ring))}
		for j, p := range ring {
			s.X[j] = -now.Sub(p.at).Seconds()
			s.Y[j] = p.v[n] * scale // NaN stays NaN: a gap
		}
		series[i] = s
	}
	return chart.Lines(chart.Options{Title: def.title, XLabel: "seconds ago", YLabel: def.ylabel,
		Width: 400, Height: 200, YMin0: def.min0}, series)
}
