package main

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSmoke runs every case once at 1 MiB: each has positive rates and
// ratios on both thread counts, meets_goal follows ratio, and a bad size is
// an error naming the flag.
func TestSmoke(t *testing.T) {
	var out bytes.Buffer
	require.NoError(t, run(&out, "1", 1))
	var rep Report
	require.NoError(t, json.Unmarshal(out.Bytes(), &rep), "%s", out.String())
	require.NotEmpty(t, rep.Results)
	threads := map[int]int{}
	for _, r := range rep.Results {
		threads[r.Threads]++
		assert.Equal(t, 1, r.MiB)
		for _, v := range []float64{r.GBps, r.RoofGBps, r.Ratio, r.PairRatio} {
			assert.Positive(t, v, "%+v", r)
		}
		assert.InDelta(t, r.GBps/r.RoofGBps, r.Ratio, 1e-9)
		assert.Equal(t, r.Ratio >= rep.Target, r.MeetsGoal)
	}
	assert.Equal(t, threads[1], threads[2], "every case on 1 and 2 threads")
	assert.ErrorContains(t, run(&out, "1,x", 1), `-mib: "x" is not a positive integer`)
}
