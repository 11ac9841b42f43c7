// Package chart draws the few chart kinds keyway shows people, as self-contained SVG: line charts (the admin
// dashboard's time series) and grouped bar charts with min–max whiskers (the benchmark report's ops/s and latency
// per target, grouped by concurrency). Both the live dashboard and the static report use it, so a figure looks the
// same in both places.
//
// It writes the SVG itself, not through a plotting library, although the project prefers a well-kept library to its
// own code. It used gonum.org/v1/plot until issue 43 (keyway's RSS against memcached's) measured what that library
// cost every keyway process, including the many that never draw a chart: 7.7 MB of the binary (58.9 MB with it,
// 51.2 MB without), 4.7 MiB of it Liberation and Go fonts in .data, plus LaTeX, PDF, raster and SVG backends;
// 3.1–3.6 MiB of an idle server's RSS (2.8–3.3 MiB of it the binary's file pages); and 17 package inits costing
// 0.7 ms and 227 kB of allocations at every start. For two chart shapes drawn with generic fonts (the browser picks
// its own sans-serif; layout estimates a text's width from an average character width), a few hundred lines of
// SVG writing do the same job.
//
// Invariants:
//   - Output is one standalone <svg> document with no external references (no fonts or images fetched), so it can be
//     inlined in HTML served with no internet.
//   - A chart with no data still renders (an empty frame with its title), never an error, so a page can always show
//     its layout before the first sample.
//   - Colours are assigned by position in the input, the same for Lines and Bars, so a target keeps its colour
//     across every chart that lists targets in the same order.
//   - Ticks are at multiples of 1, 2 or 5 × 10^k, labelled compactly ("25k", "1.5M"); the Y axis ends on ticks.
package chart

