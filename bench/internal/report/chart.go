package report

import (
	"fmt"
	"image/color"
	"math"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// ChartPoint is one bar of the chart: a row with a bar to judge against.
type ChartPoint struct {
	Label string
	Score float64 // ratio normalised so that 1 = the bar, > 1 = met (NaN = not available)
	Text  string  // shown beside the bar, e.g. "2.31× ours/peer (bar ≥ 2)"
	Met   bool
}

// ChartPoints selects the rows that have a bar, in table order. Rows that are
// unavailable or failed are kept with a NaN score so the chart shows them.
func ChartPoints(rows []Row) []ChartPoint {
	var pts []ChartPoint
	for i := range rows {
		r := &rows[i]
		if r.Bar.Op == NoBar {
			continue
		}
		p := ChartPoint{Label: r.ID + " " + r.Name, Score: math.NaN()}
		switch r.Status {
		case Unavailable:
			p.Text = "not available (" + r.Reason + ")"
		case Failed:
			p.Text = "FAILED"
		default:
			p.Score = r.Bar.Score(r.Ratio)
			p.Met, _ = r.Bar.Met(r.Ratio)
			if math.IsNaN(p.Score) {
				p.Text = "no ratio"
			} else {
				p.Text = fmt.Sprintf("%s (bar %s)", r.RatioText(), barShort(r.Bar))
			}
		}
		pts = append(pts, p)
	}
	return pts
}

func barShort(b Bar) string {
	if b.Op == AtLeast {
		return "≥ " + strconv.FormatFloat(b.Threshold, 'g', -1, 64)
	}
	return "≤ " + strconv.FormatFloat(b.Threshold, 'g', -1, 64)
}

// clampLog is log10 of a score, clamped to ±2 (0.01×..100×) so one extreme
// row does not squash the rest.
func clampLog(s float64) float64 {
	if math.IsNaN(s) {
		return 0
	}
	if math.IsInf(s, 1) {
		return 2
	}
	l := math.Log10(s)
	return math.Max(-2, math.Min(2, l))
}

// Chart draws the ratios against their bars as a horizontal bar chart of
// log10(score): a bar to the right of the centre line met its target by that
// factor, one to the left missed it. It writes a PNG to file.
func Chart(title string, pts []ChartPoint, file string) error {
	if len(pts) == 0 {
		pts = []ChartPoint{{Label: "no scenario with a bar ran", Score: math.NaN(), Text: ""}}
	}
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "ratio ÷ bar (log scale): right of 1× = bar met, left = missed"
	n := len(pts)
	met := make(plotter.Values, n)
	missed := make(plotter.Values, n)
	// Plot bottom-up so the first table row is at the top.
	names := make([]string, n)
	for i, pt := range pts {
		j := n - 1 - i
		names[j] = pt.Label
		v := clampLog(pt.Score)
		if pt.Met {
			met[j] = v
		} else {
			missed[j] = v
		}
	}
	w := vg.Points(9)
	bm, err := plotter.NewBarChart(met, w)
	if err != nil {
		return err
	}
	bm.Horizontal = true
	bm.Color = color.RGBA{R: 46, G: 160, B: 67, A: 255}
	bm.LineStyle.Width = 0
	bx, err := plotter.NewBarChart(missed, w)
	if err != nil {
		return err
	}
	bx.Horizontal = true
	bx.Color = color.RGBA{R: 207, G: 34, B: 46, A: 255}
	bx.LineStyle.Width = 0
	p.Add(bm, bx)

	// The bar itself: the line at 1×.
	line, err := plotter.NewLine(plotter.XYs{{X: 0, Y: -0.5}, {X: 0, Y: float64(n) - 0.5}})
	if err != nil {
		return err
	}
	line.LineStyle.Width = vg.Points(1.5)
	line.LineStyle.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
	p.Add(line)

	// Value labels beside each bar.
	lxy := make(plotter.XYs, n)
	ltext := make([]string, n)
	for i, pt := range pts {
		j := n - 1 - i
		x := clampLog(pt.Score)
		lxy[j] = plotter.XY{X: math.Max(x, 0) + 0.05, Y: float64(j) - 0.25}
		ltext[j] = pt.Text
	}
	labels, err := plotter.NewLabels(plotter.XYLabels{XYs: lxy, Labels: ltext})
	if err != nil {
		return err
	}
	for i := range labels.TextStyle {
		labels.TextStyle[i].Font.Size = vg.Points(8)
	}
	p.Add(labels)

	p.NominalY(names...)
	p.X.Min, p.X.Max = -2, 3.2 // room on the right for the labels
	p.X.Tick.Marker = plot.ConstantTicks{
		{Value: -2, Label: "0.01×"}, {Value: -1, Label: "0.1×"}, {Value: -math.Log10(2), Label: "0.5×"},
		{Value: 0, Label: "1×"}, {Value: math.Log10(2), Label: "2×"}, {Value: 1, Label: "10×"}, {Value: 2, Label: "100×"},
	}
	p.Add(plotter.NewGrid())
	height := vg.Length(n)*vg.Points(16) + vg.Points(90)
	return p.Save(vg.Points(900), height, file)
}
