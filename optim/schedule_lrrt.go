package optim

import (
	"math"

	"github.com/deepgo-ml/deepgo/config"
)

// lrRangeTest implements LRRangeTest: lr = min_lr * (1 + rate*k) with
// k = (t+1)/step_size, floored when staircase is set.
type lrRangeTest struct {
	noBetas
	p config.LRRangeTestParams
}

func (s *lrRangeTest) lrAt(t int) []float64 {
	out := make([]float64, len(s.p.MinLR))
	if t < -1 {
		t = -1
	}
	k := float64(t+1) / s.p.StepSize
	if s.p.Staircase {
		k = math.Floor(k)
	}
	inc := 1 + s.p.StepRate*k
	for i, lr := range s.p.MinLR {
		out[i] = lr * inc
	}
	return out
}
