// Package chart draws the few chart kinds keyway shows people, as self-contained SVG: line charts (the admin
// dashboard's time series) and grouped bar charts with min–max whiskers (the benchmark report's ops/s and latency
// per target, grouped by concurrency). Both the live dashboard and the static report use it, so a figure looks the
// same in both places.
//
// It is a thin layer over gonum.org/v1/plot, which does the scaling, ticks, legends and SVG output; this package only
// fixes keyway's look (sizes, colours, fonts) and the two shapes of data it draws.
//
// Invariants:
//   - Output is one standalone <svg> document with no external references (no fonts or images fetched), so it can be
//     inlined in HTML served with no internet.
//   - A chart with no data still renders (an empty frame with its title), never an error, so a page can always show
//     its layout before the first sample.
//   - Colours are assigned by position in the input, the same for Lines and Bars, so a target keeps its colour
//     across every chart that lists targets in the same order.
package chart

import (
	"bytes"
	"fmt"
	"image/color"
	"math"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// Options are what every chart has: its labels and its size in pixels.
type Options struct {
	Title  string
	XLabel string
	YLabel string
	Width  int // pixels; 0 means 480
	Height int // pixels; 0 means 240
	// YMin0 pins the Y axis to start at zero (rates, counts), instead of at the data's minimum.
	YMin0 bool
}

// Series is one line: points (X[i], Y[i]) in order. X and Y have the same length; NaN Y values leave a gap.
type Series struct {
	Name string
	X, Y []float64
}

// Bar is one target's figure in a group: the median is the bar, Min and Max the whisker.
type Bar struct {
	Target           string
	Min, Median, Max float64
}

// Group is one cluster of bars along the X axis, e.g. "8 threads": one Bar per target.
type Group struct {
	Label string
	Bars  []Bar
}

// palette is keyway's colour order: distinct, readable on white, and stable by position.
var palette = []color.RGBA{
	{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}, // blue
	{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff}, // orange
	{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff}, // green
	{R: 0xd6, G: 0x27, B: 0x28, A: 0xff}, // red
	{R: 0x94, G: 0x67, B: 0xbd, A: 0xff}, // purple
	{R: 0x8c, G: 0x56, B: 0x4b, A: 0xff}, // brown
	{R: 0xe3, G: 0x77, B: 0xc2, A: 0xff}, // pink
	{R: 0x7f, G: 0x7f, B: 0x7f, A: 0xff}, // grey
}

// Color returns the colour of the i-th series or target, so a page can draw a matching legend or table swatch.
func Color(i int) color.RGBA { return palette[i%len(palette)] }

// ColorHex is Color as a CSS "#rrggbb" string.
func ColorHex(i int) string {
	c := Color(i)
	return fmt.Sprintf("#%02x%02x%02x", c.R, c.G, c.B)
}

// pixel is one CSS pixel in vg's units (points), so sizes given in pixels come out that size in a browser.
const pixel = vg.Inch / 96

// newPlot returns a plot with keyway's look and the labels of o.
func newPlot(o Options) *plot.Plot {
	p := plot.New()
	p.Title.Text = o.Title
	p.Title.TextStyle.Font.Size = vg.Points(11)
	p.X.Label.Text = o.XLabel
	p.Y.Label.Text = o.YLabel
	for _, a := range []*plot.Axis{&p.X, &p.Y} {
		a.Label.TextStyle.Font.Size = vg.Points(9)
		a.Tick.Label.Font.Size = vg.Points(8)
	}
	p.Legend.TextStyle.Font.Size = vg.Points(8)
	p.Legend.Top = true
	p.Y.Tick.Marker = readableTicks{}
	p.Add(plotter.NewGrid())
	if o.YMin0 {
		p.Y.Min = 0
	}
	return p
}

// readableTicks are gonum's default ticks labelled without trailing zeros and, from ten thousand up, in thousands
// or millions ("25k", "1.5M"), so an axis reads "25k" rather than "25000.00".
type readableTicks struct{}

func (readableTicks) Ticks(min, max float64) []plot.Tick {
	ticks := plot.DefaultTicks{}.Ticks(min, max)
	for i := range ticks {
		if ticks[i].Label != "" {
			ticks[i].Label = compact(ticks[i].Value)
		}
	}
	return ticks
}

// compact formats v for an axis label.
func compact(v float64) string {
	a := math.Abs(v)
	switch {
	case a >= 1e6:
		return strconv.FormatFloat(v/1e6, 'f', -1, 64) + "M"
	case a >= 1e4:
		return strconv.FormatFloat(v/1e3, 'f', -1, 64) + "k"
	}
	return strconv.FormatFloat(math.Round(v*1e6)/1e6, 'f', -1, 64)
}

// headroom raises the Y axis' top to a quarter above top, so the legend (drawn in the top right corner) sits over
// empty space, not over the tallest bar or line.
func headroom(p *plot.Plot, top float64) {
	if top > 0 && p.Y.Max < top*1.25 {
		p.Y.Max = top * 1.25
	}
}

// render writes p as SVG at o's size.
func render(p *plot.Plot, o Options) ([]byte, error) {
	w, h := o.Width, o.Height
	if w <= 0 {
		w = 480
	}
	if h <= 0 {
		h = 240
	}
	wt, err := p.WriterTo(vg.Length(w)*pixel, vg.Length(h)*pixel, "svg")
	if err != nil {
		return nil, fmt.Errorf("chart %q: %w", o.Title, err)
	}
	var buf bytes.Buffer
	if _, err := wt.WriteTo(&buf); err != nil {
		return nil, fmt.Errorf("chart %q: %w", o.Title, err)
	}
	return buf.Bytes(), nil
}

// Lines draws each series as a line, in palette order, with a legend when there is more than one.
func Lines(o Options, series []Series) ([]byte, error) {
	p := newPlot(o)
	for i, s := range series {
		if len(s.X) != len(s.Y) {
			return nil, fmt.Errorf("chart %q: series %q has %d x and %d y values", o.Title, s.Name, len(s.X), len(s.Y))
		}
		for _, part := range splitAtGaps(s.X, s.Y) {
			l, err := plotter.NewLine(part)
			if err != nil {
				return nil, fmt.Errorf("chart %q: series %q: %w", o.Title, s.Name, err)
			}
			l.LineStyle.Color = Color(i)
			l.LineStyle.Width = vg.Points(1.5)
			p.Add(l)
			if part.first && len(series) > 1 {
				p.Legend.Add(s.Name, l)
			}
		}
	}
	if len(series) > 1 {
		headroom(p, p.Y.Max)
	}
	if o.YMin0 && p.Y.Max <= 0 {
		p.Y.Max = 1 // an all-zero series still gets a readable axis
	}
	return render(p, o)
}

// linePart is one gap-free run of a series; first marks the run that carries the series' legend entry.
type linePart struct {
	plotter.XYs
	first bool
}

// splitAtGaps cuts a series at NaN or infinite Y values, which plotter refuses, into runs drawn separately.
func splitAtGaps(x, y []float64) []linePart {
	var parts []linePart
	var cur plotter.XYs
	flush := func() {
		if len(cur) > 0 {
			parts = append(parts, linePart{XYs: cur, first: len(parts) == 0})
			cur = nil
		}
	}
	for i := range x {
		if math.IsNaN(y[i]) || math.IsInf(y[i], 0) || math.IsNaN(x[i]) || math.IsInf(x[i], 0) {
			flush()
			continue
		}
		cur = append(cur, plotter.XY{X: x[i], Y: y[i]})
	}
	flush()
	return parts
}

// Bars draws groups of bars side by side: within a group, one bar per target at its median, with a whisker from
// its min to its max. Targets are matched across groups by name and coloured by first appearance; a target missing
// from a group leaves a gap there.
func Bars(o Options, groups []Group) ([]byte, error) {
	p := newPlot(o)
	p.Y.Min = 0 // bars start at zero; a bar from the data's minimum would lie about ratios
	var targets []string
	index := map[string]int{}
	for _, g := range groups {
		for _, b := range g.Bars {
			if _, ok := index[b.Target]; !ok {
				index[b.Target] = len(targets)
				targets = append(targets, b.Target)
			}
		}
	}
	labels := make([]string, len(groups))
	for i, g := range groups {
		labels[i] = g.Label
	}
	if len(groups) > 0 {
		p.NominalX(labels...)
	}
	plotW := vg.Length(o.Width)
	if plotW <= 0 {
		plotW = 480
	}
	// Bars share each group's slot, leaving a fifth of it as space between groups.
	width := plotW * pixel * 0.8 / vg.Length(max(1, len(groups))) / vg.Length(max(1, len(targets))) * 0.8
	for t, name := range targets {
		values := make(plotter.Values, len(groups))
		whiskers := make(whiskerXYs, len(groups))
		for g, grp := range groups {
			whiskers[g].x = float64(g)
			whiskers[g].lo, whiskers[g].hi = math.NaN(), math.NaN()
			for _, b := range grp.Bars {
				if b.Target == name {
					values[g] = b.Median
					whiskers[g].y, whiskers[g].lo, whiskers[g].hi = b.Median, b.Median-b.Min, b.Max-b.Median
				}
			}
		}
		bc, err := plotter.NewBarChart(values, width)
		if err != nil {
			return nil, fmt.Errorf("chart %q: target %q: %w", o.Title, name, err)
		}
		bc.Color = Color(t)
		bc.LineStyle.Width = 0
		offset := (vg.Length(t) - vg.Length(len(targets)-1)/2) * width
		bc.Offset = offset
		p.Add(bc)
		p.Legend.Add(name, bc)
		if eb := whiskers.present(); len(eb) > 0 {
			errs, err := plotter.NewYErrorBars(eb)
			if err != nil {
				return nil, fmt.Errorf("chart %q: target %q whiskers: %w", o.Title, name, err)
			}
			errs.LineStyle.Color = color.Black
			errs.LineStyle.Width = vg.Points(0.8)
			errs.CapWidth = width / 3
			p.Add(offsetPlotter{errs, offset})
		}
	}
	if len(groups) > 0 {
		// Half a slot of room on either side, so the outer bars do not touch the frame.
		p.X.Min, p.X.Max = -0.5, float64(len(groups))-0.5
	}
	headroom(p, p.Y.Max)
	return render(p, o)
}

// whisker is one bar's min–max span: y is the median, lo and hi the distances down to min and up to max.
type whisker struct{ x, y, lo, hi float64 }

type whiskerXYs []whisker

// present returns the whiskers of bars that exist, as the XYer and YErrorer plotter.NewYErrorBars wants.
func (w whiskerXYs) present() whiskerXYs {
	var out whiskerXYs
	for _, v := range w {
		if !math.IsNaN(v.lo) && !math.IsNaN(v.hi) {
			out = append(out, v)
		}
	}
	return out
}

func (w whiskerXYs) Len() int                        { return len(w) }
func (w whiskerXYs) XY(i int) (float64, float64)     { return w[i].x, w[i].y }
func (w whiskerXYs) YError(i int) (float64, float64) { return w[i].lo, w[i].hi }

// offsetPlotter draws a plotter shifted sideways by a fixed length, to put a whisker on its bar (BarChart has an
// Offset; YErrorBars has none).
type offsetPlotter struct {
	*plotter.YErrorBars
	offset vg.Length
}

func (o offsetPlotter) Plot(c draw.Canvas, p *plot.Plot) {
	c.Push()
	defer c.Pop()
	c.Translate(vg.Point{X: o.offset})
	o.YErrorBars.Plot(c, p)
}
