// Package stats holds keyway's Prometheus metrics: the families every part of the server reports into, their
// names (names.go), and the registry /metrics serves.
//
// Invariants:
//   - Recording is cheap and never blocks on I/O: Metrics.ObserveQuery touches pre-resolved Prometheus children
//     for the known classes.
//   - Nothing here registers with Prometheus's global registry; each Metrics owns its registry, so tests and
//     several servers in one process do not collide.
//   - Collection callbacks (pool and memcache stats) run at scrape time only, on the scraping goroutine.
package stats

import (
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// PoolStat is one backend connection pool's state, as reported at scrape time.
type PoolStat struct {
	Group, Address, User string
	Open, Idle, InUse    int   // InUse: borrowed by a statement or held by a pinned session
	Waits, Errors        int64 // cumulative: waits for a free connection, failed connects/health checks
	Waiting              int   // borrowers waiting now
	Borrows, Fixups      int64 // cumulative: connections handed out; commands that aligned one with its session
	WaitSeconds          float64
}

// PinnedStat is how many SQL sessions of a group are pinned to their connection for one reason.
type PinnedStat struct {
	Group, Reason string
	Sessions      int
}

// queryClasses are the SQL door's statement classes (sqlproxy.Class.String()); their Prometheus children are
// resolved once so ObserveQuery does no label hashing for them.
var queryClasses = [...]string{"other", "read", "write", "ddl", "transaction", "session"}

// Metrics is keyway's Prometheus instrumentation, on its own registry (with Go runtime and process collectors).
// All methods are safe for concurrent use; a nil *Metrics is not.
type Metrics struct {
	reg *prometheus.Registry

	sqlConnsOpen  prometheus.Gauge
	sqlConnsTotal prometheus.Counter
	queries       *prometheus.CounterVec
	duration      *prometheus.HistogramVec
	mcDuration    prometheus.Histogram

	perClass [len(queryClasses)]classObservers

	pools    atomic.Pointer[func() []PoolStat]
	pinned   atomic.Pointer[func() []PinnedStat]
	memcache atomic.Pointer[func() map[string]int64]
	samples  atomic.Pointer[func() []Sample]
}

// Sample is one value a component reports at each scrape (see SetSamplesFunc).
type Sample struct {
	Name  string // the full metric name, keyway_…; names ending in _total are counters, others gauges
	Help  string
	Group string // the backend group, as the "group" label; "" for none
	// Labels are further label pairs (name, value), such as {"container", "users"} or {"address", "db:3306"};
	// every sample of one Name must carry the same label names.
	Labels [][2]string
	Value  float64
}

type classObservers struct {
	ok, failed prometheus.Counter
	duration   prometheus.Observer
}

// latencyBuckets span a cached hit (tens of µs) to a slow report query (10 s).
var latencyBuckets = []float64{
	.00005, .0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10,
}

// NewMetrics returns metrics registered on a fresh registry.
func NewMetrics() *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry()}
	m.sqlConnsOpen = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "keyway_sql_connections", Help: "Client connections currently open on the SQL door.",
	})
	m.sqlConnsTotal = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "keyway_sql_connections_total", Help: "Client connections accepted by the SQL door.",
	})
	m.queries = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "keyway_sql_queries_total", Help: "Statements handled by the SQL door, by class and result (ok, error).",
	}, []string{"class", "result"})
	m.duration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "keyway_sql_query_duration_seconds",
		Help:    "Time from a statement's arrival to the end of its reply, by class.",
		Buckets: latencyBuckets,
	}, []string{"class"})
	m.mcDuration = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "keyway_memcache_request_duration_seconds",
		Help:    "Time from reading a batch of memcache requests (one request, or a pipeline) to writing their replies.",
		Buckets: latencyBuckets,
	})
	for i, c := range queryClasses {
		m.perClass[i] = classObservers{
			ok:       m.queries.WithLabelValues(c, "ok"),
			failed:   m.queries.WithLabelValues(c, "error"),
			duration: m.duration.WithLabelValues(c),
		}
	}
	// Register cannot fail here: a fresh registry and distinct, valid names. The error is ignored rather than
	// turned into a panic.
	for _, c := range []prometheus.Collector{
		m.sqlConnsOpen, m.sqlConnsTotal, m.queries, m.duration, m.mcDuration,
		&poolCollector{m: m}, &memcacheCollector{m: m}, &sampleCollector{m: m},
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	} {
		_ = m.reg.Register(c)
	}
	return m
}

