package main

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A small run reports both contenders' steps, the swap I/O of every timed
// step (the whole state read and written), a hidden share in [0, 1] and
// the disk's rates.
func TestSmallRun(t *testing.T) {
	var out bytes.Buffer
	require.NoError(t, execute([]string{"-dir", t.TempDir(), "-hidden", "128", "-layers", "2", "-micro", "4",
		"-rounds", "2", "-steps", "2", "-sub-group-size", "5000", "-buffer-count", "2"}, &out))
	var r report
	require.NoError(t, json.Unmarshal(out.Bytes(), &r), "%s", out.String())
	assert.Len(t, r.Memory.StepAllMS, 4)
	assert.Len(t, r.NVMe.StepAllMS, 4)
	state := float64(r.Memory.StateBytes) / 1e6
	assert.Equal(t, int64(2*128*129*2*4), r.Memory.StateBytes, "AdamW state bytes")
	assert.Equal(t, r.Memory.StateBytes, r.NVMe.StateOnDisk)
	assert.GreaterOrEqual(t, r.NVMe.ReadMB, state, "swap reads per step: the whole state (padded)")
	assert.GreaterOrEqual(t, r.NVMe.WriteMB, state, "swap writes per step")
	assert.Positive(t, r.NVMe.IOMS)
	assert.GreaterOrEqual(t, r.NVMe.Hidden, 0.0)
	assert.LessOrEqual(t, r.NVMe.Hidden, 1.0)
	assert.Positive(t, r.Disk.ReadGBps)
	assert.Positive(t, r.Disk.WriteGBps)
	assert.Positive(t, r.Slowdown)
}

func TestBadFlags(t *testing.T) {
	for _, args := range [][]string{{"-layers", "0"}, {"-buffer-count", "0"}, {"-dir", "/no/such/dir"}} {
		err := execute(args, &bytes.Buffer{})
		assert.ErrorContains(t, err, args[0], "%v", args)
	}
}
