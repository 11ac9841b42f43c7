// Package admin is keyway's HTTP admin listener: the live dashboard (GET /, with its JSON at /api/dashboard and
// charts at /api/chart/{name}.svg), Prometheus /metrics, per-digest SQL statistics at /digests, the server's
// /status, cache /candidates, and the probes /healthz (liveness) and /readyz (readiness).
//
// Invariants:
//   - GET never changes state. Only POST /digests/reset (the table, then emptied in one step) and DELETE /digests
//     change anything: digest statistics.
//   - With Options.Token set, every endpoint asks for it (see authorize), /metrics excepted only with
//     Options.MetricsPublic. No endpoint shows a password or token: bodies come from typed snapshots that carry
//     none, and the metrics' labels name groups, addresses, users and containers only.
//   - The dashboard page is embedded and fetches nothing from elsewhere; it works with no internet.
//   - Nothing is logged per request at the default level (Info); HTTP server errors go to the logger at Debug.
//   - Every connection is bounded by read, write and idle timeouts, so a stuck scraper cannot pin resources.
//   - Missing parts are tolerated: with no Digests, Metrics or Status in Options the matching path answers 404.
package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"

	"github.com/keywaydb/keyway/internal/digests"
	"github.com/keywaydb/keyway/internal/stats"
)

// Options configures the admin listener.
type Options struct {
	Listen  string         // address for ListenAndServe, e.g. "127.0.0.1:9104"; Serve ignores it
	Digests *digests.Table // per-digest statistics; nil: /digests answers 404
	Metrics *stats.Metrics // nil: /metrics answers 404
	Status  func() any     // JSON-encoded at /status; nil: /status answers 404
	// Candidates is JSON-encoded at /candidates (the SQL door's SHOW KEYWAY CANDIDATES); nil: 404.
	Candidates func() any
	// Promote runs POST /groups/{group}/failover and /groups/{group}/switchover (op "failover" or "switchover",
	// with the request's "to" and "hold" parameters); its report is the JSON reply. nil: 404.
	Promote func(ctx context.Context, group, op, to string, hold time.Duration) (any, error)
	// Ready lists the parts /readyz checks (doors, store, groups); nil: /readyz has no parts and answers 200.
	Ready  func() []Part
	Logger *slog.Logger // nil: slog.Default()

	// Token, when set, is asked of every request (bearer token, or basic-auth password with any user name).
	Token string
	// MetricsPublic leaves /metrics open without the token.
	MetricsPublic bool

	// SampleInterval and SampleWindow are how often the dashboard's sampler reads Metrics and how much it keeps;
	// 0 means 1s and 10m.
	SampleInterval, SampleWindow time.Duration
}

// Defaults of Options.SampleInterval and SampleWindow.
const (
	DefaultSampleInterval = time.Second
	DefaultSampleWindow   = 10 * time.Minute
)

// Server is the admin HTTP server.
type Server struct {
	o       Options
	log     *slog.Logger
	handler http.Handler
	srv     *http.Server
	sampler *sampler // nil without Metrics
	charts  chartCache
}

// Timeouts of the admin server's connections.
const (
	readHeaderTimeout = 5 * time.Second
	readTimeout       = 10 * time.Second
	writeTimeout      = 30 * time.Second // a /metrics scrape with many pools, or a big digest table, fits well
	idleTimeout       = 2 * time.Minute
)

// New returns a server for o. It does not listen yet: call Serve or ListenAndServe.
func New(o Options) *Server {
	s := &Server{o: o, log: o.Logger}
	if s.log == nil {
		s.log = slog.Default()
	}
	if o.Metrics != nil {
		if o.SampleInterval <= 0 {
			o.SampleInterval = DefaultSampleInterval
		}
		if o.SampleWindow <= 0 {
			o.SampleWindow = DefaultSampleWindow
		}
		reg := o.Metrics.Registry()
		s.sampler = newSampler(func() (*gathered, error) {
			fams, err := reg.Gather() // a partial result is still worth keeping
			g := &gathered{at: time.Now(), families: make(map[string]*dto.MetricFamily, len(fams))}
			for _, f := range fams {
				g.families[f.GetName()] = f
			}
			return g, err
		}, o.SampleInterval, o.SampleWindow)
		go s.sampler.run()
	}
	s.handler = s.authorize(s.routes())
	s.srv = &http.Server{
		Addr:              o.Listen,
		Handler:           s.handler,
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       readTimeout,
		WriteTimeout:      writeTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
	}
	return s
}

