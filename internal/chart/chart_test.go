package chart

import (
	"bytes"
	"encoding/xml"
	"io"
	"math"
	"os"
	"slices"
	"strings"
	"testing"
)

// svgPath is one <path>: its data and its style.
type svgPath struct{ d, style string }

// parseSVG checks out is one well-formed, self-contained SVG document and returns its text nodes and paths.
func parseSVG(t *testing.T, out []byte) (texts []string, paths []svgPath) {
	t.Helper()
	d := xml.NewDecoder(bytes.NewReader(out))
	root := ""
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("SVG does not parse: %v", err)
		}
		switch v := tok.(type) {
		case xml.StartElement:
			if root == "" {
				root = v.Name.Local
				if v.Name.Space != "http://www.w3.org/2000/svg" {
					t.Errorf("root element's namespace is %q", v.Name.Space)
				}
				if w, h := attr(v, "width"), attr(v, "height"); w == "" || h == "" || attr(v, "viewBox") != "0 0 "+w+" "+h {
					t.Errorf("root has width %q, height %q, viewBox %q: not scalable to its size", w, h, attr(v, "viewBox"))
				}
			}
			switch v.Name.Local {
			case "image", "use", "style", "script", "foreignObject":
				t.Errorf("SVG has a <%s>", v.Name.Local)
			case "path":
				paths = append(paths, svgPath{attr(v, "d"), attr(v, "style")})
			}
			for _, a := range v.Attr {
				if a.Name.Local == "href" || strings.Contains(a.Value, "url(") {
					t.Errorf("SVG refers outside itself: %s=%q", a.Name.Local, a.Value)
				}
			}
		case xml.CharData:
			if s := strings.TrimSpace(string(v)); s != "" {
				texts = append(texts, s)
			}
		}
	}
	if root != "svg" {
		t.Fatalf("root element is %q, want svg", root)
	}
	if os.Getenv("KEYWAY_CHART_DUMP") != "" {
		os.WriteFile(os.Getenv("KEYWAY_CHART_DUMP")+"-"+t.Name()+".svg", out, 0o644)
	}
	return texts, paths
}

func attr(e xml.StartElement, name string) string {
	for _, a := range e.Attr {
		if a.Name.Local == name {
			return a.Value
		}
	}
	return ""
}

// linePaths returns the paths that draw series i's line (not its legend swatch: lines join round).
func linePaths(paths []svgPath, i int) []svgPath {
	var out []svgPath
	for _, p := range paths {
		if strings.Contains(p.style, "stroke:"+ColorHex(i)+";") && strings.Contains(p.style, "stroke-linejoin:round") {
			out = append(out, p)
		}
	}
	return out
}

func hasText(texts []string, want string) bool {
	for _, s := range texts {
		if s == want {
			return true
		}
	}
	return false
}

func TestLinesDrawsEverySeriesWithLegend(t *testing.T) {
	out, err := Lines(Options{Title: "ops/s", XLabel: "seconds", YLabel: "ops/s", YMin0: true}, []Series{
		{Name: "memcache", X: []float64{-3, -2, -1, 0}, Y: []float64{10, 20, math.NaN(), 40}},
		{Name: "sql", X: []float64{-3, -2, -1, 0}, Y: []float64{5, 5, 6, 7}},
	})
	if err != nil {
		t.Fatal(err)
	}
	texts, paths := parseSVG(t, out)
	for _, w := range []string{"ops/s", "seconds", "memcache", "sql"} {
		if !hasText(texts, w) {
			t.Errorf("chart lacks text %q; has %q", w, texts)
		}
	}
	// Y from 0 to 40 in steps of 10, X from -3 to 0 in steps of 1.
	for _, w := range []string{"0", "10", "20", "30", "40", "-3", "-2", "-1"} {
		if !hasText(texts, w) {
			t.Errorf("chart lacks tick %q; has %q", w, texts)
		}
	}
	for i := range 2 {
		if n := len(linePaths(paths, i)); n != 1 {
			t.Errorf("series %d is drawn by %d paths, want 1", i, n)
		}
	}
}

