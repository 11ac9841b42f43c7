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
		case "keyway_memcache_cmd_get":
			if f.GetType().String() != "COUNTER" || f.GetMetric()[0].GetCounter().GetValue() != 100 {
				t.Errorf("cmd_get: %v", f)
			}
		}
	}
	for _, n := range []string{"keyway_sql_queries_total", "keyway_sql_query_duration_seconds",
		"keyway_backend_pool_errors_total", "keyway_memcache_get_hits", "keyway_memcache_odd_name",
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
		if strings.HasPrefix(f.GetName(), "keyway_backend_") || strings.HasPrefix(f.GetName(), "keyway_memcache_") {
			t.Errorf("%s still exported", f.GetName())
		}
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
