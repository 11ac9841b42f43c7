package stats

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestMetricsFamilies(t *testing.T) {
	m := NewMetrics()
	m.SQLConnectionOpened()
	m.SQLConnectionOpened()
	m.SQLConnectionClosed()
	m.ObserveQuery("read", 2*time.Millisecond, false)
	m.ObserveQuery("read", 3*time.Millisecond, false)
	m.ObserveQuery("write", time.Millisecond, true)
	m.ObserveQuery("weird", time.Millisecond, false)
	m.SetPoolStatsFunc(func() []PoolStat {
		return []PoolStat{
			{Group: "main", Address: "127.0.0.1:3306", User: "app", Open: 4, Idle: 3, InUse: 1, Waits: 2, Errors: 1},
			{Group: "main", Address: "127.0.0.1:3306", User: "app", Open: 1, Idle: 1}, // duplicate labels: merged
		}
	})
	m.SetMemcacheStatsFunc(func() map[string]int64 {
		return map[string]int64{"curr_connections": 5, "cmd_get": 100, "get_hits": 90, "bytes": 4096, "odd-name": 1}
	})

	expected := `
# HELP keyway_backend_pool_connections Backend connections by pool and state (open = idle + in_use).
# TYPE keyway_backend_pool_connections gauge
keyway_backend_pool_connections{address="127.0.0.1:3306",group="main",state="idle",user="app"} 4
keyway_backend_pool_connections{address="127.0.0.1:3306",group="main",state="in_use",user="app"} 1
keyway_backend_pool_connections{address="127.0.0.1:3306",group="main",state="open",user="app"} 5
# HELP keyway_backend_pool_waits_total Times a session waited for a free backend connection.
# TYPE keyway_backend_pool_waits_total counter
keyway_backend_pool_waits_total{address="127.0.0.1:3306",group="main",user="app"} 2
# HELP keyway_sql_connections Client connections currently open on the SQL door.
# TYPE keyway_sql_connections gauge
keyway_sql_connections 1
# HELP keyway_sql_connections_total Client connections accepted by the SQL door.
# TYPE keyway_sql_connections_total counter
keyway_sql_connections_total 2
`
	if err := testutil.GatherAndCompare(m.Registry(), strings.NewReader(expected),
		"keyway_backend_pool_connections", "keyway_backend_pool_waits_total",
		"keyway_sql_connections", "keyway_sql_connections_total"); err != nil {
		t.Error(err)
	}
	families, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, f := range families {
		have[f.GetName()] = true
		switch f.GetName() {
		case "keyway_sql_queries_total":
			var readOK, writeErr float64
			for _, mt := range f.GetMetric() {
				l := map[string]string{}
				for _, lp := range mt.GetLabel() {
					l[lp.GetName()] = lp.GetValue()
				}
				if l["class"] == "read" && l["result"] == "ok" {
					readOK = mt.GetCounter().GetValue()
				}
				if l["class"] == "write" && l["result"] == "error" {
					writeErr = mt.GetCounter().GetValue()
				}
			}
			if readOK != 2 || writeErr != 1 {
				t.Errorf("queries read/ok=%v write/error=%v", readOK, writeErr)
			}
		case "keyway_sql_query_duration_seconds":
			for _, mt := range f.GetMetric() {
				if mt.GetLabel()[0].GetValue() == "read" && mt.GetHistogram().GetSampleCount() != 2 {
					t.Errorf("read histogram count %d", mt.GetHistogram().GetSampleCount())
				}
			}
		case "keyway_memcache_curr_connections", "keyway_memcache_bytes":
			if f.GetType().String() != "GAUGE" {
				t.Errorf("%s is %s, want GAUGE", f.GetName(), f.GetType())
			}
		case "keyway_memcache_cmd_get_total":
			if f.GetType().String() != "COUNTER" || f.GetMetric()[0].GetCounter().GetValue() != 100 {
				t.Errorf("cmd_get: %v", f)
			}
		}
	}
	for _, n := range []string{"keyway_sql_queries_total", "keyway_sql_query_duration_seconds",
		"keyway_backend_pool_errors_total", "keyway_memcache_get_hits_total", "keyway_memcache_odd_name_total",
		"go_goroutines", "process_cpu_seconds_total"} {
		if !have[n] {
			t.Errorf("family %s missing", n)
		}
	}

	// Removing the callbacks removes their families.
	m.SetPoolStatsFunc(nil)
	m.SetMemcacheStatsFunc(nil)
	families, _ = m.Registry().Gather()
	for _, f := range families {
		if n := f.GetName(); strings.HasPrefix(n, "keyway_backend_") ||
			strings.HasPrefix(n, "keyway_memcache_") && n != "keyway_memcache_request_duration_seconds" {
			t.Errorf("%s still exported", f.GetName())
		}
	}
}