// Registry returns the registry holding every keyway metric, for promhttp or tests.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// SQLConnectionOpened counts a client connection accepted by the SQL door.
func (m *Metrics) SQLConnectionOpened() {
	m.sqlConnsOpen.Inc()
	m.sqlConnsTotal.Inc()
}

// SQLConnectionClosed counts a client connection of the SQL door going away.
func (m *Metrics) SQLConnectionClosed() { m.sqlConnsOpen.Dec() }

// ObserveQuery records one statement of the given class (sqlproxy.Class.String()).
func (m *Metrics) ObserveQuery(class string, latency time.Duration, failed bool) {
	for i := range queryClasses {
		if queryClasses[i] == class {
			o := &m.perClass[i]
			if failed {
				o.failed.Inc()
			} else {
				o.ok.Inc()
			}
			o.duration.Observe(latency.Seconds())
			return
		}
	}
	result := "ok"
	if failed {
		result = "error"
	}
	m.queries.WithLabelValues(class, result).Inc()
	m.duration.WithLabelValues(class).Observe(latency.Seconds())
}

// ObserveMemcache records the time the memcache door took from reading a batch of requests to writing their
// replies.
func (m *Metrics) ObserveMemcache(latency time.Duration) { m.mcDuration.Observe(latency.Seconds()) }

// SetPinnedFunc installs the function called at each scrape to export the pinned SQL sessions. nil removes it.
func (m *Metrics) SetPinnedFunc(f func() []PinnedStat) {
	if f == nil {
		m.pinned.Store(nil)
		return
	}
	m.pinned.Store(&f)
}

// SetPoolStatsFunc installs the function called at each scrape to export backend pool state. nil removes it.
func (m *Metrics) SetPoolStatsFunc(f func() []PoolStat) {
	if f == nil {
		m.pools.Store(nil)
		return
	}
	m.pools.Store(&f)
}

// SetMemcacheStatsFunc installs the function called at each scrape to export the memcache door's figures (the
// names of memcached's "stats" reply) as keyway_memcache_<name>, counters with a _total suffix (see
// memcacheName). nil removes it.
func (m *Metrics) SetMemcacheStatsFunc(f func() map[string]int64) {
	if f == nil {
		m.memcache.Store(nil)
		return
	}
	m.memcache.Store(&f)
}

// SetSamplesFunc installs the function called at each scrape for the values of components that keep their own
// counters (the SQL result cache, the binlog followers). nil removes it.
func (m *Metrics) SetSamplesFunc(f func() []Sample) {
	if f == nil {
		m.samples.Store(nil)
		return
	}
	m.samples.Store(&f)
}

// sampleCollector is "unchecked" (Describe sends nothing): its names come from the samples.
type sampleCollector struct{ m *Metrics }

func (c *sampleCollector) Describe(chan<- *prometheus.Desc) {}

func (c *sampleCollector) Collect(ch chan<- prometheus.Metric) {
	fp := c.m.samples.Load()
	if fp == nil {
		return
	}
	for _, s := range (*fp)() {
		t := prometheus.GaugeValue
		if strings.HasSuffix(s.Name, "_total") {
			t = prometheus.CounterValue
		}
		var labels []string
		var values []string
		if s.Group != "" {
			labels, values = []string{"group"}, []string{s.Group}
		}
		for _, l := range s.Labels {
			labels, values = append(labels, l[0]), append(values, l[1])
		}
		if mt, err := prometheus.NewConstMetric(prometheus.NewDesc(s.Name, s.Help, labels, nil), t, s.Value, values...); err == nil {
			ch <- mt
		}
	}
}

