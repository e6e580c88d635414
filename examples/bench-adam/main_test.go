package main

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSimSmoke: -device sim runs the three AdamW cases on the simulated
// device's optimizer kernels, with every tensor in device memory, and
// reports them against the roof measured on the same device.
func TestSimSmoke(t *testing.T) {
	var out bytes.Buffer
	require.NoError(t, execute([]string{"-device", "sim", "-sizes", "1", "-reps", "2", "-threads", "1"}, &out))
	var r deviceReport
	require.NoError(t, json.Unmarshal(out.Bytes(), &r), "%s", out.String())
	assert.Equal(t, "sim:0", r.Device)
	assert.Equal(t, 1, r.Threads)
	assert.Contains(t, r.RoofMethod, "Axpy")
	require.Len(t, r.Results, 3)
	for _, c := range r.Results {
		assert.Equal(t, 1<<20, c.Params, c.Case)
		assert.Positive(t, c.GBps, c.Case)
		assert.Positive(t, c.RoofGBps, c.Case)
		assert.InDelta(t, c.GBps/c.RoofGBps, c.OfRoof, 1e-9, c.Case)
		assert.LessOrEqual(t, c.RoofGBps, r.Roof["1M"], c.Case)
	}
}

// TestArgErrors: each bad flag is named with its value and what is allowed.
func TestArgErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-device", "tpu"}, `-device "tpu"`},
		{[]string{"-device", "cuda:1"}, "only device 0"},
		{[]string{"-sizes", "1,x"}, `"x" is not a count of Mi parameters in [1, 16384]`},
		{[]string{"-sizes", "0"}, `-sizes "0"`},
		{[]string{"-reps", "0"}, "-reps = 0: must be >= 1"},
	} {
		assert.ErrorContains(t, execute(c.args, &bytes.Buffer{}), c.want, "%v", c.args)
	}
}