// Every family keyway exports, with every source installed, passes client_golang's linter: counters end in
// _total, units are base units, help is present.
func TestMetricsLint(t *testing.T) {
	m := NewMetrics()
	m.SQLConnectionOpened()
	m.ObserveQuery("read", time.Millisecond, false)
	m.ObserveMemcache(time.Millisecond)
	m.SetPoolStatsFunc(func() []PoolStat { return []PoolStat{{Group: "g", Address: "a:1", User: "u", Open: 1}} })
	m.SetMemcacheStatsFunc(func() map[string]int64 {
		// Every numeric name the memcache door's stats report.
		return map[string]int64{"pid": 1, "uptime": 1, "time": 1, "pointer_size": 64, "max_connections": 1,
			"curr_connections": 1, "total_connections": 1, "rejected_connections": 1, "cmd_get": 1, "cmd_set": 1,
			"cmd_flush": 1, "cmd_touch": 1, "cmd_meta": 1, "get_hits": 1, "get_misses": 1, "get_expired": 1,
			"delete_misses": 1, "delete_hits": 1, "incr_misses": 1, "incr_hits": 1, "decr_misses": 1, "decr_hits": 1,
			"cas_misses": 1, "cas_hits": 1, "cas_badval": 1, "touch_hits": 1, "touch_misses": 1, "auth_cmds": 1,
			"auth_errors": 1, "bytes_read": 1, "bytes_written": 1, "limit_maxbytes": 1, "accepting_conns": 1,
			"listen_disabled_num": 1, "time_in_listen_disabled_us": 2000000, "threads": 1, "bytes": 1, "curr_items": 1,
			"total_items": 1, "expired_unfetched": 1, "evictions": 1, "reclaimed": 1}
	})
	m.SetSamplesFunc(func() []Sample {
		return []Sample{
			{Name: "keyway_backend_up", Help: "h", Group: "g", Labels: [][2]string{{"address", "a:1"}}, Value: 1},
			{Name: "keyway_container_write_behind_dropped_rows_total", Help: "h", Labels: [][2]string{{"container", "c"}}, Value: 2},
		}
	})
	problems, err := testutil.GatherAndLint(m.Registry())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
	want := `
# HELP keyway_backend_up h
# TYPE keyway_backend_up gauge
keyway_backend_up{address="a:1",group="g"} 1
# HELP keyway_container_write_behind_dropped_rows_total h
# TYPE keyway_container_write_behind_dropped_rows_total counter
keyway_container_write_behind_dropped_rows_total{container="c"} 2
# HELP keyway_memcache_connections_total memcached stats counter total_connections of the memcache door.
# TYPE keyway_memcache_connections_total counter
keyway_memcache_connections_total 1
# HELP keyway_memcache_time_in_listen_disabled_seconds_total memcached stats counter time_in_listen_disabled_us of the memcache door.
# TYPE keyway_memcache_time_in_listen_disabled_seconds_total counter
keyway_memcache_time_in_listen_disabled_seconds_total 2
`
	if err := testutil.GatherAndCompare(m.Registry(), strings.NewReader(want), "keyway_backend_up",
		"keyway_container_write_behind_dropped_rows_total", "keyway_memcache_connections_total",
		"keyway_memcache_time_in_listen_disabled_seconds_total"); err != nil {
		t.Error(err)
	}
}

func BenchmarkObserveQuery(b *testing.B) {
	m := NewMetrics()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			m.ObserveQuery("read", 300*time.Microsecond, false)
		}
	})
}

// TestMemcacheNames: memcached's stat names become Prometheus names promlint accepts: counters end in _total,
// microseconds become seconds, and a gauge never ends in _count (which reads as a histogram's).
func TestMemcacheNames(t *testing.T) {
	for stat, want := range map[string]string{
		"cmd_get":            "keyway_memcache_cmd_get_total",
		"total_connections":  "keyway_memcache_connections_total",
		"rusage_user_us":     "keyway_memcache_rusage_user_seconds_total",
		"curr_items":         "keyway_memcache_curr_items",
		"read_buf_count":     "keyway_memcache_read_bufs",
		"response_obj_count": "keyway_memcache_response_objs",
	} {
		if got, _, _ := memcacheName(stat); got != want {
			t.Errorf("memcacheName(%q) = %q, want %q", stat, got, want)
		}
	}
}