var (
	poolConnsDesc = prometheus.NewDesc("keyway_backend_pool_connections",
		"Backend connections by pool and state (open = idle + in_use).",
		[]string{"group", "address", "user", "state"}, nil)
	poolWaitsDesc = prometheus.NewDesc("keyway_backend_pool_waits_total",
		"Times a session waited for a free backend connection.",
		[]string{"group", "address", "user"}, nil)
	poolErrorsDesc = prometheus.NewDesc("keyway_backend_pool_errors_total",
		"Failed backend connects and health checks.",
		[]string{"group", "address", "user"}, nil)
	poolWaitingDesc = prometheus.NewDesc("keyway_backend_pool_waiting",
		"Statements waiting now for one of the pool's connections.",
		[]string{"group", "address", "user"}, nil)
	poolBorrowsDesc = prometheus.NewDesc("keyway_backend_pool_borrows_total",
		"Connections handed out: one per statement of an unpinned SQL session (divide by open for statements per connection).",
		[]string{"group", "address", "user"}, nil)
	poolFixupsDesc = prometheus.NewDesc("keyway_backend_pool_fixups_total",
		"Commands keyway sent to bring a borrowed connection in line with its session (SET, COM_INIT_DB).",
		[]string{"group", "address", "user"}, nil)
	poolWaitSecondsDesc = prometheus.NewDesc("keyway_backend_pool_wait_seconds_total",
		"Time statements spent waiting for one of the pool's connections.",
		[]string{"group", "address", "user"}, nil)
	pinnedDesc = prometheus.NewDesc("keyway_sql_pinned_sessions",
		"SQL sessions that keep their backend connection between statements, by group and reason (a session may have several).",
		[]string{"group", "reason"}, nil)
)

type poolCollector struct{ m *Metrics }

func (c *poolCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- poolConnsDesc
	ch <- poolWaitingDesc
	ch <- poolBorrowsDesc
	ch <- poolFixupsDesc
	ch <- poolWaitSecondsDesc
	ch <- pinnedDesc
	ch <- poolWaitsDesc
	ch <- poolErrorsDesc
}

func (c *poolCollector) Collect(ch chan<- prometheus.Metric) {
	if fp := c.m.pinned.Load(); fp != nil {
		for _, p := range (*fp)() {
			if mt, err := prometheus.NewConstMetric(pinnedDesc, prometheus.GaugeValue, float64(p.Sessions), p.Group, p.Reason); err == nil {
				ch <- mt
			}
		}
	}
	fp := c.m.pools.Load()
	if fp == nil {
		return
	}
	// Merge rows with the same labels: a duplicate label set would make the whole scrape fail.
	type key struct{ g, a, u string }
	merged := map[key]*PoolStat{}
	var order []key
	for _, p := range (*fp)() {
		k := key{p.Group, p.Address, p.User}
		if s, ok := merged[k]; ok {
			s.Open += p.Open
			s.Idle += p.Idle
			s.InUse += p.InUse
			s.Waits += p.Waits
			s.Errors += p.Errors
			s.Waiting += p.Waiting
			s.Borrows += p.Borrows
			s.Fixups += p.Fixups
			s.WaitSeconds += p.WaitSeconds
			continue
		}
		merged[k] = &p
		order = append(order, k)
	}
	send := func(desc *prometheus.Desc, t prometheus.ValueType, v float64, labels ...string) {
		if mt, err := prometheus.NewConstMetric(desc, t, v, labels...); err == nil {
			ch <- mt
		}
	}
	for _, k := range order {
		p := merged[k]
		send(poolConnsDesc, prometheus.GaugeValue, float64(p.Open), k.g, k.a, k.u, "open")
		send(poolConnsDesc, prometheus.GaugeValue, float64(p.Idle), k.g, k.a, k.u, "idle")
		send(poolConnsDesc, prometheus.GaugeValue, float64(p.InUse), k.g, k.a, k.u, "in_use")
		send(poolWaitsDesc, prometheus.CounterValue, float64(p.Waits), k.g, k.a, k.u)
		send(poolErrorsDesc, prometheus.CounterValue, float64(p.Errors), k.g, k.a, k.u)
		send(poolWaitingDesc, prometheus.GaugeValue, float64(p.Waiting), k.g, k.a, k.u)
		send(poolBorrowsDesc, prometheus.CounterValue, float64(p.Borrows), k.g, k.a, k.u)
		send(poolFixupsDesc, prometheus.CounterValue, float64(p.Fixups), k.g, k.a, k.u)
		send(poolWaitSecondsDesc, prometheus.CounterValue, p.WaitSeconds, k.g, k.a, k.u)
	}
}

