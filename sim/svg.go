package sim

import (
	"fmt"
	"html"
	"io"
	"math"
	"strings"
)

// Chart geometry, in SVG user units.
const (
	svgW, svgH                       = 960, 480
	plotL, plotR, plotT, plotB       = 80, 640, 50, 410
	legendX                          = 665
	overColor, underColor, gridColor = "#c0392b", "#2471a3", "#dddddd"
)

// WriteSVG draws the report as a scatter chart: for each result, its
// overshoot (filled) and undershoot (hollow) ratio against its Redis
// commands per decision on a log axis, labelled with strategy and
// interval. Results with no Redis commands (local) sit on a "0" column
// left of the axis break. The SVG is hand-written and self-contained.
func (rep *Report) WriteSVG(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", svgW, svgH, svgW, svgH)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", svgW, svgH)
	title := fmt.Sprintf("%s, %s mode, seed %d: accuracy against Redis cost", rep.Scenario, rep.Mode, rep.Seed)
	fmt.Fprintf(&b, `<text x="%d" y="28" font-size="15" font-weight="bold">%s</text>`+"\n", plotL, html.EscapeString(title))

	// x: decades spanning the positive values; a "0" column if needed.
	lo, hi, zero := math.Inf(1), math.Inf(-1), false
	ymax := 0.0
	for _, r := range rep.Results {
		if x := r.RedisCmdsPerDecision; x > 0 {
			lo, hi = min(lo, math.Log10(x)), max(hi, math.Log10(x))
		} else {
			zero = true
		}
		ymax = max(ymax, r.OvershootRatio, r.UndershootRatio)
	}
	if math.IsInf(lo, 1) {
		lo, hi = -3, 0
	}
	dlo, dhi := math.Floor(lo), math.Ceil(hi)
	if dhi <= dlo {
		dhi = dlo + 1
	}
	left := float64(plotL)
	if zero {
		left += 50 // room for the "0" column
	}
	xOf := func(v float64) float64 {
		if v <= 0 {
			return float64(plotL) + 20
		}
		return left + (math.Log10(v)-dlo)/(dhi-dlo)*(float64(plotR)-left)
	}
	step := niceStep(ymax * 100)
	ytop := math.Max(step, math.Ceil(ymax*100/step)*step)
	yOf := func(ratio float64) float64 {
		return float64(plotB) - ratio*100/ytop*float64(plotB-plotT)
	}

	// Grid and axes.
	for d := dlo; d <= dhi; d++ {
		x := xOf(math.Pow(10, d))
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="%s"/>`+"\n", x, plotT, x, plotB, gridColor)
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">%s</text>`+"\n", x, plotB+18, decade(d))
	}
	if zero {
		x := xOf(0)
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">0</text>`+"\n", x, plotB+18)
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#999" stroke-dasharray="2 3"/>`+"\n", left-12, plotT, left-12, plotB)
	}
	for v := 0.0; v <= ytop+step/2; v += step {
		y := yOf(v / 100)
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="%s"/>`+"\n", plotL, y, plotR, y, gridColor)
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end">%s%%</text>`+"\n", plotL-8, y+4, trimFloat(v))
	}
	fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#555"/>`+"\n", plotL, plotT, plotR-plotL, plotB-plotT)
	fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle">Redis commands per decision (log scale)</text>`+"\n", (plotL+plotR)/2, plotB+42)
	fmt.Fprintf(&b, `<text x="20" y="%d" text-anchor="middle" transform="rotate(-90 20 %d)">share of the oracle's admissions</text>`+"\n", (plotT+plotB)/2, (plotT+plotB)/2)

	// A strategy's points, interval by interval, joined by a thin line.
	for _, series := range []struct {
		ratio func(Result) float64
		color string
		dash  string
	}{
		{func(r Result) float64 { return r.UndershootRatio }, underColor, ` stroke-dasharray="4 3"`},
		{func(r Result) float64 { return r.OvershootRatio }, overColor, ""},
	} {
		for _, s := range Strategies() {
			var pts []string
			for _, r := range rep.Results {
				if r.Strategy == s && r.SyncIntervalMS != nil {
					pts = append(pts, fmt.Sprintf("%.1f,%.1f", xOf(r.RedisCmdsPerDecision), yOf(series.ratio(r))))
				}
			}
			if len(pts) > 1 {
				fmt.Fprintf(&b, `<polyline points="%s" fill="none" stroke="%s" stroke-opacity="0.5"%s/>`+"\n", strings.Join(pts, " "), series.color, series.dash)
			}
		}
	}
	// Points: undershoot first, so overshoot draws on top.
	for _, r := range rep.Results {
		fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="5" fill="white" stroke="%s" stroke-width="2"><title>%s undershoot %s</title></circle>`+"\n",
			xOf(r.RedisCmdsPerDecision), yOf(r.UndershootRatio), underColor, html.EscapeString(r.Label()), pct(r.UndershootRatio))
	}
	for _, r := range rep.Results {
		fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="5" fill="%s"><title>%s overshoot %s</title></circle>`+"\n",
			xOf(r.RedisCmdsPerDecision), yOf(r.OvershootRatio), overColor, html.EscapeString(r.Label()), pct(r.OvershootRatio))
	}
	// Labels last, by the overshoot points, out of each other's way.
	var placed []box
	for _, r := range rep.Results {
		x, y := xOf(r.RedisCmdsPerDecision), yOf(r.OvershootRatio)
		label := r.Label()
		lb := place(&placed, x+8, y-6, float64(6*len(label)), 11)
		if lb.y+11 < y-6 || lb.y > y+2 { // moved away from its point: a leader line
			fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#999" stroke-width="0.5"/>`+"\n", x+3, y, lb.x, lb.y+6)
		}
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" font-size="10" fill="#333">%s</text>`+"\n", lb.x, lb.y+9, html.EscapeString(label))
	}

	// Legend.
	fmt.Fprintf(&b, `<circle cx="%d" cy="%d" r="5" fill="%s"/><text x="%d" y="%d">overshoot (admitted beyond the oracle)</text>`+"\n", legendX, plotT+6, overColor, legendX+10, plotT+10)
	fmt.Fprintf(&b, `<circle cx="%d" cy="%d" r="5" fill="white" stroke="%s" stroke-width="2"/><text x="%d" y="%d">undershoot (false rejections)</text>`+"\n", legendX, plotT+26, underColor, legendX+10, plotT+30)
	fmt.Fprintf(&b, `<text x="%d" y="%d" font-size="10" fill="#555">lower left is better:</text>`+"\n", legendX, plotT+56)
	fmt.Fprintf(&b, `<text x="%d" y="%d" font-size="10" fill="#555">accurate and cheap</text>`+"\n", legendX, plotT+70)
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// box is a label's place: top left corner and size.
type box struct{ x, y, w, h float64 }

