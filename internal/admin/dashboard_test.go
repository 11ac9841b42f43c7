package admin

import (
	"encoding/json"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/keywaydb/keyway/internal/digests"
	"github.com/keywaydb/keyway/internal/stats"
)

const testToken = "test-token-0123456789"

func authServer(t *testing.T, o Options) *httptest.Server {
	t.Helper()
	o.Metrics, o.Digests = stats.NewMetrics(), digests.New(10)
	o.Status = func() any { return map[string]string{"ok": "yes"} }
	o.Candidates = func() any { return []any{} }
	s := New(o)
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(func() { ts.Close(); s.sampler.close() })
	return ts
}

func do(t *testing.T, url string, set func(*http.Request)) *http.Response {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	if set != nil {
		set(req)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp
}

var adminPaths = []string{"/", "/api/dashboard", "/api/chart/memcache_ops.svg", "/metrics", "/digests", "/status",
	"/candidates", "/healthz", "/readyz"}

func TestTokenGuardsEveryEndpoint(t *testing.T) {
	ts := authServer(t, Options{Token: testToken})
	for _, p := range adminPaths {
		resp := do(t, ts.URL+p, nil)
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("%s without a token: %d, want 401", p, resp.StatusCode)
		}
		if ch := resp.Header.Values("WWW-Authenticate"); len(ch) != 2 || !strings.HasPrefix(ch[0], "Basic ") || !strings.HasPrefix(ch[1], "Bearer ") {
			t.Errorf("%s challenges %q", p, ch)
		}
		for name, set := range map[string]func(*http.Request){
			"wrong bearer":  func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+testToken+"x") },
			"prefix bearer": func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+testToken[:10]) },
			"wrong basic":   func(r *http.Request) { r.SetBasicAuth("admin", "nope") },
			"token as user": func(r *http.Request) { r.SetBasicAuth(testToken, "") },
			"other scheme":  func(r *http.Request) { r.Header.Set("Authorization", "Token "+testToken) },
		} {
			if resp := do(t, ts.URL+p, set); resp.StatusCode != http.StatusUnauthorized {
				t.Errorf("%s with %s: %d, want 401", p, name, resp.StatusCode)
			}
		}
		for name, set := range map[string]func(*http.Request){
			"bearer": func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+testToken) },
			"basic":  func(r *http.Request) { r.SetBasicAuth("anyone", testToken) },
		} {
			if resp := do(t, ts.URL+p, set); resp.StatusCode != http.StatusOK {
				t.Errorf("%s with %s: %d, want 200", p, name, resp.StatusCode)
			}
		}
	}
}

func TestMetricsPublic(t *testing.T) {
	ts := authServer(t, Options{Token: testToken, MetricsPublic: true})
	if resp := do(t, ts.URL+"/metrics", nil); resp.StatusCode != http.StatusOK {
		t.Errorf("/metrics with metrics_public: %d, want 200", resp.StatusCode)
	}
	for _, p := range []string{"/", "/api/dashboard", "/status", "/metrics/../status"} {
		if resp := do(t, ts.URL+p, nil); resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("%s with metrics_public: %d, want 401", p, resp.StatusCode)
		}
	}
	// Without a token nothing is asked.
	open := authServer(t, Options{})
	for _, p := range adminPaths {
		if resp := do(t, open.URL+p, nil); resp.StatusCode != http.StatusOK {
			t.Errorf("%s without a token configured: %d", p, resp.StatusCode)
		}
	}
}

func TestReadyz(t *testing.T) {
	parts := []Part{{Name: "store", Ready: true, State: "loaded"}, {Name: "group main", Ready: true, State: "up"}}
	ts := authServer(t, Options{Ready: func() []Part { return parts }})
	check := func(want int, wantReady bool) {
		t.Helper()
		code, body, _ := get(t, ts.URL+"/readyz")
		var rd Readiness
		if err := json.Unmarshal([]byte(body), &rd); err != nil || code != want || rd.Ready != wantReady || len(rd.Parts) != 2 {
			t.Fatalf("/readyz: %d %s (%v); want %d", code, body, err, want)
		}
	}
	check(200, true)
	parts[1] = Part{Name: "group main", Ready: false, State: "down: connection refused"}
	check(503, false)
	if code, body, _ := get(t, ts.URL+"/healthz"); code != 200 || body != "ok\n" {
		t.Errorf("/healthz: %d %q", code, body)
	}
}

