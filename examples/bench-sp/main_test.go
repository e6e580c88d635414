package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// The fit recovers a known power law, and the window's att bytes grow as
// T once T >= W while full attention's grow as T².
func TestFit(t *testing.T) {
	var full, win []Point
	for _, n := range []int{64, 128, 256, 512} {
		full = append(full, Point{T: n, AttBytes: n * n * 4, Pairs: int64(n * n), TotalMs: 1e-3 * float64(n*n)})
		win = append(win, Point{T: n, Window: 64, AttBytes: n * 64 * 4, Pairs: int64(n * 64), TotalMs: 1e-3 * float64(n*64)})
	}
	ff, wf := fit(full, 0), fit(win, 128)
	require.InDelta(t, 2, ff.TimeExponent, 1e-9)
	require.InDelta(t, 2, ff.AttExponent, 1e-9)
	require.InDelta(t, 1, wf.TimeExponent, 1e-9)
	require.InDelta(t, 1, wf.AttExponent, 1e-9)
	require.InDelta(t, 1, wf.TailTimeExponent, 1e-9)
	require.InDelta(t, 2, ff.PairsExponent, 1e-9)
	require.InDelta(t, 1, wf.PairsExponent, 1e-9)
	require.Zero(t, slope([]float64{1}, []float64{2}), "one point")
	require.Zero(t, slope([]float64{3, 3}, []float64{1, 2}), "one distinct T")
}

func TestBadFlags(t *testing.T) {
	for _, c := range []struct {
		name, mode, ts, want string
		window               int
	}{
		{"mode", "ulysses", "64", `-mode "ulysses": not supported`, 8},
		{"lengths", "window", "64,x", `-t "64,x"`, 8},
		{"window", "window", "64", "-window 0: must be >= 1", 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			require.ErrorContains(t, run(c.mode, c.ts, c.window, 1, 1, 4, 1, 1), c.want)
		})
	}
}

func TestDispatch(t *testing.T) {
	require.ErrorContains(t, dispatch([]string{"-mode", "ring"}), `-mode "ring": not supported: want window or ulysses`)
	require.ErrorContains(t, dispatch([]string{"-mode=window", "-window", "0"}), "-window")
	require.ErrorContains(t, dispatch([]string{"-mode", "ulysses", "-steps", "0"}), "-steps 0")
}
