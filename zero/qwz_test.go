package zero

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// QuantGroups picks DeepSpeed's group counts: the values are what
// CUDAQuantizer.quantize's loop gives in Python (0.19.8), and the sizes
// its assertions refuse are errors.
func TestQuantGroups(t *testing.T) {
	for _, c := range []struct{ n, want int }{
		{8, 1}, {16, 1}, {24, 1}, {72, 1}, {136, 1}, {8000, 1}, {8008, 7}, {16000, 2}, {16008, 3},
		{32000, 4}, {64000, 8}, {100000, 20}, {1 << 20, 256}, {3 << 20, 512}, {786432, 128},
		{1000000, 125}, {2359296, 384},
	} {
		g, err := QuantGroups(c.n)
		require.NoError(t, err, c.n)
		assert.Equal(t, c.want, g, "groups of %d", c.n)
	}
	for _, n := range []int{0, 12, 34} {
		_, err := QuantGroups(n)
		assert.Error(t, err, n)
	}
}

// qwzAlign pads chunks to a multiple of 8 at stage 3 with qwZ only.
func TestQwZAlign(t *testing.T) {
	for _, c := range []struct {
		stage, align, want int
		on                 bool
	}{{3, 2, 8, true}, {3, 16, 16, true}, {3, 12, 24, true}, {3, 2, 2, false}, {2, 2, 2, true}} {
		cfg := Config{Stage: c.stage, Align: c.align, QuantizedWeights: c.on}
		qwzAlign(&cfg)
		assert.Equal(t, c.want, cfg.Align, "%+v", c)
	}
}
