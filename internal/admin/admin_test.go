package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/keywaydb/keyway/internal/digests"
	"github.com/keywaydb/keyway/internal/stats"
)

func newTestServer(t *testing.T) (*httptest.Server, *digests.Table, *stats.Metrics, *bytes.Buffer) {
	t.Helper()
	d := digests.New(100)
	m := stats.NewMetrics()
	var logs bytes.Buffer
	s := New(Options{
		Digests: d, Metrics: m,
		Status: func() any { return map[string]any{"version": "test", "sql_connections": 3} },
		Logger: slog.New(slog.NewTextHandler(&logs, nil)), // default level: Info
	})
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)
	return ts, d, m, &logs
}

func get(t *testing.T, url string) (int, string, http.Header) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b), resp.Header
}

func TestMetricsEndpoint(t *testing.T) {
	ts, _, m, logs := newTestServer(t)
	m.SQLConnectionOpened()
	m.ObserveQuery("read", time.Millisecond, false)
	m.ObserveQuery("write", 2*time.Millisecond, true)
	m.SetPoolStatsFunc(func() []stats.PoolStat {
		return []stats.PoolStat{{Group: "g", Address: "db:3306", User: "app", Open: 2, Idle: 1, InUse: 1}}
	})
	m.SetMemcacheStatsFunc(func() map[string]int64 { return map[string]int64{"cmd_get": 7, "curr_items": 3} })

	code, body, hdr := get(t, ts.URL+"/metrics")
	if code != 200 {
		t.Fatalf("status %d: %s", code, body)
	}
	if !strings.HasPrefix(hdr.Get("Content-Type"), "text/plain") {
		t.Errorf("content type %q", hdr.Get("Content-Type"))
	}
	for _, want := range []string{
		"keyway_sql_connections 1",
		`keyway_sql_queries_total{class="read",result="ok"} 1`,
		`keyway_sql_queries_total{class="write",result="error"} 1`,
		`keyway_sql_query_duration_seconds_bucket{class="read",le="0.001"} 1`,
		`keyway_backend_pool_connections{address="db:3306",group="g",state="in_use",user="app"} 1`,
		"keyway_backend_pool_waits_total",
		"keyway_backend_pool_errors_total",
		"keyway_memcache_cmd_get_total 7",
		"keyway_memcache_curr_items 3",
		"go_goroutines",
		"process_resident_memory_bytes",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if logs.Len() != 0 {
		t.Errorf("requests were logged at the default level:\n%s", logs)
	}
}

func TestDigestsEndpoint(t *testing.T) {
	ts, d, _, _ := newTestServer(t)
	k := digests.Key{Digest: "d1", Normalized: "select * from `t` where `id` = ?", Class: "read", Schema: "shop", User: "app"}
	d.Record(k, 1, 100*time.Microsecond, false)
	d.Record(k, 1, 300*time.Microsecond, false)
	d.Record(digests.Key{Digest: "d2", Normalized: "update `t` set `a` = ?", Class: "write"}, 1, time.Millisecond, true)

	code, body, hdr := get(t, ts.URL+"/digests")
	if code != 200 || hdr.Get("Content-Type") != "application/json" {
		t.Fatalf("status %d, type %q: %s", code, hdr.Get("Content-Type"), body)
	}
	var rows []digests.Row
	if err := json.Unmarshal([]byte(body), &rows); err != nil {
		t.Fatalf("decoding %s: %v", body, err)
	}
	if len(rows) != 2 || rows[0].Digest != "d2" || rows[1].Digest != "d1" {
		t.Fatalf("rows: %+v", rows)
	}
	r := rows[1]
	if r.Count != 2 || r.Rows != 2 || r.MinLatency != 100*time.Microsecond || r.AvgLatency != 200*time.Microsecond ||
		r.MaxLatency != 300*time.Microsecond || r.Schema != "shop" || r.User != "app" || r.Normalized != k.Normalized {
		t.Errorf("row: %+v", r)
	}
	if rows[0].Errors != 1 || rows[0].Class != "write" {
		t.Errorf("row: %+v", rows[0])
	}
	// The JSON re-encodes to the same bytes: a full round trip.
	again, _ := json.MarshalIndent(rows, "", "  ")
	if string(again)+"\n" != body {
		t.Errorf("round trip differs:\n%s\n%s", again, body)
	}

	code, body, _ = get(t, ts.URL+"/digests?limit=1")
	if code != 200 || strings.Count(body, `"digest"`) != 1 {
		t.Errorf("limit=1: %d %s", code, body)
	}

	code, text, _ := get(t, ts.URL+"/digests?format=text")
	if code != 200 {
		t.Fatalf("text: %d", code)
	}
	for _, want := range []string{"| digest ", "count_star", "| d1 ", "select * from `t` where `id` = ?", "2 rows"} {
		if !strings.Contains(text, want) {
			t.Errorf("text table lacks %q:\n%s", want, text)
		}
	}
	lines := strings.Split(strings.TrimSpace(text), "\n")
	if len(lines[0]) != len(lines[1]) || len(lines[1]) != len(lines[3]) {
		t.Errorf("table columns do not line up:\n%s", text)
	}

	if code, _, _ := get(t, ts.URL+"/digests?format=xml"); code != 400 {
		t.Errorf("bad format: %d", code)
	}
}

func TestDigestsReset(t *testing.T) {
	ts, d, _, _ := newTestServer(t)
	k := digests.Key{Digest: "d1", Normalized: "select ?"}
	d.Record(k, 0, time.Millisecond, false)

	// A GET changes nothing, even with ?reset=1.
	if code, _, _ := get(t, ts.URL+"/digests?reset=1"); code != http.StatusMethodNotAllowed {
		t.Fatalf("GET ?reset=1: %d, want 405", code)
	}
	if n := len(d.Snapshot()); n != 1 {
		t.Fatalf("%d rows after GET ?reset=1, want 1", n)
	}
	// POST /digests/reset returns the table and empties it.
	resp, err := http.Post(ts.URL+"/digests/reset", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	var rows []digests.Row
	if err := json.NewDecoder(resp.Body).Decode(&rows); err != nil || len(rows) != 1 {
		t.Fatalf("POST reset returned %v (%v)", rows, err)
	}
	resp.Body.Close()
	if n := len(d.Snapshot()); n != 0 {
		t.Fatalf("%d rows after POST /digests/reset", n)
	}

	d.Record(k, 0, time.Millisecond, false)
	req, _ := http.NewRequest(http.MethodDelete, ts.URL+"/digests", nil)
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("DELETE: %d", resp.StatusCode)
	}
	if _, body, _ := get(t, ts.URL+"/digests"); strings.TrimSpace(body) != "[]" {
		t.Fatalf("after DELETE: %s", body)
	}
}

func TestStatusIndexAndMethods(t *testing.T) {
	ts, _, _, _ := newTestServer(t)
	code, body, _ := get(t, ts.URL+"/status")
	var st map[string]any
	if err := json.Unmarshal([]byte(body), &st); code != 200 || err != nil || st["version"] != "test" {
		t.Fatalf("/status: %d %s %v", code, body, err)
	}
	code, body, hdr := get(t, ts.URL+"/")
	if code != 200 || !strings.Contains(hdr.Get("Content-Type"), "text/html") {
		t.Fatalf("/: %d %q", code, hdr.Get("Content-Type"))
	}
	for _, l := range []string{`href="/metrics"`, `href="/digests"`, `href="/status"`} {
		if !strings.Contains(body, l) {
			t.Errorf("index lacks %s", l)
		}
	}
	if code, _, _ := get(t, ts.URL+"/nope"); code != 404 {
		t.Errorf("/nope: %d", code)
	}
	resp, err := http.Post(ts.URL+"/metrics", "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST /metrics: %d", resp.StatusCode)
	}
}

func TestMissingParts(t *testing.T) {
	ts := httptest.NewServer(New(Options{}).Handler())
	defer ts.Close()
	for _, p := range []string{"/metrics", "/digests", "/status"} {
		if code, _, _ := get(t, ts.URL+p); code != 404 {
			t.Errorf("%s without its source: %d, want 404", p, code)
		}
	}
	if code, _, _ := get(t, ts.URL+"/"); code != 200 {
		t.Errorf("/: %d", code)
	}
}

func TestServeAndShutdown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := New(Options{Metrics: stats.NewMetrics()})
	done := make(chan error, 1)
	go func() { done <- s.Serve(ln) }()
	if code, _, _ := get(t, "http://"+ln.Addr().String()+"/metrics"); code != 200 {
		t.Fatalf("/metrics over a real listener: %d", code)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("Serve after Shutdown: %v, want nil", err)
	}
}
