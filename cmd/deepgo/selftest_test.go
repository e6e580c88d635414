package main

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The reference must be the exact sum rounded once: a float64 sum in index
// order drops small squares next to a large running total, and at the
// command's default size that alone failed every ISA's sumsq.
func TestExactSumSquares(t *testing.T) {
	big27 := float32(1 << 27) // square 2^54, where float64's spacing is 4
	cases := []struct {
		name string
		v    []float32
		want float64
	}{
		{"empty", nil, 0},
		{"one", []float32{-3}, 9},
		{"small after large", []float32{big27, 1, 1, 1, 1}, 0x1p54 + 4},
		{"subnormal squares", []float32{0x1p-140, 0x1p-140}, 0x1p-279},
		{"tie rounds to even once", []float32{big27, 1, 1}, 0x1p54},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			assert.Equal(t, c.want, exactSumSquares(c.v))
		})
	}
	naive := 0.0
	for _, x := range cases[2].v {
		naive += float64(x) * float64(x)
	}
	assert.NotEqual(t, cases[2].want, naive, "the case must be one a float64 loop gets wrong")
}

func TestSelftestCommand(t *testing.T) {
	var out, errb bytes.Buffer
	code := run([]string{"selftest", "-n", "65536", "-sgemm", "0", "-threads", "2"}, &out, &errb)
	require.Equal(t, 0, code, "stdout:\n%s\nstderr:\n%s", out.String(), errb.String())
	assert.Contains(t, out.String(), "all kernels PASS")
	assert.NotContains(t, out.String(), "FAIL")
}

func TestSelftestBadFlags(t *testing.T) {
	for _, args := range [][]string{{"-n", "-5"}, {"-n", "0"}, {"-threads", "-1"}, {"-sgemm", "-3"}, {"extra"}} {
		var out, errb bytes.Buffer
		code := run(append([]string{"selftest"}, args...), &out, &errb)
		assert.Equal(t, 2, code, "%v: stderr %s", args, errb.String())
		assert.Contains(t, errb.String(), "deepgo selftest: ", "%v", args)
	}
}
