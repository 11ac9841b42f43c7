package admin

import (
	"math"
	"sort"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/keywaydb/keyway/internal/stats"
)

// The sampler reads the metrics registry once a second (the same Gather a /metrics scrape does, so the dashboard
// shows exactly what Prometheus would) and keeps the last window of derived figures: rates from counters, ratios
// from counter deltas, latency quantiles from histogram bucket deltas. Reading the registry, not the components,
// keeps one source of truth and keeps admin free of the server's types.
//
// Invariants:
//   - Memory is bounded: the ring holds at most window/interval points.
//   - A figure that cannot be derived in an interval (no requests, the first sample, a counter reset) is NaN, and
//     shows as a gap, never as a made-up zero.

// Series names: the keys of /api/dashboard's "now" and "series".
const (
	seriesMCOps       = "memcache_ops_per_sec"
	seriesMCHit       = "memcache_hit_ratio"
	seriesMCP50       = "memcache_p50_ms"
	seriesMCP99       = "memcache_p99_ms"
	seriesMCConns     = "memcache_connections"
	seriesSQLOps      = "sql_queries_per_sec"
	seriesSQLHit      = "sql_cache_hit_ratio"
	seriesSQLP50      = "sql_p50_ms"
	seriesSQLP99      = "sql_p99_ms"
	seriesSQLConns    = "sql_connections"
	seriesStoreBytes  = "store_bytes"
	seriesStoreLimit  = "store_limit_bytes"
	seriesBatches     = "group_commit_batches_per_sec"
	seriesWBPending   = "write_behind_pending_rows"
	seriesWBDroppedPS = "write_behind_dropped_rows_per_sec"
)

var seriesNames = []string{seriesMCOps, seriesMCHit, seriesMCP50, seriesMCP99, seriesMCConns, seriesSQLOps,
	seriesSQLHit, seriesSQLP50, seriesSQLP99, seriesSQLConns, seriesStoreBytes, seriesStoreLimit, seriesBatches,
	seriesWBPending, seriesWBDroppedPS}

// memcacheOps are the memcache door's counters that count client operations (memcached's stats names).
var memcacheOps = []string{"cmd_get", "cmd_set", "cmd_touch", "cmd_flush", "delete_hits", "delete_misses",
	"incr_hits", "incr_misses", "decr_hits", "decr_misses"}

const (
	mcLatency  = "keyway_memcache_request_duration_seconds"
	sqlLatency = "keyway_sql_query_duration_seconds"
	sqlQueries = "keyway_sql_queries_total"
)

// gathered is one reading of the registry.
type gathered struct {
	at       time.Time
	families map[string]*dto.MetricFamily
}

// sum adds every child of family name (counters, gauges, untyped); ok is false when the family is absent.
func (g *gathered) sum(name string) (v float64, ok bool) {
	f := g.families[name]
	if f == nil {
		return 0, false
	}
	for _, m := range f.GetMetric() {
		switch {
		case m.Counter != nil:
			v += m.Counter.GetValue()
		case m.Gauge != nil:
			v += m.Gauge.GetValue()
		case m.Untyped != nil:
			v += m.Untyped.GetValue()
		}
	}
	return v, true
}

// histogram merges every child of a histogram family: cumulative counts by upper bound, and the total count.
func (g *gathered) histogram(name string) (bounds []float64, counts []float64, total float64, ok bool) {
	f := g.families[name]
	if f == nil {
		return nil, nil, 0, false
	}
	byBound := map[float64]float64{}
	for _, m := range f.GetMetric() {
		h := m.GetHistogram()
		if h == nil {
			continue
		}
		total += float64(h.GetSampleCount())
		for _, b := range h.GetBucket() {
			byBound[b.GetUpperBound()] += float64(b.GetCumulativeCount())
		}
	}
	for b := range byBound {
		bounds = append(bounds, b)
	}
	sort.Float64s(bounds)
	for _, b := range bounds {
		counts = append(counts, byBound[b])
	}
	return bounds, counts, total, true
}

// point is one interval's derived figures, by series name.
type point struct {
	at time.Time
	v  map[string]float64
}

// sampler holds the ring of points.
type sampler struct {
	gather   func() (*gathered, error)
	interval time.Duration
	size     int // points kept

	mu struct {
		sync.Mutex
		prev *gathered // the last reading, for deltas
		ring []point   // oldest first
		seq  uint64    // readings taken; keys cached charts
	}
	stop chan struct{}
	done chan struct{}
}

func newSampler(gather func() (*gathered, error), interval, window time.Duration) *sampler {
	s := &sampler{gather: gather, interval: interval, size: int(window / interval),
		stop: make(chan struct{}), done: make(chan struct{})}
	if s.size < 2 {
		s.size = 2
	}
	return s
}

// run samples every interval until close.
func (s *sampler) run() {
	defer close(s.done)
	s.sample()
	t := time.NewTicker(s.interval)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			s.sample()
		}
	}
}

