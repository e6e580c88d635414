package benchutil

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestInterleavedPairs: each round runs the roof then the kernel; the best
// times are at least what each took, every pair is that round's roof time
// over its kernel time, and an error stops the rounds.
func TestInterleavedPairs(t *testing.T) {
	var calls []string
	var last [2]time.Duration // this round's roof, kernel
	timed := func(name string, i int, d time.Duration) func() error {
		return func() error {
			calls = append(calls, name)
			t0 := time.Now()
			time.Sleep(d)
			last[i] = time.Since(t0)
			return nil
		}
	}
	k, r, pairs, err := InterleavedPairs(3, timed("kernel", 1, 4*time.Millisecond), timed("roof", 0, time.Millisecond))
	require.NoError(t, err)
	assert.Equal(t, []string{"roof", "kernel", "roof", "kernel", "roof", "kernel"}, calls)
	assert.GreaterOrEqual(t, k, 4*time.Millisecond)
	assert.GreaterOrEqual(t, r, time.Millisecond)
	require.Len(t, pairs, 3)
	for _, p := range pairs {
		assert.Positive(t, p)
	}
	// the last pair is the last round's own two times (measured inside the
	// calls, so a little shorter than what the caller timed around them)
	assert.InDelta(t, last[0].Seconds()/last[1].Seconds(), pairs[2], 0.2)

	boom := errors.New("boom")
	calls = nil
	n := 0
	_, _, _, err = InterleavedPairs(5, func() error {
		if n++; n == 2 {
			return boom
		}
		return nil
	}, func() error { calls = append(calls, "roof"); return nil })
	assert.ErrorIs(t, err, boom)
	assert.Len(t, calls, 2, "no round after the failing one")
}