// The dashboard's JSON derives rates, ratios and quantiles from the registry, and lists digests with their mark.
func TestDashboardAPI(t *testing.T) {
	m := stats.NewMetrics()
	d := digests.New(10)
	gets := map[string]int64{"cmd_get": 0, "get_hits": 0, "get_misses": 0, "curr_connections": 2}
	m.SetMemcacheStatsFunc(func() map[string]int64 {
		out := map[string]int64{}
		for k, v := range gets {
			out[k] = v
		}
		return out
	})
	m.SetSamplesFunc(func() []stats.Sample {
		return []stats.Sample{
			{Name: stats.BackendUp, Help: "h", Group: "main", Labels: [][2]string{{"address", "db:3306"}, {"role", "primary"}}, Value: 0},
			{Name: stats.ContainerInfo, Help: "h", Value: 1, Labels: [][2]string{{"container", "c"}, {"table", "t.c"},
				{"group", "main"}, {"get", "caching"}, {"set", "caching"}, {"delete", "db_only"}, {"flush", "cache_only"}, {"write", "async"}}},
			{Name: stats.ContainerWBDropped, Help: "h", Value: 3, Labels: [][2]string{{"container", "c"}}},
			{Name: "keyway_cache_fresh", Help: "h", Group: "main", Labels: [][2]string{{"mode", "off"}}, Value: 0},
		}
	})
	d.Record(digests.Key{Digest: "d1", Normalized: "select `v` from `kv` where `k` = ?", Class: "read"}, 1, time.Millisecond, false)
	s := New(Options{Metrics: m, Digests: d, SampleInterval: time.Hour, // sampled by hand below
		Candidates: func() any {
			return []map[string]any{{"digest": "d1", "key_value": true, "cached": false, "why_not": "no follower"}}
		}})
	defer s.sampler.close()
	for { // the sampler's own first reading: the base
		if _, _, seq := s.sampler.snapshot(); seq > 0 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	s.sampler.sample() // an interval with no traffic
	gets["cmd_get"], gets["get_hits"], gets["get_misses"] = 40, 30, 10
	m.ObserveMemcache(time.Millisecond)
	s.sampler.sample()

	ts := httptest.NewServer(s.Handler())
	defer ts.Close()
	code, body, _ := get(t, ts.URL+"/api/dashboard?series=1")
	if code != 200 {
		t.Fatalf("%d %s", code, body)
	}
	var got Dashboard
	if err := json.Unmarshal([]byte(body), &got); err != nil {
		t.Fatal(err)
	}
	if r := got.Now[seriesMCHit]; r == nil || *r != 0.75 {
		t.Errorf("hit ratio %v, want 0.75", r)
	}
	if v := got.Now[seriesMCOps]; v == nil || *v <= 0 {
		t.Errorf("ops/s %v, want > 0", v)
	}
	if v := got.Now[seriesMCP50]; v == nil || *v <= 0.5 || *v > 1 {
		t.Errorf("p50 %v ms, want within the (0.5, 1] ms bucket", v)
	}
	if got.Now[seriesSQLP50] != nil {
		t.Errorf("SQL p50 with no query: %v, want null", *got.Now[seriesSQLP50])
	}
	if got.Totals["memcache_ops"] != 40 || got.Now[seriesMCConns] == nil || *got.Now[seriesMCConns] != 2 {
		t.Errorf("totals %v, connections %v", got.Totals, got.Now[seriesMCConns])
	}
	if len(got.Series["t"]) != 2 || len(got.Series[seriesMCHit]) != 2 || got.Series[seriesMCHit][0] != nil {
		t.Errorf("series %v", got.Series)
	}
	if len(got.Groups) != 1 || got.Groups[0].State != "down" || got.Groups[0].Address != "db:3306" ||
		got.Groups[0].Cache != "not fresh: no usable binlog, reads go to MySQL" {
		t.Errorf("groups %+v", got.Groups)
	}
	if len(got.Containers) != 1 || got.Containers[0].Write != "async" || got.Containers[0].Dropped != 3 || got.Containers[0].Delete != "db_only" {
		t.Errorf("containers %+v", got.Containers)
	}
	if len(got.Digests) != 1 || got.Digests[0].Candidate != "key-value" || got.Digests[0].WhyNot != "no follower" || got.Digests[0].Calls != 1 {
		t.Errorf("digests %+v", got.Digests)
	}
	// Without ?series=1 the series stay out.
	if _, body, _ := get(t, ts.URL+"/api/dashboard"); strings.Contains(body, `"series"`) {
		t.Errorf("series sent unasked")
	}

	for _, c := range got.Charts {
		code, svg, hdr := get(t, ts.URL+"/api/chart/"+c+".svg")
		if code != 200 || hdr.Get("Content-Type") != "image/svg+xml" || !strings.Contains(svg, "<svg") {
			t.Errorf("chart %s: %d %q %.80s", c, code, hdr.Get("Content-Type"), svg)
		}
	}
	if code, _, _ := get(t, ts.URL+"/api/chart/nope.svg"); code != 404 {
		t.Errorf("unknown chart: %d", code)
	}
	// The page is self-contained: nothing is loaded from another origin.
	_, page, _ := get(t, ts.URL+"/")
	for _, bad := range []string{"http://", "https://", "//cdn", "@import"} {
		if strings.Contains(page, bad) {
			t.Errorf("the page refers to %q", bad)
		}
	}
}

func TestBucketQuantile(t *testing.T) {
	bounds := []float64{1, 2, 4}
	for _, c := range []struct {
		q     float64
		cum   []float64
		total float64
		want  float64
	}{
		{0.5, []float64{0, 10, 10}, 10, 1.5},  // all in (1, 2]: the middle
		{0.99, []float64{5, 5, 10}, 10, 3.96}, // in (2, 4]
		{0.5, []float64{10, 10, 10}, 10, 0.5}, // in the first bucket, from 0
		{0.99, []float64{0, 0, 5}, 10, 4},     // past the last bound: the last bound
	} {
		if got := bucketQuantile(c.q, bounds, c.cum, c.total); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("q%v of %v: %v, want %v", c.q, c.cum, got, c.want)
		}
	}
}
