package main

// The admin listener end to end: keyway with the memcache and SQL doors, containers and a binlog follower on a
// private MariaDB, an [admin] token, and real traffic. The dashboard is opened in headless Chromium (Debian's
// chromium, driven over CDP by chromedp): its charts draw, its ops counter rises, its digests table holds the
// statement the test ran, and a screenshot is saved. Every admin endpoint asks for the token, and none shows a
// configured password or the token.
//
// KEYWAY_SCREENSHOT=/abs/path.png saves the screenshot there, after a minute of traffic (docs/dashboard.png is made
// so, see the README); otherwise it goes to the test's temporary directory.

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"image"
	"image/png"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bradfitz/gomemcache/memcache"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"

	"github.com/keywaydb/keyway/internal/testenv"
)

// Distinctive secrets: none may appear in any admin endpoint's body.
const (
	dashGroupPassword  = "GroupPw-7f3a9c51"
	dashBinlogPassword = "BinlogPw-5e1d2b83"
	dashUserPassword   = "UserPw-c41e77d0"
	dashAdminToken     = "AdminTok-9d2e6f0a1b3c4d5e"
)

// dashKeyway is a keyway with every part the dashboard shows.
type dashKeyway struct {
	kw              *testenv.Process
	mcAddr, sqlAddr string
	adminURL        string
	appDSN          string // the SQL door, as the client user
	groupAddr       string // the group's primary, MariaDB
	secrets         []string
}

