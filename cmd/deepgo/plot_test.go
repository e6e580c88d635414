package main

import (
	"bytes"
	"image/png"
	"os"
	"path/filepath"
	"testing"

	"github.com/deepgo-ml/deepgo/internal/runfixture"
	"github.com/deepgo-ml/deepgo/rundir"
	"github.com/deepgo-ml/deepgo/runplot"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestPlotCommand(t *testing.T) {
	fx := runfixture.Healthy()
	delete(fx.Values, rundir.TagForwardMS) // no wall_clock_breakdown: time.png is skipped
	dir := writeRun(t, fx)
	var out, errb bytes.Buffer
	require.Equal(t, 0, run([]string{"plot", dir}, &out, &errb), errb.String())
	assert.Contains(t, errb.String(), "note: time.png: skipped: missing Train/Samples/elapsed_time_ms_forward")
	plots := filepath.Join(dir, "plots")
	es, err := os.ReadDir(plots)
	require.NoError(t, err)
	var names []string
	for _, e := range es {
		names = append(names, e.Name())
		f, err := os.Open(filepath.Join(plots, e.Name()))
		require.NoError(t, err)
		cfg, err := png.DecodeConfig(f)
		f.Close()
		require.NoError(t, err, e.Name())
		assert.Equal(t, runplot.Width, cfg.Width, e.Name())
		assert.Equal(t, runplot.Height, cfg.Height, e.Name())
		assert.Contains(t, out.String(), "wrote "+filepath.Join(plots, e.Name()))
	}
	assert.ElementsMatch(t, []string{"loss.png", "lr.png", "loss_scale.png", "memory.png"}, names)

	other := filepath.Join(t.TempDir(), "elsewhere")
	out.Reset()
	require.Equal(t, 0, run([]string{"plot", "--out", other, dir}, &out, &errb))
	assert.Contains(t, out.String(), "wrote "+filepath.Join(other, "loss.png"))
}

func TestPlotErrors(t *testing.T) {
	bad := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(bad, "deepgo_run.json"), []byte(`{"world": 1,`), 0o644))
	cases := []struct {
		name string
		args []string
		code int
		want string
	}{
		{name: "no dir", args: []string{"plot"}, code: 2, want: "usage:"},
		{name: "empty dir", args: []string{"plot", t.TempDir()}, code: 1, want: "not a run directory"},
		{name: "malformed json", args: []string{"plot", bad}, code: 1, want: filepath.Join(bad, "deepgo_run.json")},
		{name: "nothing to plot", args: []string{"plot", writeRun(t, runfixture.Run{Info: &rundir.Info{World: 1}})}, code: 1, want: "nothing to plot"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			assert.Equal(t, c.code, run(c.args, &out, &errb))
			assert.Contains(t, errb.String(), c.want)
		})
	}
}