// Serve answers requests on ln until Shutdown. It returns nil after Shutdown, any other error otherwise.
func (s *Server) Serve(ln net.Listener) error {
	if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("admin: serving on %s: %w", ln.Addr(), err)
	}
	return nil
}

// ListenAndServe listens on Options.Listen and serves until Shutdown.
func (s *Server) ListenAndServe() error {
	ln, err := net.Listen("tcp", s.o.Listen)
	if err != nil {
		return fmt.Errorf("admin: listen on %q (check [admin] listen): %w", s.o.Listen, err)
	}
	return s.Serve(ln)
}

// Handler returns the admin routes, behind the token check, for tests or for mounting elsewhere.
func (s *Server) Handler() http.Handler { return s.handler }

// Shutdown stops accepting, waits for requests in flight until ctx ends, then closes everything.
func (s *Server) Shutdown(ctx context.Context) error {
	if s.sampler != nil {
		s.sampler.close()
	}
	if err := s.srv.Shutdown(ctx); err != nil {
		_ = s.srv.Close()
		return fmt.Errorf("admin: shutdown: %w", err)
	}
	return nil
}

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	// "GET" patterns also match HEAD; other methods get 405 with an Allow header from the mux.
	mux.HandleFunc("GET /{$}", s.page)
	mux.HandleFunc("GET /api/dashboard", s.apiDashboard)
	mux.HandleFunc("GET /api/chart/{name}", s.apiChart)
	mux.HandleFunc("GET /healthz", s.healthz)
	mux.HandleFunc("GET /readyz", s.readyz)
	if s.o.Metrics != nil {
		mux.Handle("GET /metrics", promhttp.HandlerFor(s.o.Metrics.Registry(), promhttp.HandlerOpts{
			// One bad collector must not blank the whole scrape.
			ErrorHandling: promhttp.ContinueOnError,
			ErrorLog:      slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
		}))
	}
	if s.o.Digests != nil {
		mux.HandleFunc("GET /digests", s.digests)
		mux.HandleFunc("DELETE /digests", s.resetDigests)
		mux.HandleFunc("POST /digests/reset", s.digests)
	}
	if s.o.Status != nil {
		mux.HandleFunc("GET /status", s.status)
	}
	if s.o.Candidates != nil {
		mux.HandleFunc("GET /candidates", func(w http.ResponseWriter, r *http.Request) { s.writeJSON(w, s.o.Candidates()) })
	}
	if s.o.Promote != nil {
		mux.HandleFunc("POST /groups/{group}/{op}", s.promote)
	}
	return mux
}

// promote runs a failover or a switchover of a group for keyway failover / keyway switchover.
func (s *Server) promote(w http.ResponseWriter, r *http.Request) {
	op := r.PathValue("op")
	if op != "failover" && op != "switchover" {
		http.Error(w, "POST /groups/{group}/failover or /groups/{group}/switchover", http.StatusNotFound)
		return
	}
	hold := 2 * time.Second
	if h := r.URL.Query().Get("hold"); h != "" {
		d, err := time.ParseDuration(h)
		if err != nil || d <= 0 {
			http.Error(w, "hold: want a positive duration such as 2s", http.StatusBadRequest)
			return
		}
		hold = d
	}
	rep, err := s.o.Promote(r.Context(), r.PathValue("group"), op, r.URL.Query().Get("to"), hold)
	if err != nil {
		s.log.Warn("admin: "+op+" failed", "group", r.PathValue("group"), "err", err)
		http.Error(w, err.Error(), http.StatusConflict)
		return
	}
	s.writeJSON(w, rep)
}