import (
	"bytes"
	"fmt"
	"image/color"
	"math"
	"strconv"
	"unicode/utf8"
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

// Font sizes and spacing, in pixels.
const (
	titleSize   = 14
	labelSize   = 12 // axis labels
	tickSize    = 11 // tick labels and legend
	tickLength  = 4
	gap         = 4
	legendRow   = 14 // one legend row's height
	legendSpace = 12 // between legend entries in a row
	swatchW     = 16
	// charWidth is the average width of a sans-serif character, in ems: the layout's estimate of how wide a text is,
	// a little generous so a wide font does not overrun.
	charWidth = 0.6
)

// Colours of the chart's furniture.
const (
	textColor = "#222"
	axisColor = "#555"
	gridColor = "#ddd"
)

// textWidth estimates how wide s is at size pixels.
func textWidth(s string, size float64) float64 {
	return float64(utf8.RuneCountInString(s)) * size * charWidth
}

// fitSize is the font size, at most size and at least 8, in half pixels, at which s fits in width pixels.
func fitSize(s string, size, width float64) float64 {
	if w := textWidth(s, size); w > width && w > 0 {
		size = max(8, math.Floor(size*width/w*2)/2)
	}
	return size
}

// legendEntry is one entry of a legend: a name and how its swatch looks.
type legendEntry struct {
	name  string
	color string
	bar   bool // a filled box; otherwise a short line
}

func (e legendEntry) width() float64 { return swatchW + gap + textWidth(e.name, tickSize) }

// legendRows packs entries, in order, into rows at most width wide; an entry wider than width has a row of its own.
func legendRows(entries []legendEntry, width float64) [][]legendEntry {
	var rows [][]legendEntry
	used := 0.0
	for _, e := range entries {
		if n := len(rows); n > 0 && used+legendSpace+e.width() <= width {
			rows[n-1] = append(rows[n-1], e)
			used += legendSpace + e.width()
			continue
		}
		rows = append(rows, []legendEntry{e})
		used = e.width()
	}
	return rows
}

// frame is a chart's layout: the canvas, the plot area inside it and the Y axis' scale, shared by Lines and Bars.
type frame struct {
	o                        Options
	w, h                     float64 // canvas
	left, right, top, bottom float64 // plot area edges
	ylo, yhi                 float64
	yticks                   []float64
	legend                   [][]legendEntry // rows, drawn right-aligned between the title and the plot
	legendTop                float64
	buf                      bytes.Buffer
}

// newFrame lays out a chart of o's size whose Y data spans [lo, hi], with legend over the plot. Room for X tick
// labels is always kept, so an empty chart has the layout of the chart it becomes.
func newFrame(o Options, lo, hi float64, legend []legendEntry) *frame {
	f := &frame{o: o, w: float64(o.Width), h: float64(o.Height)}
	if f.w <= 0 {
		f.w = 480
	}
	if f.h <= 0 {
		f.h = 240
	}
	f.right = f.w - 3*gap
	f.top = gap
	if o.Title != "" {
		f.top += titleSize + gap
	}
	// The legend has rows of its own above the plot rather than a corner of it, so it never hides data and the
	// axis needs no headroom for it.
	f.legendTop = f.top
	f.legend = legendRows(legend, f.right-gap)
	f.top += float64(len(f.legend)*legendRow) + gap
	f.bottom = f.h - gap - tickLength - gap - tickSize
	if o.XLabel != "" {
		f.bottom -= labelSize + gap
	}
	f.ylo, f.yhi, f.yticks = yAxis(lo, hi, max(3, int(max(f.bottom-f.top, 20)/35)))

	widest := 0.0
	for _, v := range f.yticks {
		widest = max(widest, textWidth(compact(v), tickSize))
	}
	f.left = gap + widest + gap + tickLength
	if o.YLabel != "" {
		f.left += labelSize + gap
	}
	return f
}

// y maps a data value to its pixel row.
func (f *frame) y(v float64) float64 { return f.bottom - scale(v, f.ylo, f.yhi)*(f.bottom-f.top) }

// scale maps v in [lo, hi] to [0, 1]. It works in halves, which lose nothing a pixel shows, so that a span wider than
// the largest float is not infinite.
func scale(v, lo, hi float64) float64 { return (v/2 - lo/2) / (hi/2 - lo/2) }

// begin writes the document's head, the title, the axis labels, the Y grid and ticks.
func (f *frame) begin() {
	fmt.Fprintf(&f.buf, `<svg xmlns="http://www.w3.org/2000/svg" width="%s" height="%s" viewBox="0 0 %s %s" font-family="sans-serif">`+"\n",
		num(f.w), num(f.h), num(f.w), num(f.h))
	fmt.Fprintf(&f.buf, `<rect width="%s" height="%s" fill="#fff"/>`+"\n", num(f.w), num(f.h))
	if f.o.Title != "" {
		size := fitSize(f.o.Title, titleSize, f.w-2*gap)
		f.text(f.w/2, gap+titleSize*0.8, size, "middle", textColor, f.o.Title)
	}
	if f.o.XLabel != "" {
		size := fitSize(f.o.XLabel, labelSize, f.right-f.left)
		f.text((f.left+f.right)/2, f.h-gap-labelSize*0.2, size, "middle", textColor, f.o.XLabel)
	}
	if f.o.YLabel != "" {
		// Along the plot's height, or if it is too long for that, along the canvas' height.
		x, y := gap+labelSize*0.8, (f.top+f.bottom)/2
		size := float64(labelSize)
		if textWidth(f.o.YLabel, labelSize) > f.bottom-f.top {
			y, size = f.h/2, fitSize(f.o.YLabel, labelSize, f.h-2*gap)
		}
		fmt.Fprintf(&f.buf, `<text transform="translate(%s,%s) rotate(-90)" font-size="%s" text-anchor="middle" fill="%s">%s</text>`+"\n",
			num(x), num(y), num(size), textColor, esc(f.o.YLabel))
	}
	var grid, ticks bytes.Buffer
	for _, v := range f.yticks {
		y := f.y(v)
		fmt.Fprintf(&grid, "M%s %sH%s", num(f.left), num(y), num(f.right))
		fmt.Fprintf(&ticks, "M%s %sh%d", num(f.left-tickLength), num(y), tickLength)
		f.text(f.left-tickLength-gap/2, y+tickSize*0.35, tickSize, "end", textColor, compact(v))
	}
	f.gridAndTicks(grid.String(), ticks.String())
}

// gridAndTicks draws grid lines (under the data) and tick marks, each given as path data.
func (f *frame) gridAndTicks(grid, ticks string) {
	if grid != "" {
		f.path(grid, "fill:none;stroke:"+gridColor+";stroke-width:1", true)
	}
	if ticks != "" {
		f.path(ticks, "fill:none;stroke:"+axisColor+";stroke-width:1", true)
	}
}

// end draws the axes over the data, the legend, and closes the document.
func (f *frame) end() []byte {
	f.path(fmt.Sprintf("M%s %sV%sH%s", num(f.left), num(f.top), num(f.bottom), num(f.right)),
		"fill:none;stroke:"+axisColor+";stroke-width:1", true)
	for i, row := range f.legend {
		mid := f.legendTop + float64(i*legendRow) + legendRow/2
		x := f.right
		for j := len(row) - 1; j >= 0; j-- {
			e := row[j]
			x -= e.width()
			if e.bar {
				f.path(fmt.Sprintf("M%s %sh%dv%dh%dZ", num(x), num(mid-5), swatchW, 10, -swatchW), "fill:"+e.color, false)
			} else {
				f.path(fmt.Sprintf("M%s %sh%d", num(x), num(mid), swatchW), "fill:none;stroke:"+e.color+";stroke-width:2", false)
			}
			f.text(x+swatchW+gap, mid+tickSize*0.35, tickSize, "start", textColor, e.name)
			x -= legendSpace
		}
	}
	f.buf.WriteString("</svg>\n")
	return f.buf.Bytes()
}

func (f *frame) text(x, y, size float64, anchor, fill, s string) {
	fmt.Fprintf(&f.buf, `<text x="%s" y="%s" font-size="%s" text-anchor="%s" fill="%s">%s</text>`+"\n",
		num(x), num(y), num(size), anchor, fill, esc(s))
}

// path writes a path with an inline style (inline, not a class: the SVG is inlined in pages that hold several).
// crisp asks for pixel-aligned rendering, for axes and grid lines.
func (f *frame) path(d, style string, crisp bool) {
	if crisp {
		fmt.Fprintf(&f.buf, `<path d="%s" style="%s" shape-rendering="crispEdges"/>`+"\n", d, style)
		return
	}
	fmt.Fprintf(&f.buf, `<path d="%s" style="%s"/>`+"\n", d, style)
}

// noData writes a grey note in the middle of an empty plot.
func (f *frame) noData() {
	f.text((f.left+f.right)/2, (f.top+f.bottom)/2+tickSize*0.35, tickSize, "middle", "#999", "no data")
}

// num formats a coordinate: a tenth of a pixel is as fine as a screen shows.
func num(v float64) string { return strconv.FormatFloat(math.Round(v*10)/10, 'f', -1, 64) }

// esc escapes s as XML character data or an attribute value, dropping characters XML cannot hold.
func esc(s string) string {
	var b bytes.Buffer
	for _, r := range s {
		switch {
		case r == '&':
			b.WriteString("&amp;")
		case r == '<':
			b.WriteString("&lt;")
		case r == '>':
			b.WriteString("&gt;")
		case r == '"':
			b.WriteString("&quot;")
		case r == '\'':
			b.WriteString("&#39;")
		case r < 0x20 && r != '\t' && r != '\n' && r != '\r', r == 0xfffe, r == 0xffff, r == utf8.RuneError:
			// not allowed in XML (a RuneError here is an invalid byte in s)
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// step is a tick spacing m × 10^k with m one of 1, 2 and 5.
type step struct {
	m float64
	k int
}

// niceStep returns the smallest step that cuts span into at most n parts.
func niceStep(span float64, n int) step {
	raw := span / float64(max(n, 1))
	k := int(math.Floor(math.Log10(raw)))
	f := raw / math.Pow10(k)
	switch {
	case f <= 1:
		return step{1, k}
	case f <= 2:
		return step{2, k}
	case f <= 5:
		return step{5, k}
	}
	return step{1, k + 1}
}

// at returns the i-th multiple of s, computed so that decimal steps come out as the nearest float to the decimal
// (0.1 × 3 is 0.3, not 0.30000000000000004).
func (s step) at(i float64) float64 {
	if s.k >= 0 {
		return i * s.m * math.Pow10(s.k)
	}
	return i * s.m / math.Pow10(-s.k)
}

func (s step) size() float64 { return s.at(1) }

// multiples returns s's multiples from the first-th to the last-th, or nil if that is not 2 to 50 ticks (data so
// large or so close together that floats cannot count the steps between them).
func (s step) multiples(first, last float64) []float64 {
	n := last - first
	if !(n >= 1 && n <= 50) || math.Abs(first) > 1<<52 {
		return nil
	}
	ticks := make([]float64, 0, int(n)+1)
	for j := 0.0; j <= n; j++ {
		ticks = append(ticks, s.at(first+j))
	}
	return ticks
}

// yAxis returns a Y axis covering [lo, hi] that starts and ends on a tick, and its ticks, about n of them.
func yAxis(lo, hi float64, n int) (float64, float64, []float64) {
	if !(hi > lo) {
		d := math.Abs(hi) / 10
		if d == 0 {
			d = 1
		}
		lo, hi = lo-d, hi+d
		if lo < 0 && hi-d >= 0 { // do not take a non-negative axis below zero
			lo = 0
		}
	}
	s := niceStep(hi-lo, n)
	ticks := s.multiples(math.Floor(lo/s.size()+1e-9), math.Ceil(hi/s.size()-1e-9))
	if ticks == nil {
		return lo, hi, []float64{lo, hi}
	}
	return ticks[0], ticks[len(ticks)-1], ticks
}

// xTicks returns the ticks inside [lo, hi], about n of them.
func xTicks(lo, hi float64, n int) []float64 {
	s := niceStep(hi-lo, n)
	return s.multiples(math.Ceil(lo/s.size()-1e-9), math.Floor(hi/s.size()+1e-9))
}

// compact formats v for an axis label: without trailing zeros and, from ten thousand up, in thousands or millions
// ("25k", "1.5M"), so an axis reads "25k" rather than "25000.00".
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

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

// Lines draws each series as a line, in palette order, with a legend when there is more than one.
func Lines(o Options, series []Series) ([]byte, error) {
	xlo, xhi := math.Inf(1), math.Inf(-1)
	ylo, yhi := math.Inf(1), math.Inf(-1)
	for _, s := range series {
		if len(s.X) != len(s.Y) {
			return nil, fmt.Errorf("chart %q: series %q has %d x and %d y values", o.Title, s.Name, len(s.X), len(s.Y))
		}
		for i := range s.X {
			if finite(s.X[i]) && finite(s.Y[i]) {
				xlo, xhi = min(xlo, s.X[i]), max(xhi, s.X[i])
				ylo, yhi = min(ylo, s.Y[i]), max(yhi, s.Y[i])
			}
		}
	}
	empty := xlo > xhi
	if empty {
		xlo, xhi, ylo, yhi = 0, 1, 0, 1
	}
	if xlo == xhi {
		xlo, xhi = xlo-1, xhi+1
	}
	if o.YMin0 {
		ylo = min(ylo, 0)
		if yhi <= 0 {
			yhi = 1 // an all-zero series still gets a readable axis
		}
	}
	var legend []legendEntry
	if len(series) > 1 {
		for i, s := range series {
			legend = append(legend, legendEntry{name: s.Name, color: ColorHex(i)})
		}
	}
	f := newFrame(o, ylo, yhi, legend)
	x := func(v float64) float64 { return f.left + scale(v, xlo, xhi)*(f.right-f.left) }

	if empty {
		f.yticks = nil // an axis with nothing on it would make up a scale
	}
	f.begin()
	if empty {
		f.noData()
		return f.end(), nil
	}
	var grid, ticks bytes.Buffer
	for _, v := range xTicks(xlo, xhi, max(2, int((f.right-f.left)/70))) {
		px := x(v)
		fmt.Fprintf(&grid, "M%s %sV%s", num(px), num(f.top), num(f.bottom))
		fmt.Fprintf(&ticks, "M%s %sv%d", num(px), num(f.bottom), tickLength)
		f.text(px, f.bottom+tickLength+gap/2+tickSize*0.8, tickSize, "middle", textColor, compact(v))
	}
	f.gridAndTicks(grid.String(), ticks.String())
	for i, s := range series {
		var d bytes.Buffer
		run := 0 // points in the current gap-free run
		for j := range s.X {
			if !finite(s.X[j]) || !finite(s.Y[j]) {
				if run == 1 {
					d.WriteString("h0") // a lone point between gaps: a dot (the line's round cap)
				}
				run = 0
				continue
			}
			cmd := "L"
			if run == 0 {
				cmd = "M"
			}
			fmt.Fprintf(&d, "%s%s %s", cmd, num(x(s.X[j])), num(f.y(s.Y[j])))
			run++
		}
		if run == 1 {
			d.WriteString("h0")
		}
		if d.Len() > 0 {
			f.path(d.String(), "fill:none;stroke:"+ColorHex(i)+";stroke-width:2;stroke-linejoin:round;stroke-linecap:round", false)
		}
	}
	return f.end(), nil
}

// Bars draws groups of bars side by side: within a group, one bar per target at its median, with a whisker from
// its min to its max. Targets are matched across groups by name and coloured by first appearance; a target missing
// from a group leaves a gap there.
func Bars(o Options, groups []Group) ([]byte, error) {
	var targets []string
	index := map[string]int{}
	lo, top := 0.0, math.Inf(-1) // bars start at zero; a bar from the data's minimum would lie about ratios
	for _, g := range groups {
		for _, b := range g.Bars {
			if _, ok := index[b.Target]; !ok {
				index[b.Target] = len(targets)
				targets = append(targets, b.Target)
			}
			for _, v := range []float64{b.Min, b.Median, b.Max} {
				if finite(v) {
					lo, top = min(lo, v), max(top, v)
				}
			}
		}
	}
	if !(top > lo) {
		top = lo + 1
	}
	legend := make([]legendEntry, len(targets))
	for i, t := range targets {
		legend[i] = legendEntry{name: t, color: ColorHex(i), bar: true}
	}
	f := newFrame(o, lo, top, legend)
	f.begin()
	if len(groups) == 0 {
		f.noData()
		return f.end(), nil
	}

	// Each group has a slot of the X axis; its bars fill the middle 64% of it, side by side.
	slot := (f.right - f.left) / float64(len(groups))
	barW := slot * 0.8 / float64(max(1, len(targets))) * 0.8
	labelSize := float64(tickSize)
	for _, g := range groups {
		labelSize = min(labelSize, fitSize(g.Label, tickSize, slot-gap))
	}
	bars := make([]bytes.Buffer, len(targets)) // one path per target
	var whiskers bytes.Buffer                  // one path for all
	for gi, g := range groups {
		center := f.left + slot*(float64(gi)+0.5)
		f.text(center, f.bottom+tickLength+gap/2+tickSize*0.8, labelSize, "middle", textColor, g.Label)
		for _, b := range g.Bars {
			t := index[b.Target]
			if !finite(b.Median) {
				continue
			}
			bx := center + (float64(t)-float64(len(targets)-1)/2)*barW
			y0, y1 := f.y(0), f.y(b.Median)
			fmt.Fprintf(&bars[t], "M%s %sH%sV%sH%sZ", num(bx-barW/2), num(y0), num(bx+barW/2), num(y1), num(bx-barW/2))
			if finite(b.Min) && finite(b.Max) {
				c := barW / 6 // half a cap
				fmt.Fprintf(&whiskers, "M%s %sV%sM%s %sh%sM%s %sh%s", num(bx), num(f.y(b.Min)), num(f.y(b.Max)),
					num(bx-c), num(f.y(b.Min)), num(2*c), num(bx-c), num(f.y(b.Max)), num(2*c))
			}
		}
	}
	for t := range targets {
		if bars[t].Len() > 0 {
			f.path(bars[t].String(), "fill:"+ColorHex(t), false)
		}
	}
	if whiskers.Len() > 0 {
		f.path(whiskers.String(), "fill:none;stroke:#000;stroke-width:1", false)
	}
	return f.end(), nil
}
