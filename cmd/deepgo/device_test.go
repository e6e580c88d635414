package main

import (
	"testing"

	"github.com/deepgo-ml/deepgo/tensor"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The device of in-process rank r: sim:r, and under a launcher the GPU
// LOCAL_RANK picks, one more per in-process rank.
func TestRankDevice(t *testing.T) {
	for _, c := range []struct {
		flag, localRank string
		rank            int
		want            tensor.Device
	}{
		{"cpu", "3", 1, tensor.CPU},
		{"sim", "", 1, tensor.Sim(1)},
		{"sim:2", "", 1, tensor.Sim(3)},
		{"cuda", "", 0, tensor.CUDA(0)},
		{"cuda", "3", 0, tensor.CUDA(3)},
		{"cuda", "3", 1, tensor.CUDA(4)},
		{"cuda:1", "3", 0, tensor.CUDA(1)}, // an explicit index wins
	} {
		got, err := rankDevice(c.flag, c.rank, func(k string) string {
			if k == "LOCAL_RANK" {
				return c.localRank
			}
			return ""
		})
		require.NoError(t, err, "%+v", c)
		assert.Equal(t, c.want, got, "%+v", c)
	}
	_, err := rankDevice("cuda", 0, func(string) string { return "x" })
	assert.ErrorContains(t, err, `LOCAL_RANK="x"`)
	assert.Equal(t, "sim:0..sim:1", deviceRange(tensor.Sim(0), 2))
	assert.Equal(t, "cpu", deviceRange(tensor.CPU, 2))
}