// digests serves the digest table: JSON by default, a ProxySQL-like text table with ?format=text; ?limit=N returns
// only the N rows with the most total time. As POST /digests/reset it returns the table and empties it in one
// step. A GET never resets: ?reset=1 (which once did) is refused, so a crawler or prefetch cannot wipe statistics.
func (s *Server) digests(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	var rows []digests.Row
	if r.Method == http.MethodGet && q.Has("reset") {
		w.Header().Set("Allow", "POST")
		http.Error(w, "reset digests with POST /digests/reset (or DELETE /digests); a GET changes nothing", http.StatusMethodNotAllowed)
		return
	}
	if r.Method == http.MethodPost {
		rows = s.o.Digests.SnapshotAndReset()
	} else {
		rows = s.o.Digests.Snapshot()
	}
	if l := q.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 0 {
			http.Error(w, "limit must be a non-negative integer", http.StatusBadRequest)
			return
		}
		if n < len(rows) {
			rows = rows[:n]
		}
	}
	switch q.Get("format") {
	case "", "json":
		s.writeJSON(w, rows)
	case "text":
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write(formatDigestTable(rows))
	default:
		http.Error(w, "format must be json or text", http.StatusBadRequest)
	}
}

func (s *Server) resetDigests(w http.ResponseWriter, r *http.Request) {
	s.o.Digests.Reset()
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) status(w http.ResponseWriter, r *http.Request) {
	s.writeJSON(w, s.o.Status())
}

func (s *Server) writeJSON(w http.ResponseWriter, v any) {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		s.log.Debug("admin: encoding a reply", "err", err)
		http.Error(w, "cannot encode reply: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	b = append(b, '\n')
	_, _ = w.Write(b)
}

// maxTextDigest bounds the digest_text column of the text table; the JSON form has the full text.
const maxTextDigest = 100

// formatDigestTable renders rows the way the mysql client prints ProxySQL's stats_mysql_query_digest.
func formatDigestTable(rows []digests.Row) []byte {
	header := []string{"digest", "class", "schemaname", "username", "count_star", "sum_time_us", "min_time_us",
		"avg_time_us", "max_time_us", "sum_rows", "errors", "first_seen", "last_seen", "digest_text"}
	right := []bool{false, false, false, false, true, true, true, true, true, true, true, false, false, false}
	cells := make([][]string, 0, len(rows))
	ts := func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return t.UTC().Format("2006-01-02 15:04:05")
	}
	for _, d := range rows {
		dig := d.Digest
		if len(dig) > 16 {
			dig = dig[:16] // a 64-bit prefix, as wide as ProxySQL's digests, is enough to tell rows apart
		}
		text := strings.Join(strings.Fields(d.Normalized), " ")
		if r := []rune(text); len(r) > maxTextDigest {
			text = string(r[:maxTextDigest-1]) + "…"
		}
		us := func(x time.Duration) string { return strconv.FormatInt(x.Microseconds(), 10) }
		cells = append(cells, []string{dig, d.Class, d.Schema, d.User,
			strconv.FormatInt(d.Count, 10), us(d.SumLatency), us(d.MinLatency), us(d.AvgLatency), us(d.MaxLatency),
			strconv.FormatInt(d.Rows, 10), strconv.FormatInt(d.Errors, 10), ts(d.FirstSeen), ts(d.LastSeen), text})
	}
	width := make([]int, len(header))
	for i, h := range header {
		width[i] = len(h)
	}
	for _, row := range cells {
		for i, c := range row {
			if n := len([]rune(c)); n > width[i] {
				width[i] = n
			}
		}
	}
	var b strings.Builder
	sep := func() {
		for _, wd := range width {
			b.WriteString("+")
			b.WriteString(strings.Repeat("-", wd+2))
		}
		b.WriteString("+\n")
	}
	line := func(row []string, align bool) {
		for i, c := range row {
			pad := strings.Repeat(" ", width[i]-len([]rune(c)))
			b.WriteString("| ")
			if align && right[i] {
				b.WriteString(pad + c)
			} else {
				b.WriteString(c + pad)
			}
			b.WriteString(" ")
		}
		b.WriteString("|\n")
	}
	sep()
	line(header, false)
	sep()
	for _, row := range cells {
		line(row, true)
	}
	sep()
	if len(rows) == 1 {
		b.WriteString("1 row\n")
	} else {
		fmt.Fprintf(&b, "%d rows\n", len(rows))
	}
	return []byte(b.String())
}
