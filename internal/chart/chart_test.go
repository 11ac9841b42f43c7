package chart

import (
	"encoding/xml"
	"math"
	"os"
	"strings"
	"testing"
)

// parseSVG checks out is one well-formed SVG document and returns its text nodes and element counts.
func parseSVG(t *testing.T, out []byte) (texts []string, elems map[string]int) {
	t.Helper()
	elems = map[string]int{}
	d := xml.NewDecoder(strings.NewReader(string(out)))
	root := ""
	for {
		tok, err := d.Token()
		if err != nil {
			if err.Error() == "EOF" {
				break
			}
			t.Fatalf("SVG does not parse: %v", err)
		}
		switch v := tok.(type) {
		case xml.StartElement:
			if root == "" {
				root = v.Name.Local
			}
			elems[v.Name.Local]++
			for _, a := range v.Attr {
				if a.Name.Local == "href" && !strings.HasPrefix(a.Value, "#") {
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
	return texts, elems
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
	texts, elems := parseSVG(t, out)
	for _, w := range []string{"ops/s", "seconds", "memcache", "sql"} {
		if !hasText(texts, w) {
			t.Errorf("chart lacks text %q; has %q", w, texts)
		}
	}
	if elems["path"] < 4 {
		t.Errorf("chart has %d paths, want lines, axes and grid", elems["path"])
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
		"bars":  func() ([]byte, error) { return Bars(Options{Title: "nothing yet"}, nil) },
	} {
		out, err := draw()
		if err != nil {
			t.Fatalf("%s: empty chart: %v", name, err)
		}
		if texts, _ := parseSVG(t, out); !hasText(texts, "nothing yet") {
			t.Errorf("%s: empty chart lacks its title", name)
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
	texts, elems := parseSVG(t, out)
	for _, w := range []string{"oltp_point_select", "qps", "1 thread", "8 threads", "direct", "keyway"} {
		if !hasText(texts, w) {
			t.Errorf("chart lacks text %q; has %q", w, texts)
		}
	}
	// Each target's bars are filled in its colour: the legend swatch plus one per group (a target missing from a
	// group has a bar of height zero there: a gap).
	for target, want := range map[int]int{0: 1 + 2, 1: 1 + 2} {
		fill := "fill:" + strings.ToUpper(ColorHex(target))
		if n := strings.Count(string(out), fill+`"`) + strings.Count(string(out), fill+";"); n != want {
			t.Errorf("target %d: %d shapes filled %s, want %d (bars and legend swatch)", target, n, fill, want)
		}
	}
	// One whisker per bar that exists (three), each a line and two caps, drawn thinner than the axes.
	if n := strings.Count(string(out), "stroke-width:0.8"); n != 3*3 {
		t.Errorf("%d whisker strokes, want 9", n)
	}
	_ = elems
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
