package main

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/deepgo-ml/deepgo/offload"
	"github.com/deepgo-ml/deepgo/zero"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestEstimate(t *testing.T) {
	var out, errb bytes.Buffer
	code := run([]string{"estimate", "--params", "354e6", "--largest-layer", "51e6", "--world", "1"}, &out, &errb)
	require.Zero(t, code, errb.String())
	for _, want := range []string{
		"HW: Setup with 1 node, 1 GPU per node.",
		"SW: Model with 354M total params, 51M largest layer params.",
		"    0.28GB |   6.12GB | offload_param=none, offload_optimizer=none, zero_init=1",
		" * stage 3",
	} {
		assert.Contains(t, out.String(), want)
	}
	out.Reset()
	code = run([]string{"estimate", "--params", "1.3e9", "--world", "8", "--stage", "2"}, &out, &errb)
	require.Zero(t, code, errb.String())
	// what DeepSpeed 0.19.8's estimate_zero2_model_states_mem_needs_all_cold
	// prints for the same inputs
	assert.Contains(t, out.String(), "   58.11GB |   2.42GB | offload_optimizer=cpu", "zero2 table")
	assert.Contains(t, out.String(), "   58.11GB |   5.15GB | offload_optimizer=none", "zero2 table")
	code = run([]string{"estimate", "--world", "2"}, &out, &errb)
	assert.Equal(t, 2, code, "missing --params: exit code")
	assert.Contains(t, errb.String(), "--params", "missing --params")

}

// --offload none|cpu|nvme prints zero.PlannedPlacement's host, device and
// disk bytes per rank (the root package's TestEstimateOffloadMatchesMemory
// checks those against training), and refuses what it does not know.
func TestEstimateOffload(t *testing.T) {
	const params, world, stage = 1300000000, 8, 3
	lay, err := zero.PlanBuckets([]zero.ModuleSpec{{Name: "model", Params: []zero.ParamSpec{{Name: "flat", Shape: []int{params}}}}}, world, 2, 0)
	require.NoError(t, err)
	for _, off := range []string{"none", "cpu", "nvme"} {
		t.Run(off, func(t *testing.T) {
			var out, errb bytes.Buffer
			code := run([]string{"estimate", "--params", "1.3e9", "--world", "8", "--stage", "3", "--offload", off,
				"--sub-group-size", "100000000", "--buffer-count", "4"}, &out, &errb)
			require.Zero(t, code, errb.String())
			want, err := zero.PlannedPlacement(lay, stage, 2, 2, 2, off, 1e8, offload.PlanOptions{Buffers: 4})
			require.NoError(t, err)
			assert.Contains(t, out.String(), "offload_optimizer="+off)
			for name, b := range map[string]int64{"host": want.Host, "device": want.Device, "disk": want.Disk} {
				assert.Regexp(t, fmt.Sprintf(`(?m)^  %-6s +[0-9.]+GB  %d bytes$`, name, b), out.String(), "%s bytes", name)
			}
			if off == "nvme" {
				assert.Equal(t, int64(params/world*8), want.Disk, "disk: the Adam moments of the shard")
			}
		})
	}
	for _, bad := range [][]string{{"--offload", "disk"}, {"--offload", "nvme", "--buffer-count", "0"}, {"--sub-group-size", "0"}, {"--stage", "0", "--offload", "cpu"}} {
		var out, errb bytes.Buffer
		code := run(append([]string{"estimate", "--params", "1e6", "--world", "2"}, bad...), &out, &errb)
		assert.Equal(t, 2, code, "%v: exit code", bad)
		assert.Contains(t, errb.String(), bad[len(bad)-2], "%v: the error names the flag", bad)
	}
}
