package runplot_test

import (
	"image/color"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/deepgo-ml/deepgo/internal/runfixture"
	"github.com/deepgo-ml/deepgo/rundir"
	"github.com/deepgo-ml/deepgo/runplot"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gonum.org/v1/plot/plotutil"
)

func readRun(t *testing.T, run runfixture.Run) *rundir.Run {
	t.Helper()
	dir, err := runfixture.Write(t.TempDir(), run)
	require.NoError(t, err)
	r, err := rundir.Read(dir)
	require.NoError(t, err)
	return r
}

// decodes checks that path is a PNG of the charts' size.
func decodes(t *testing.T, path string) {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	img, err := png.Decode(f)
	require.NoError(t, err, path)
	assert.Equal(t, runplot.Width, img.Bounds().Dx(), "%s width", path)
	assert.Equal(t, runplot.Height, img.Bounds().Dy(), "%s height", path)
	// a drawn chart is not one flat colour
	first := img.At(0, 0)
	varied := false
	for y := 0; y < img.Bounds().Dy() && !varied; y += 7 {
		for x := 0; x < img.Bounds().Dx() && !varied; x += 7 {
			varied = img.At(x, y) != first
		}
	}
	assert.True(t, varied, "%s is blank", path)
}

func files(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	require.NoError(t, err)
	var out []string
	for _, e := range es {
		out = append(out, e.Name())
	}
	return out
}

func TestWriteFullRun(t *testing.T) {
	for name, run := range map[string]runfixture.Run{"healthy": runfixture.Healthy(), "overflow storm": runfixture.OverflowStorm()} {
		t.Run(name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "plots")
			res, err := runplot.Write(readRun(t, run), out)
			require.NoError(t, err)
			assert.Empty(t, res.Skipped)
			assert.ElementsMatch(t, []string{"loss.png", "lr.png", "loss_scale.png", "time.png", "memory.png"}, files(t, out))
			require.Len(t, res.Written, 5)
			for _, p := range res.Written {
				decodes(t, p)
			}
		})
	}
}

func TestMissingTagsSkipCharts(t *testing.T) {
	cases := []struct {
		name    string
		drop    []string
		files   []string
		skipped []string
	}{
		{name: "no wall_clock_breakdown, bf16",
			drop:    []string{rundir.TagForwardMS, rundir.TagBackwardMS, rundir.TagBackwardInnerMS, rundir.TagBackwardReduceMS, rundir.TagStepMS, rundir.TagLossScale},
			files:   []string{"loss.png", "lr.png", "memory.png"},
			skipped: []string{"loss_scale.png: skipped: missing Train/Samples/loss_scale (fp16 only)", "time.png: skipped: missing Train/Samples/elapsed_time_ms_forward (wall_clock_breakdown or flops_profiler.enabled)"}},
		{name: "DeepSpeed's tags only: comm and optimizer from its breakdown",
			drop:  []string{rundir.TagCommTimeMS, rundir.TagOptimizerTimeMS, rundir.TagBackwardInnerMS, rundir.TagMemoryHost, rundir.TagMemoryDevice, rundir.TagMemoryPeak, rundir.TagRSS, rundir.TagGPUMemoryUsed},
			files: []string{"loss.png", "lr.png", "loss_scale.png", "time.png"}, skipped: []string{"memory.png: skipped: missing every memory tag"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			run := runfixture.Healthy()
			for _, tag := range c.drop {
				delete(run.Values, tag)
			}
			out := t.TempDir()
			res, err := runplot.Write(readRun(t, run), out)
			require.NoError(t, err)
			assert.ElementsMatch(t, c.files, files(t, out))
			for i, s := range c.skipped {
				if assert.Greater(t, len(res.Skipped), i) {
					assert.Contains(t, res.Skipped[i], s)
				}
			}
			for _, p := range res.Written {
				decodes(t, p)
			}
		})
	}
}

func TestNothingToPlot(t *testing.T) {
	run := runfixture.Healthy()
	run.Values = map[string][]float64{"Train/Samples/other": {1, 2}}
	_, err := runplot.Write(readRun(t, run), t.TempDir())
	require.Error(t, err)
	assert.Contains(t, err.Error(), "nothing to plot")
	assert.Contains(t, err.Error(), "loss.png: skipped: missing Train/Samples/train_loss")
}

func TestOneStepAndNonFinite(t *testing.T) {
	run := runfixture.Healthy()
	for tag, v := range run.Values {
		run.Values[tag] = v[:1]
	}
	// a diverged loss: plotter rejects NaN and Inf, the chart leaves them out
	run.Values[rundir.TagLoss] = []float64{math.NaN()}
	run.Values[rundir.TagLR] = []float64{1e-4, math.Inf(1), 2e-4}
	out := t.TempDir()
	res, err := runplot.Write(readRun(t, run), out)
	require.NoError(t, err)
	assert.Len(t, res.Written, 5)
	for _, p := range res.Written {
		decodes(t, p)
	}
}

// A run with eval_loss draws it on the loss chart beside train_loss, in
// the palette's second colour, which a run without it does not show.
func TestLossChartEvalLoss(t *testing.T) {
	steps := make([]int64, 20)
	loss := make([]float64, 20)
	for i := range steps {
		steps[i], loss[i] = int64(i+1), 4*math.Exp(-float64(i)/8)
	}
	evalColor := color.RGBAModel.Convert(plotutil.Color(1)).(color.RGBA)
	count := func(withEval bool) int {
		r := &rundir.Run{Series: map[string]*rundir.Series{rundir.TagLoss: {Tag: rundir.TagLoss, Steps: steps, Values: loss}}}
		if withEval {
			r.Series[rundir.TagEvalLoss] = &rundir.Series{Tag: rundir.TagEvalLoss, Steps: []int64{0, 10, 20}, Values: []float64{4.2, 2.5, 1.6}}
		}
		out := filepath.Join(t.TempDir(), "plots")
		res, err := runplot.Write(r, out)
		require.NoError(t, err)
		require.Contains(t, res.Written, filepath.Join(out, "loss.png"))
		f, err := os.Open(filepath.Join(out, "loss.png"))
		require.NoError(t, err)
		defer f.Close()
		img, err := png.Decode(f)
		require.NoError(t, err)
		n := 0
		for y := img.Bounds().Min.Y; y < img.Bounds().Max.Y; y++ {
			for x := img.Bounds().Min.X; x < img.Bounds().Max.X; x++ {
				if color.RGBAModel.Convert(img.At(x, y)).(color.RGBA) == evalColor {
					n++
				}
			}
		}
		return n
	}
	assert.Zero(t, count(false), "no eval_loss: no pixel of its colour")
	assert.Greater(t, count(true), 100, "eval_loss's line and legend")
}