func (s *sampler) close() {
	select {
	case <-s.stop:
	default:
		close(s.stop)
	}
	<-s.done
}

// sample reads the registry once and appends the interval's figures.
func (s *sampler) sample() {
	cur, err := s.gather()
	if err != nil && cur == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	prev := s.mu.prev
	s.mu.prev = cur
	s.mu.seq++
	if prev == nil {
		return // the first reading only gives the base for deltas
	}
	p := point{at: cur.at, v: derive(prev, cur)}
	if len(s.mu.ring) == s.size {
		copy(s.mu.ring, s.mu.ring[1:])
		s.mu.ring = s.mu.ring[:s.size-1]
	}
	s.mu.ring = append(s.mu.ring, p)
}

// snapshot returns a copy of the ring, the latest reading and its sequence number.
func (s *sampler) snapshot() ([]point, *gathered, uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]point(nil), s.mu.ring...), s.mu.prev, s.mu.seq
}

// derive computes one interval's figures from two readings.
func derive(prev, cur *gathered) map[string]float64 {
	out := make(map[string]float64, len(seriesNames))
	secs := cur.at.Sub(prev.at).Seconds()
	nan := math.NaN()
	// delta of a counter family; NaN when absent or reset.
	delta := func(name string) float64 {
		a, okA := prev.sum(name)
		b, okB := cur.sum(name)
		if !okA || !okB || b < a {
			return nan
		}
		return b - a
	}
	rate := func(d float64) float64 {
		if secs <= 0 {
			return nan
		}
		return d / secs
	}
	ratio := func(hits, misses float64) float64 {
		if math.IsNaN(hits) || math.IsNaN(misses) || hits+misses == 0 {
			return nan
		}
		return hits / (hits + misses)
	}
	gauge := func(name string) float64 {
		if v, ok := cur.sum(name); ok {
			return v
		}
		return nan
	}
	// The memcache door's operations: the counters it reports (a door that never counted one kind lacks it).
	ops, counted := 0.0, false
	for _, n := range memcacheOps {
		if _, ok := cur.sum(memcacheMetric(n)); ok {
			ops += delta(memcacheMetric(n)) // NaN after a reset: the interval has no figure
			counted = true
		}
	}
	if !counted {
		ops = nan
	}
	out[seriesMCOps] = rate(ops)
	out[seriesMCHit] = ratio(delta(memcacheMetric("get_hits")), delta(memcacheMetric("get_misses")))
	out[seriesMCP50], out[seriesMCP99] = quantiles(prev, cur, mcLatency)
	out[seriesMCConns] = gauge("keyway_memcache_curr_connections")
	out[seriesSQLOps] = rate(delta(sqlQueries))
	out[seriesSQLHit] = ratio(delta("keyway_sql_cache_hits_total"), delta("keyway_sql_cache_misses_total"))
	out[seriesSQLP50], out[seriesSQLP99] = quantiles(prev, cur, sqlLatency)
	out[seriesSQLConns] = gauge("keyway_sql_connections")
	out[seriesStoreBytes] = gauge("keyway_memcache_bytes")
	out[seriesStoreLimit] = gauge("keyway_memcache_limit_maxbytes")
	out[seriesBatches] = rate(delta(stats.ContainerBatches))
	out[seriesWBPending] = gauge(stats.ContainerWBPending)
	out[seriesWBDroppedPS] = rate(delta(stats.ContainerWBDropped))
	return out
}

// memcacheMetric is the exported name of a memcache door counter.
func memcacheMetric(stat string) string { return "keyway_memcache_" + stat + "_total" }

// quantiles are the p50 and p99, in milliseconds, of what histogram name observed between two readings.
func quantiles(prev, cur *gathered, name string) (p50, p99 float64) {
	nan := math.NaN()
	b1, c1, t1, ok1 := prev.histogram(name)
	b2, c2, t2, ok2 := cur.histogram(name)
	if !ok1 || !ok2 || len(b1) != len(b2) || t2 <= t1 {
		return nan, nan
	}
	counts := make([]float64, len(c2))
	for i := range c2 {
		counts[i] = c2[i] - c1[i]
	}
	return 1000 * bucketQuantile(0.5, b2, counts, t2-t1), 1000 * bucketQuantile(0.99, b2, counts, t2-t1)
}

// bucketQuantile estimates quantile q from cumulative bucket counts as Prometheus's histogram_quantile does:
// linear interpolation inside the bucket that holds the rank; past the last finite bound, that bound.
func bucketQuantile(q float64, bounds, cumulative []float64, total float64) float64 {
	rank := q * total
	lower, below := 0.0, 0.0
	for i, b := range bounds {
		if cumulative[i] >= rank {
			if math.IsInf(b, 1) {
				return lower
			}
			in := cumulative[i] - below
			if in <= 0 {
				return b
			}
			return lower + (b-lower)*(rank-below)/in
		}
		lower, below = b, cumulative[i]
	}
	return lower // the rank is past every finite bucket
}
