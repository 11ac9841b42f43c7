package bench

import (
	"bytes"
	_ "embed"
	"errors"
	"fmt"
	"html/template"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/keywaydb/keyway/internal/chart"
)

// The report page: one self-contained HTML file. Charts are SVG drawn by internal/chart and inlined, the CSS is
// inline, and nothing is fetched from anywhere, so the file can be mailed, archived or opened offline.
//
//go:embed report.html.tmpl
var reportHTML string

// reportTemplate is parsed on first use, not at init: the binary that writes reports is the one that serves, and a
// server has no use for the parse's allocations or for the template packages' pages it would make resident.
var reportTemplate = sync.OnceValue(func() *template.Template {
	return template.Must(template.New("report").Funcs(template.FuncMap{
		"figure": fmtFigure,
		"ratio":  func(v float64) string { return strconv.FormatFloat(v, 'f', 2, 64) },
		"share":  func(v float64) string { return strconv.FormatFloat(v, 'f', 3, 64) }, // a hit ratio
		"color":  func(i int) template.CSS { return template.CSS(chart.ColorHex(i)) },
		"micros": microsBand, // "95.1 [90.2–99.0]"
		"added": func(s *Series) string { // "+90.0 [85.2–95.1]", "-" for none
			if s == nil {
				return "-"
			}
			return signedBand(*s)
		},
	}).Parse(reportHTML))
})

// Chart sizes in CSS pixels: wide enough for four targets at four concurrencies.
const (
	chartWidth  = 560
	chartHeight = 300
)

// htmlScenario is a Scenario with its charts drawn.
type htmlScenario struct {
	Scenario
	Throughput template.HTML   // the ops/s chart
	Latency    []template.HTML // one chart per percentile
	Rows       []htmlRow
	HasCounts  bool // a row has Counts: the table shows their column
}

// htmlRow is one target at one concurrency in a scenario's table.
type htmlRow struct {
	Concurrency int
	Target      string
	Color       int // the target's colour index in the charts
	Result      Result
	Ratio       string // median over the baseline's, "" for the baseline
	Latency     string // median percentiles, "p50 0.12 · p99 0.40"
	Counts      string // median failures and connections where the load counts them, "1040 errors 9240 · timeouts 0 · other errors 0 · MariaDB connections 151"
}

// WriteHTML writes the report as one HTML page.
func (r *Report) WriteHTML(w io.Writer) error {
	data := struct {
		*Report
		Wins           []Win
		Scenarios      []htmlScenario
		StalenessChart template.HTML
	}{Report: r, Wins: r.Wins()}
	for _, s := range r.Scenarios() {
		hs, err := drawScenario(s)
		if err != nil {
			return err
		}
		data.Scenarios = append(data.Scenarios, hs)
	}
	if st := r.Staleness; st != nil {
		svg, err := chart.Bars(chart.Options{Title: "Direct write → first fresh read through keyway", YLabel: "ms",
			Width: chartWidth, Height: chartHeight}, []chart.Group{{Label: "staleness", Bars: []chart.Bar{
			{Target: "p50", Min: st.P50MS, Median: st.P50MS, Max: st.P50MS},
			{Target: "p99", Min: st.P99MS, Median: st.P99MS, Max: st.P99MS},
			{Target: "max", Min: st.MaxMS, Median: st.MaxMS, Max: st.MaxMS},
		}}})
		if err != nil {
			return fmt.Errorf("bench: staleness chart: %w", err)
		}
		data.StalenessChart = inlineSVG(svg)
	}
	var b bytes.Buffer
	if err := reportTemplate().Execute(&b, data); err != nil {
		return fmt.Errorf("bench: report page: %w", err)
	}
	_, err := w.Write(b.Bytes())
	return err
}

