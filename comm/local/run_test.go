package local

import (
	"context"
	"testing"

	"github.com/deepgo-ml/deepgo/comm"
	"github.com/stretchr/testify/assert"
)

// A rank's context says the size of the Run it is in (what deepgo.Initialize
// checks a missing WithComm against); any other context says 0.
func TestRunSize(t *testing.T) {
	assert.Zero(t, RunSize(context.Background()))
	for _, n := range []int{1, 3} {
		sizes := make([]int, n)
		err := Run(context.Background(), n, Options{}, func(ctx context.Context, c comm.Comm) error {
			sizes[c.Rank()] = RunSize(context.WithoutCancel(ctx))
			return nil
		})
		assert.NoError(t, err)
		for r, got := range sizes {
			assert.Equal(t, n, got, "rank %d of %d", r, n)
		}
	}
}