func startDashKeyway(t *testing.T) *dashKeyway {
	t.Helper()
	m := testenv.NewMariaDB(t)
	root, err := sql.Open("mysql", m.RootDSN)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	for _, q := range []string{
		`CREATE TABLE test.kv (k VARCHAR(64) PRIMARY KEY, v VARCHAR(255))`,
		`CREATE TABLE test.queue (k VARCHAR(64) PRIMARY KEY, v VARCHAR(255))`,
		`INSERT INTO test.kv VALUES ('k1', 'one'), ('k2', 'two')`,
		// keyway's own account, the follower's, each with its distinctive password.
		`CREATE USER 'kwgroup'@'%' IDENTIFIED BY '` + dashGroupPassword + `'`,
		`GRANT SELECT, INSERT, UPDATE, DELETE ON test.* TO 'kwgroup'@'%'`,
		`CREATE USER 'kwbinlog'@'%' IDENTIFIED BY '` + dashBinlogPassword + `'`,
		`GRANT REPLICATION SLAVE, REPLICATION CLIENT, SELECT ON *.* TO 'kwbinlog'@'%'`,
	} {
		if _, err := root.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	sqlAddr, adminAddr := freeAddr(t), freeAddr(t) // the memcache door's port comes from testenv
	cfg := fmt.Sprintf(`
[sql]
listen = %q

[[sql.users]]
name = "app"
password = %q
backend_user = "kwgroup"
backend_password = %q

[[groups]]
name = "main"
primary = %q
user = "kwgroup"
password = %q
binlog_user = "kwbinlog"
binlog_password = %q

[[containers]]
name = "kv"
table = "test.kv"
key = "k"
values = ["v"]
get = "caching"
set = "caching"
delete = "caching"

[[containers]]
name = "queue"
table = "test.queue"
key = "k"
values = ["v"]
get = "caching"
set = "caching"
delete = "caching"
write = "async"

[admin]
listen = %q
token = %q
`, sqlAddr, dashUserPassword, dashGroupPassword, m.Addr, dashGroupPassword, dashBinlogPassword, adminAddr, dashAdminToken)
	dir := t.TempDir()
	path := filepath.Join(dir, "keyway.toml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	kw := testenv.NewKeyway(t, "--config", path, "--data-dir", filepath.Join(dir, "data"), "--durability", "async")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, a := range []string{sqlAddr, adminAddr} {
		if err := testenv.WaitForPort(ctx, a); err != nil {
			t.Fatalf("%s: %v\nkeyway:\n%s", a, err, kw.Output())
		}
	}
	return &dashKeyway{kw: kw, mcAddr: kw.Addr, sqlAddr: sqlAddr, adminURL: "http://" + adminAddr,
		groupAddr: m.Addr,
		appDSN:    "app:" + dashUserPassword + "@tcp(" + sqlAddr + ")/test",
		secrets:   []string{dashGroupPassword, dashBinlogPassword, dashUserPassword, dashAdminToken}}
}

// adminGet fetches path with the token as given ("" for none) and returns the status and body.
func adminGet(t *testing.T, url, bearer string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// driveTraffic runs memcache and SQL traffic until ctx ends. The SQL statement is the one the digests table must
// show.
func driveTraffic(ctx context.Context, t *testing.T, k *dashKeyway, wg *sync.WaitGroup) {
	mc := memcache.New(k.mcAddr)
	db, err := sql.Open("mysql", k.appDSN)
	if err != nil {
		t.Fatal(err)
	}
	wg.Add(2)
	go func() {
		defer wg.Done()
		for i := 0; ctx.Err() == nil; i++ {
			key := "plain" + strconv.Itoa(i%50)
			_ = mc.Set(&memcache.Item{Key: key, Value: []byte("v" + strconv.Itoa(i))})
			_, _ = mc.Get(key)
			_, _ = mc.Get("missing" + strconv.Itoa(i%7))
			_, _ = mc.Get("@@kv.k1")
			if i%20 == 0 {
				_ = mc.Set(&memcache.Item{Key: "@@queue.q" + strconv.Itoa(i%10), Value: []byte("queued")})
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()
	go func() {
		defer wg.Done()
		defer db.Close()
		for ctx.Err() == nil {
			rows, err := db.QueryContext(ctx, "SELECT v FROM kv WHERE k = 'k2'")
			if err == nil {
				rows.Close()
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
}

func TestDashboardInChromium(t *testing.T) {
	testenv.Need(t, "chromium") // never a skip: a missing chromium fails, as every other component does
	k := startDashKeyway(t)
	ctx, stopTraffic := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer wg.Wait()
	defer stopTraffic()
	driveTraffic(ctx, t, k, &wg)

	// The statement the page must list, as the JSON API names it once the door has seen it.
	var digest string
	deadline := time.Now().Add(30 * time.Second)
	for digest == "" && time.Now().Before(deadline) {
		_, body := adminGet(t, k.adminURL+"/api/dashboard", dashAdminToken)
		var d struct {
			Digests []struct{ Text string } `json:"digests"`
		}
		if err := json.Unmarshal([]byte(body), &d); err != nil {
			t.Fatalf("/api/dashboard: %v\n%s", err, body)
		}
		for _, r := range d.Digests {
			if strings.Contains(r.Text, "kv") && strings.Contains(strings.ToLower(r.Text), "select") {
				digest = r.Text
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	if digest == "" {
		t.Fatalf("the digests never listed the SELECT on kv\nkeyway:\n%s", k.kw.Output())
	}

	chrome, err := testenv.LookPath("chromium")
	if err != nil {
		t.Fatal(err)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chrome),
		chromedp.NoSandbox, // root in a container has no user namespace for the sandbox
		chromedp.DisableGPU,
		chromedp.WindowSize(1200, 900),
		chromedp.UserDataDir(t.TempDir()),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelAlloc()
	bctx, cancelBrowser := chromedp.NewContext(actx)
	defer cancelBrowser()
	bctx, cancelTimeout := context.WithTimeout(bctx, 90*time.Second)
	defer cancelTimeout()

	var charts int
	var first, later, digestsText string
	var shot []byte
	err = chromedp.Run(bctx,
		emulation.SetDeviceMetricsOverride(1200, 900, 1, false),
		network.Enable(),
		// Every request of the page (fetch and images) carries the token, as a browser does after a basic-auth
		// prompt.
		network.SetExtraHTTPHeaders(network.Headers{"Authorization": "Bearer " + dashAdminToken}),
		chromedp.Navigate(k.adminURL+"/"),
		// The charts have drawn: every chart image loaded an SVG at least once.
		chromedp.Poll(`(() => { const imgs = [...document.querySelectorAll("img.chart")];
			return imgs.length > 0 && imgs.every(i => i.dataset.drawn === "1" && i.complete && i.naturalWidth > 0); })()`,
			nil, chromedp.WithPollingTimeout(60*time.Second)),
		chromedp.Evaluate(`document.querySelectorAll("img.chart").length`, &charts),
		chromedp.Text("#memcache-ops-total", &first, chromedp.ByID),
	)
	if err != nil {
		t.Fatalf("chromium: %v\nkeyway:\n%s", err, k.kw.Output())
	}
	if os.Getenv("KEYWAY_SCREENSHOT") != "" {
		// For the README's picture: a minute of traffic, so the charts show more than a few points.
		time.Sleep(time.Minute)
	}
	// The counter rises while traffic runs: wait for a later poll of the page to show a larger figure.
	err = chromedp.Run(bctx,
		chromedp.Poll(`Number(document.getElementById("memcache-ops-total").textContent.replace(/[^0-9]/g, "")) > `+
			strconv.Itoa(atoi(first)), nil, chromedp.WithPollingTimeout(30*time.Second)),
		chromedp.Text("#memcache-ops-total", &later, chromedp.ByID),
		chromedp.Text("#digests", &digestsText, chromedp.ByID),
		chromedp.FullScreenshot(&shot, 100), // quality 100: PNG
	)
	if err != nil {
		t.Fatalf("chromium: %v (ops counter first %q)\nkeyway:\n%s", err, first, k.kw.Output())
	}
	if charts < 6 {
		t.Errorf("%d charts drawn, want every door's (at least 6)", charts)
	}
	if atoi(later) <= atoi(first) {
		t.Errorf("the ops counter did not rise: %q then %q", first, later)
	}
	if !strings.Contains(digestsText, digest) {
		t.Errorf("the digests table lacks %q:\n%s", digest, digestsText)
	}
	saveScreenshot(t, shot)
}

// atoi reads a figure the page formats with thousands separators.
func atoi(s string) int {
	n, _ := strconv.Atoi(strings.Map(func(r rune) rune {
		if r >= '0' && r <= '9' {
			return r
		}
		return -1
	}, s))
	return n
}

// saveScreenshot writes the PNG to $KEYWAY_SCREENSHOT, or to the test's temporary directory, re-encoded with the
// best compression.
func saveScreenshot(t *testing.T, shot []byte) {
	t.Helper()
	img, _, err := image.Decode(bytes.NewReader(shot))
	if err != nil {
		t.Fatalf("the screenshot is not an image: %v", err)
	}
	var buf bytes.Buffer
	enc := png.Encoder{CompressionLevel: png.BestCompression}
	if err := enc.Encode(&buf, img); err != nil {
		t.Fatal(err)
	}
	path := os.Getenv("KEYWAY_SCREENSHOT")
	if path == "" {
		path = filepath.Join(t.TempDir(), "dashboard.png")
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("dashboard screenshot: %s (%dx%d, %d bytes)", path, img.Bounds().Dx(), img.Bounds().Dy(), buf.Len())
}

// Every admin endpoint asks for the token (401 with a challenge without it, 200 with it, as bearer or basic-auth
// password), and no body holds a configured password or the token.
func TestAdminAuthAndNoSecrets(t *testing.T) {
	k := startDashKeyway(t)
	ctx, stopTraffic := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	driveTraffic(ctx, t, k, &wg)
	time.Sleep(1500 * time.Millisecond) // figures to show, samples to take: not a timing assertion
	stopTraffic()
	wg.Wait()

	paths := []string{"/", "/api/dashboard", "/api/dashboard?series=1", "/api/chart/memcache_ops.svg",
		"/metrics", "/digests", "/digests?format=text", "/status", "/candidates", "/healthz", "/readyz"}
	for _, p := range paths {
		req, _ := http.NewRequest(http.MethodGet, k.adminURL+p, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized || len(resp.Header.Values("WWW-Authenticate")) == 0 {
			t.Errorf("%s without the token: %d, challenge %q", p, resp.StatusCode, resp.Header.Values("WWW-Authenticate"))
		}
		checkNoSecrets(t, p+" (401)", string(body), k.secrets)
		if code, _ := adminGet(t, k.adminURL+p, "wrong-token-0123456789"); code != http.StatusUnauthorized {
			t.Errorf("%s with a wrong token: %d", p, code)
		}

		code, body2 := adminGet(t, k.adminURL+p, dashAdminToken)
		if code != http.StatusOK {
			t.Errorf("%s with the token: %d\n%s", p, code, body2)
		}
		checkNoSecrets(t, p, body2, k.secrets)

		req, _ = http.NewRequest(http.MethodGet, k.adminURL+p, nil)
		req.SetBasicAuth("anyone", dashAdminToken)
		resp, err = http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("%s with basic auth: %d", p, resp.StatusCode)
		}
	}

	// /readyz names each part and is ready: both doors listen, the store loaded, the group is up.
	code, body := adminGet(t, k.adminURL+"/readyz", dashAdminToken)
	var rd struct {
		Ready bool
		Parts []struct {
			Name  string
			Ready bool
			State string
		}
	}
	if err := json.Unmarshal([]byte(body), &rd); err != nil || code != 200 || !rd.Ready {
		t.Fatalf("/readyz: %d %s (%v)", code, body, err)
	}
	var names []string
	for _, p := range rd.Parts {
		names = append(names, p.Name)
	}
	if got := strings.Join(names, ","); got != "store,memcache door,SQL door,group main" {
		t.Errorf("/readyz parts: %s", got)
	}

	_, dash := adminGet(t, k.adminURL+"/api/dashboard", dashAdminToken)
	t.Logf("/api/dashboard:\n%s", dash)

	// /metrics carries backend, container and store figures, and every family passes client_golang's linter
	// (counters end in _total, base units, help).
	_, metrics := adminGet(t, k.adminURL+"/metrics", dashAdminToken)
	problems, err := promlint.New(strings.NewReader(metrics)).Lint()
	if err != nil {
		t.Fatalf("linting /metrics: %v", err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
	for _, want := range []string{
		`keyway_backend_up{address="` + k.groupAddr + `",group="main",role="primary"} 1`,
		`keyway_container_info{container="queue",delete="caching",flush=`,
		`keyway_container_write_behind_pending_rows{container="queue"}`,
		`keyway_container_write_behind_dropped_rows_total{container="queue"} 0`,
		`keyway_container_group_commit_batches_total{container="kv"}`,
		`keyway_store_info{durability="async",persistent="on"} 1`,
		`keyway_memcache_cmd_get_total `,
		`keyway_memcache_request_duration_seconds_bucket`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

func checkNoSecrets(t *testing.T, what, body string, secrets []string) {
	t.Helper()
	for _, s := range secrets {
		if strings.Contains(body, s) {
			t.Errorf("%s shows a configured secret %q", what, s)
		}
	}
}