// drawScenario draws a scenario's charts and lays out its table.
func drawScenario(s Scenario) (htmlScenario, error) {
	hs := htmlScenario{Scenario: s}
	colors := map[string]int{}
	var groups []chart.Group
	for _, c := range s.Cases {
		g := chart.Group{Label: s.CaseLabel(c.Concurrency)}
		var base float64
		for _, r := range c.Results {
			if r.Target == s.Baseline {
				base = r.Median
			}
		}
		for _, r := range c.Results {
			if _, ok := colors[r.Target]; !ok {
				colors[r.Target] = len(colors)
			}
			g.Bars = append(g.Bars, chart.Bar{Target: r.Target, Min: r.Min, Median: r.Median, Max: r.Max})
			row := htmlRow{Concurrency: c.Concurrency, Target: r.Target, Color: colors[r.Target], Result: r}
			if r.Target != s.Baseline && base > 0 {
				row.Ratio = strconv.FormatFloat(r.Median/base, 'f', 2, 64)
			}
			for _, l := range c.Latency {
				if l.Target != r.Target {
					continue
				}
				for i, p := range l.Percentiles {
					if i > 0 {
						row.Latency += " · "
					}
					row.Latency += p.Name + " " + fmtFigure(p.Median)
				}
			}
			row.Counts = countsText(r)
			hs.HasCounts = hs.HasCounts || row.Counts != ""
			hs.Rows = append(hs.Rows, row)
		}
		groups = append(groups, g)
	}
	svg, err := chart.Bars(chart.Options{Title: s.Title, XLabel: s.Clients, YLabel: s.Unit + " (bar: median, whisker: min–max)",
		Width: chartWidth, Height: chartHeight}, groups)
	if err != nil {
		return hs, fmt.Errorf("bench: %s chart: %w", s.ID, err)
	}
	hs.Throughput = inlineSVG(svg)
	for _, name := range s.PercentileNames() {
		var groups []chart.Group
		for _, c := range s.Cases {
			g := chart.Group{Label: s.CaseLabel(c.Concurrency)}
			for _, l := range c.Latency {
				for _, p := range l.Percentiles {
					if p.Name == name {
						g.Bars = append(g.Bars, chart.Bar{Target: l.Target, Min: p.Min, Median: p.Median, Max: p.Max})
					}
				}
			}
			groups = append(groups, g)
		}
		svg, err := chart.Bars(chart.Options{Title: name + " latency", XLabel: s.Clients, YLabel: "ms, " + name + " (lower is better)",
			Width: chartWidth, Height: chartHeight}, groups)
		if err != nil {
			return hs, fmt.Errorf("bench: %s %s chart: %w", s.ID, name, err)
		}
		hs.Latency = append(hs.Latency, inlineSVG(svg))
	}
	return hs, nil
}

// countsText is a result's median failures, connected clients, keyway's cache hits and MariaDB connections, where
// measured.
func countsText(r Result) string {
	var parts []string
	if r.Connected != nil {
		parts = append(parts, "connected "+fmtFigure(r.Connected.Median))
	}
	if e := r.Errors; e != nil {
		parts = append(parts, "1040 errors "+fmtFigure(e.TooMany.Median), "timeouts "+fmtFigure(e.Timeouts.Median),
			"other errors "+fmtFigure(e.Other.Median))
	}
	if h := r.CacheHits; h != nil {
		parts = append(parts, "cache hits "+strconv.FormatFloat(h.Median, 'f', 3, 64)+" of the statements")
	}
	if b := r.BackendConns; b != nil {
		own := ""
		if r.IdleConns != nil && r.IdleConns.Median > 0 {
			own = " (" + fmtFigure(r.IdleConns.Median) + " before the clients)"
		}
		parts = append(parts, "MariaDB connections "+fmtFigure(b.Median)+own)
	}
	return strings.Join(parts, " · ")
}

// inlineSVG drops what precedes the <svg> element (an XML declaration), which has no place inside HTML.
func inlineSVG(svg []byte) template.HTML {
	if i := bytes.Index(svg, []byte("<svg")); i > 0 {
		svg = svg[i:]
	}
	return template.HTML(svg) // drawn by internal/chart from numbers and names it escapes
}

// WriteFiles writes dir/index.html and dir/report.json, creating dir.
func (r *Report) WriteFiles(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	js, err := r.JSON()
	if err != nil {
		return fmt.Errorf("bench: report.json: %w", err)
	}
	var page bytes.Buffer
	if err := r.WriteHTML(&page); err != nil {
		return err
	}
	return errors.Join(
		os.WriteFile(filepath.Join(dir, "report.json"), js, 0o644),
		os.WriteFile(filepath.Join(dir, "index.html"), page.Bytes(), 0o644))
}