func (a box) overlaps(b box) bool {
	return a.x < b.x+b.w && b.x < a.x+a.w && a.y < b.y+b.h && b.y < a.y+a.h
}

// place finds a spot for a label of size w x h near (x, y), top left,
// that overlaps no label placed before: the spot itself, else the nearest
// free one up or down in steps of a line, and records it.
func place(placed *[]box, x, y, w, h float64) box {
	for i := 0; i < 60; i++ {
		dy := float64((i+1)/2) * (h + 1)
		if i%2 == 1 {
			dy = -dy
		}
		c := box{x, y + dy, w, h}
		if c.y < plotT || c.y+h > plotB+14 {
			continue
		}
		free := true
		for _, p := range *placed {
			if c.overlaps(p) {
				free = false
				break
			}
		}
		if free {
			*placed = append(*placed, c)
			return c
		}
	}
	c := box{x, y, w, h}
	*placed = append(*placed, c)
	return c
}

// niceStep returns a tick step of 1, 2 or 5 times a power of ten giving at
// most six ticks up to max (a percentage).
func niceStep(max float64) float64 {
	if max <= 0 {
		return 1
	}
	raw := max / 5
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= raw {
			return m * p
		}
	}
	return 10 * p
}

// decade labels the tick at 10^d: "0.001", "1", "100", or "1e-7" when
// the decimal would be long.
func decade(d float64) string {
	if d >= -4 {
		return trimFloat(math.Pow(10, d))
	}
	return fmt.Sprintf("1e%d", int(d))
}

func trimFloat(v float64) string {
	s := fmt.Sprintf("%.6f", v)
	s = strings.TrimRight(s, "0")
	return strings.TrimSuffix(s, ".")
}
