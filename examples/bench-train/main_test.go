package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// tiny is a model small enough for a smoke run of a second.
var tiny = []string{"-layers", "1", "-heads", "2", "-width", "64", "-vocab", "256", "-seq", "32", "-batch", "2", "-steps", "2", "-peak-n", "128"}

type report struct {
	Device     string  `json:"device"`
	PeakMethod string  `json:"peak_method"`
	PeakGFLOPs float64 `json:"peak_gflops"`
	Runs       []run   `json:"runs"`
}

func runJSON(t *testing.T, args ...string) report {
	t.Helper()
	var out bytes.Buffer
	require.NoError(t, execute(append(append([]string(nil), tiny...), args...), &out))
	var r report
	require.NoError(t, json.Unmarshal(out.Bytes(), &r), "%s", out.String())
	return r
}

// TestSimSmoke: -device sim runs the GPT on the simulated device (memory Go
// cannot read, so every parameter, gradient and activation went through
// the device path), reports its peak and both checkpointing settings, and
// computes the very loss the CPU run does (sim runs the CPU kernels).
func TestSimSmoke(t *testing.T) {
	s := runJSON(t, "-device", "sim", "-threads", "1")
	c := runJSON(t, "-device", "cpu")
	assert.Equal(t, "sim:0", s.Device)
	assert.Contains(t, s.PeakMethod, "128^3 sgemm on device tensors")
	assert.Greater(t, s.PeakGFLOPs, 0.0)
	require.Len(t, s.Runs, 2)
	require.Len(t, c.Runs, 4)
	for i, r := range s.Runs {
		assert.Equal(t, "sim:0", r.Device)
		assert.Equal(t, i == 1, r.Checkpointing)
		assert.Greater(t, r.TokensPerSec, 0.0)
		assert.Greater(t, r.MFU, 0.0)
		assert.Positive(t, r.ActivationBytes)
		assert.Equal(t, c.Runs[0].Loss, r.Loss, "sim and cpu losses")
	}
}

func TestArgErrors(t *testing.T) {
	for _, c := range []struct{ args []string }{
		{[]string{"-device", "tpu"}},
		{[]string{"-device", "sim:1"}},
		{[]string{"-steps", "0"}},
		{[]string{"-heads", "5"}},
	} {
		err := execute(append(append([]string(nil), tiny...), c.args...), &bytes.Buffer{})
		require.Error(t, err, "%v", c.args)
		assert.True(t, strings.Contains(err.Error(), c.args[0]) || strings.Contains(err.Error(), c.args[1]), "%v: %v", c.args, err)
	}
}
