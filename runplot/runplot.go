// Package runplot draws a run directory (package rundir) as PNG charts: the
// loss with the data's entropy floor, the learning rate, the loss scale, the
// step time split into forward, backward, communication and optimizer, and
// memory against the capacity. It uses gonum's plot package.
package runplot

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/deepgo-ml/deepgo/rundir"
)

// The size of every chart: 8 x 4.5 inches at 96 dots per inch.
const (
	DPI    = 96
	Width  = 8 * DPI     // pixels
	Height = 9 * DPI / 2 // pixels
)

// Chart is one PNG: its file name and how to draw it from a run.
type Chart struct {
	// File is the PNG's name in the output directory.
	File string
	// Draw builds the plot; it returns an error wrapping ErrMissing when the
	// run lacks a tag the chart needs.
	Draw func(*rundir.Run) (*plot.Plot, error)
}

// ErrMissing means a run lacks the tags a chart needs; the chart is skipped.
var ErrMissing = errors.New("missing")

// Charts are the charts Write draws, in order.
var Charts = []Chart{
	{File: "loss.png", Draw: lossChart},
	{File: "lr.png", Draw: lrChart},
	{File: "loss_scale.png", Draw: lossScaleChart},
	{File: "time.png", Draw: timeChart},
	{File: "memory.png", Draw: memoryChart},
}

// Result says what Write did.
type Result struct {
	// Written are the paths of the PNGs written.
	Written []string
	// Skipped say which charts were left out and why.
	Skipped []string
}

// Write draws every chart of run it has the tags for into outDir (created).
// A chart whose tags are missing is skipped with a note; a run with nothing
// to draw is an error.
func Write(run *rundir.Run, outDir string) (Result, error) {
	var res Result
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return res, fmt.Errorf("runplot: %w", err)
	}
	for _, c := range Charts {
		p, err := c.Draw(run)
		if errors.Is(err, ErrMissing) {
			res.Skipped = append(res.Skipped, c.File+": skipped: "+err.Error())
			continue
		}
		if err != nil {
			return res, fmt.Errorf("runplot: %s: %w", c.File, err)
		}
		path := filepath.Join(outDir, c.File)
		if err := save(p, path); err != nil {
			return res, err
		}
		res.Written = append(res.Written, path)
	}
	if len(res.Written) == 0 {
		return res, fmt.Errorf("runplot: %s: nothing to plot (%s)", run.Dir, strings.Join(res.Skipped, "; "))
	}
	return res, nil
}

// headroom is the share of the data's height added above it, where the
// legend (top right) goes without covering a line.
const headroom = 0.3

func save(p *plot.Plot, path string) error {
	if _, linear := p.Y.Scale.(plot.LinearScale); linear && p.Y.Max > p.Y.Min {
		p.Y.Max += headroom * (p.Y.Max - p.Y.Min)
	}
	c := vgimg.NewWith(vgimg.UseWH(vg.Length(Width)*vg.Inch/DPI, vg.Length(Height)*vg.Inch/DPI), vgimg.UseDPI(DPI))
	p.Draw(draw.New(c))
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("runplot: %w", err)
	}
	if _, err := (vgimg.PngCanvas{Canvas: c}).WriteTo(f); err != nil {
		f.Close()
		return fmt.Errorf("runplot: %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("runplot: %s: %w", path, err)
	}
	return nil
}