func TestLinesGapAtNaN(t *testing.T) {
	out, err := Lines(Options{Title: "gaps"}, []Series{{Name: "a",
		X: []float64{1, 2, 3, 4, 5, 6, 7, 8}, Y: []float64{1, 2, math.NaN(), 4, 5, math.Inf(1), 7, math.NaN()}}})
	if err != nil {
		t.Fatal(err)
	}
	_, paths := parseSVG(t, out)
	lines := linePaths(paths, 0)
	if len(lines) != 1 {
		t.Fatalf("%d line paths, want 1", len(lines))
	}
	d := lines[0].d
	// Three runs: 1–2, 4–5 and 7 alone, which is drawn as a dot (a zero-length segment with round caps).
	if n := strings.Count(d, "M"); n != 3 {
		t.Errorf("line has %d runs, want 3: %s", n, d)
	}
	if !strings.HasSuffix(d, "h0") || strings.Count(d, "L") != 2 {
		t.Errorf("runs are not 2, 2 and 1 points: %s", d)
	}
	if strings.Contains(d, "NaN") || strings.Contains(d, "Inf") {
		t.Errorf("a gap became a coordinate: %s", d)
	}
}

func TestOneSeriesHasNoLegend(t *testing.T) {
	out, err := Lines(Options{Title: "hits"}, []Series{{Name: "hit ratio", X: []float64{0, 1}, Y: []float64{0.5, 0.75}}})
	if err != nil {
		t.Fatal(err)
	}
	if texts, _ := parseSVG(t, out); hasText(texts, "hit ratio") {
		t.Error("a single series has a legend; the title names it")
	}
}

func TestTextIsEscaped(t *testing.T) {
	title := `<a href="x">&'` + "\x01"
	out, err := Lines(Options{Title: title, YLabel: "y & z"}, []Series{{Name: "<b>", X: []float64{0}, Y: []float64{1}}, {Name: "c", X: []float64{0}, Y: []float64{2}}})
	if err != nil {
		t.Fatal(err)
	}
	texts, _ := parseSVG(t, out)
	for _, w := range []string{`<a href="x">&'`, "y & z", "<b>"} {
		if !hasText(texts, w) {
			t.Errorf("chart lacks text %q; has %q", w, texts)
		}
	}
}

func TestLinesRefusesMismatchedSeries(t *testing.T) {
	if _, err := Lines(Options{Title: "x"}, []Series{{Name: "a", X: []float64{1, 2}, Y: []float64{1}}}); err == nil {
		t.Fatal("a series with 2 x and 1 y values was drawn")
	}
}

func TestEmptyChartsRender(t *testing.T) {
	for name, draw := range map[string]func() ([]byte, error){
		"lines": func() ([]byte, error) { return Lines(Options{Title: "nothing yet", YMin0: true}, nil) },
		"all gaps": func() ([]byte, error) {
			return Lines(Options{Title: "nothing yet"}, []Series{{Name: "a", X: []float64{1}, Y: []float64{math.NaN()}}})
		},
		"bars":       func() ([]byte, error) { return Bars(Options{Title: "nothing yet"}, nil) },
		"empty bars": func() ([]byte, error) { return Bars(Options{Title: "nothing yet"}, []Group{{Label: "1 thread"}}) },
	} {
		out, err := draw()
		if err != nil {
			t.Fatalf("%s: empty chart: %v", name, err)
		}
		texts, paths := parseSVG(t, out)
		if !hasText(texts, "nothing yet") {
			t.Errorf("%s: empty chart lacks its title", name)
		}
		if len(paths) == 0 {
			t.Errorf("%s: empty chart has no frame", name)
		}
	}
}