// memcacheGauges are the memcached stats that go up and down; every other name is exported as a counter.
var memcacheGauges = map[string]bool{
	"curr_connections": true, "curr_items": true, "bytes": true, "limit_maxbytes": true, "threads": true,
	"uptime": true, "time": true, "pid": true, "connection_structures": true, "max_connections": true,
	"hash_power_level": true, "hash_bytes": true, "hash_is_expanding": true, "reserved_fds": true,
	"accepting_conns": true, "pointer_size": true, "conn_yields_current": true,
	"read_buf_count": true, "read_buf_bytes": true, "read_buf_bytes_free": true, "response_obj_count": true,
	"response_obj_bytes": true, "slab_reassign_running": true, "lru_crawler_running": true, "log_watchers": true,
	"slab_global_page_pool": true,
}

// memcacheCollector is "unchecked" (Describe sends nothing) because its metric names come from the stats map.
type memcacheCollector struct{ m *Metrics }

func (c *memcacheCollector) Describe(chan<- *prometheus.Desc) {}

func (c *memcacheCollector) Collect(ch chan<- prometheus.Metric) {
	fp := c.m.memcache.Load()
	if fp == nil {
		return
	}
	for name, v := range (*fp)() {
		n, counter, div := memcacheName(name)
		if n == "" {
			continue
		}
		t, help := prometheus.CounterValue, "memcached stats counter "+name+" of the memcache door."
		if !counter {
			t, help = prometheus.GaugeValue, "memcached stats value "+name+" of the memcache door."
		}
		desc := prometheus.NewDesc(n, help, nil, nil)
		if mt, err := prometheus.NewConstMetric(desc, t, float64(v)/div); err == nil {
			ch <- mt
		}
	}
}

// memcacheName is the Prometheus name of memcached stat name, whether it is a counter, and the divisor to its
// unit. Counters end in _total (memcached's own "total_x" becomes x_total), and a microsecond count becomes
// seconds, as Prometheus conventions (and client_golang's promlint) ask.
func memcacheName(name string) (metric string, counter bool, div float64) {
	n := metricName(name)
	if n == "" {
		return "", false, 0
	}
	div = 1
	if memcacheGauges[n] || strings.HasPrefix(n, "curr_") {
		// A gauge named "…_count" reads as a histogram's count to Prometheus (and promlint): say what is counted.
		if base, ok := strings.CutSuffix(n, "_count"); ok {
			n = base + "s"
		}
		return "keyway_memcache_" + n, false, div
	}
	if base, ok := strings.CutSuffix(n, "_us"); ok {
		n, div = base+"_seconds", 1e6
	}
	if base, ok := strings.CutPrefix(n, "total_"); ok {
		n = base
	}
	return "keyway_memcache_" + strings.TrimSuffix(n, "_total") + "_total", true, div
}

// metricName lower-cases a stats name and replaces what Prometheus does not allow in a name with '_'.
func metricName(s string) string {
	b := []byte(strings.ToLower(s))
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_') {
			b[i] = '_'
		}
	}
	return string(b)
}
