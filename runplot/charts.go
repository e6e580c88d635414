package runplot

import (
	"fmt"
	"image/color"
	"math"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"

	"github.com/deepgo-ml/deepgo/rundir"
)

const gib = 1 << 30

// need returns the series of tag, or an error wrapping ErrMissing that says
// what produces it.
func need(r *rundir.Run, tag, producedBy string) (*rundir.Series, error) {
	if s := r.Get(tag); s != nil && s.Len() > 0 {
		return s, nil
	}
	if producedBy != "" {
		producedBy = " (" + producedBy + ")"
	}
	return nil, fmt.Errorf("%w %s%s", ErrMissing, tag, producedBy)
}

func newPlot(title, y string) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "step"
	p.Y.Label.Text = y
	p.Add(plotter.NewGrid())
	p.Legend.Top = true
	return p
}

// points are a series' finite values scaled by div; plotter rejects NaN and Inf.
func points(s *rundir.Series, div float64) plotter.XYs {
	xy := make(plotter.XYs, 0, s.Len())
	for i, v := range s.Values {
		if !math.IsNaN(v) && !math.IsInf(v, 0) {
			xy = append(xy, plotter.XY{X: float64(s.Steps[i]), Y: v / div})
		}
	}
	return xy
}

// addLine adds a line in the i-th palette color with a legend entry.
func addLine(p *plot.Plot, name string, xy plotter.XYs, i int) error {
	if len(xy) == 0 {
		return nil
	}
	l, err := plotter.NewLine(xy)
	if err != nil {
		return err
	}
	l.Color = plotutil.Color(i)
	l.Width = vg.Points(1.5)
	p.Add(l)
	p.Legend.Add(name, l)
	return nil
}

// addLevel adds a dashed horizontal line at y across the steps of xy.
func addLevel(p *plot.Plot, name string, y float64, xy plotter.XYs) error {
	if len(xy) == 0 {
		return nil
	}
	l, err := plotter.NewLine(plotter.XYs{{X: xy[0].X, Y: y}, {X: xy[len(xy)-1].X, Y: y}})
	if err != nil {
		return err
	}
	l.Color = color.Black
	l.Dashes = []vg.Length{vg.Points(6), vg.Points(4)}
	p.Add(l)
	p.Legend.Add(name, l)
	return nil
}

func lossChart(r *rundir.Run) (*plot.Plot, error) {
	s, err := need(r, rundir.TagLoss, "")
	if err != nil {
		return nil, err
	}
	p := newPlot("training loss", "loss")
	xy := points(s, 1)
	if err := addLine(p, "train_loss", xy, 0); err != nil {
		return nil, err
	}
	if ev := r.Get(rundir.TagEvalLoss); ev != nil {
		p.Title.Text = "training and evaluation loss"
		if err := addLine(p, "eval_loss", points(ev, 1), 1); err != nil {
			return nil, err
		}
	}
	if r.Info != nil && r.Info.EntropyFloor != nil {
		if err := addLevel(p, fmt.Sprintf("entropy floor %.4g", *r.Info.EntropyFloor), *r.Info.EntropyFloor, xy); err != nil {
			return nil, err
		}
	}
	return p, nil
}

func lrChart(r *rundir.Run) (*plot.Plot, error) {
	s, err := need(r, rundir.TagLR, "")
	if err != nil {
		return nil, err
	}
	p := newPlot("learning rate", "lr")
	return p, addLine(p, "lr", points(s, 1), 0)
}

func lossScaleChart(r *rundir.Run) (*plot.Plot, error) {
	s, err := need(r, rundir.TagLossScale, "fp16 only")
	if err != nil {
		return nil, err
	}
	p := newPlot("loss scale", "loss scale")
	xy := points(s, 1)
	lo, hi := math.Inf(1), 0.0
	for _, pt := range xy {
		lo, hi = math.Min(lo, pt.Y), math.Max(hi, pt.Y)
	}
	if lo > 0 && hi >= 10*lo {
		// the dynamic scale moves by powers of two: a log axis shows each halving alike
		p.Y.Scale = plot.LogScale{}
		p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	}
	return p, addLine(p, "loss_scale", xy, 0)
}