func TestBarsGroupTargetsWithWhiskers(t *testing.T) {
	groups := []Group{
		{Label: "1 thread", Bars: []Bar{{Target: "direct", Min: 90, Median: 100, Max: 110}, {Target: "keyway", Min: 140, Median: 150, Max: 170}}},
		{Label: "8 threads", Bars: []Bar{{Target: "keyway", Min: 300, Median: 310, Max: 330}}}, // direct missing here
	}
	out, err := Bars(Options{Title: "oltp_point_select", YLabel: "qps"}, groups)
	if err != nil {
		t.Fatal(err)
	}
	texts, paths := parseSVG(t, out)
	for _, w := range []string{"oltp_point_select", "qps", "1 thread", "8 threads", "direct", "keyway", "0", "100", "200", "300"} {
		if !hasText(texts, w) {
			t.Errorf("chart lacks text %q; has %q", w, texts)
		}
	}
	// Each target's boxes are filled in its colour: the legend swatch plus one per group it is in (a target missing
	// from a group leaves a gap).
	for target, want := range map[int]int{0: 1 + 1, 1: 1 + 2} {
		boxes := 0
		for _, p := range paths {
			if p.style == "fill:"+ColorHex(target) {
				boxes += strings.Count(p.d, "Z")
			}
		}
		if boxes != want {
			t.Errorf("target %d: %d boxes filled %s, want %d (bars and legend swatch)", target, boxes, ColorHex(target), want)
		}
	}
	// One whisker per bar that exists (three), each a line and two caps, drawn in black.
	whiskers := 0
	for _, p := range paths {
		if strings.Contains(p.style, "stroke:#000") {
			whiskers += strings.Count(p.d, "M")
		}
	}
	if whiskers != 3*3 {
		t.Errorf("%d whisker strokes, want 9", whiskers)
	}
}

func TestYAxisIsNice(t *testing.T) {
	for _, c := range []struct {
		lo, hi float64
		want   []float64
	}{
		{0, 27000, []float64{0, 10000, 20000, 30000}},
		{0.89, 0.97, []float64{0.85, 0.9, 0.95, 1}},
		{0, 0.3, []float64{0, 0.1, 0.2, 0.3}},
		{-7, 12, []float64{-10, 0, 10, 20}},
		{5, 5, []float64{4.5, 5, 5.5}},
		{0, 0, []float64{0, 0.5, 1}},
	} {
		lo, hi, ticks := yAxis(c.lo, c.hi, 3)
		if !slices.Equal(ticks, c.want) || lo != ticks[0] || hi != ticks[len(ticks)-1] {
			t.Errorf("yAxis(%v, %v) = %v, %v, %v; want ticks %v", c.lo, c.hi, lo, hi, ticks, c.want)
		}
	}
	if got := xTicks(-119, 0, 4); !slices.Equal(got, []float64{-100, -50, 0}) {
		t.Errorf("xTicks(-119, 0) = %v", got)
	}
}

// Data beyond what floats count in steps still draws, with the axis at the data's ends, not a hang or a panic.
func TestExtremeDataDraws(t *testing.T) {
	for _, y := range [][]float64{{1e17, 1e17 + 32}, {-math.MaxFloat64, math.MaxFloat64}, {1e-300, 2e-300}} {
		out, err := Lines(Options{Title: "extreme"}, []Series{{Name: "a", X: []float64{0, 1}, Y: y}})
		if err != nil {
			t.Fatal(err)
		}
		parseSVG(t, out)
		if bytes.Contains(out, []byte("NaN")) {
			t.Errorf("%v: a coordinate is NaN", y)
		}
	}
}

func TestColorsAreStableByPosition(t *testing.T) {
	if ColorHex(0) != "#1f77b4" || ColorHex(len(palette)) != ColorHex(0) {
		t.Errorf("palette order changed: %s, %s", ColorHex(0), ColorHex(len(palette)))
	}
}

func TestAxisLabelsAreCompact(t *testing.T) {
	for v, want := range map[float64]string{25000: "25k", 1500000: "1.5M", 0.5: "0.5", 100: "100", 0: "0", 12.25: "12.25"} {
		if got := compact(v); got != want {
			t.Errorf("compact(%v) = %q, want %q", v, got, want)
		}
	}
}
