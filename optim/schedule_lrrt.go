package optim

import "math"

const (
	keyLRRTMinLR     = "lr_range_test_min_lr"
	keyLRRTStepSize  = "lr_range_test_step_size"
	keyLRRTStepRate  = "lr_range_test_step_rate"
	keyLRRTStaircase = "lr_range_test_staircase"
)

// lrRangeTest implements LRRangeTest: lr = min_lr * (1 + rate*k) with
// k = (t+1)/step_size, floored when staircase is set.
type lrRangeTest struct {
	noBetas
	minLRs    []float64
	size      float64
	rate      float64
	staircase bool
}

func newLRRangeTest(r *paramReader) (*lrRangeTest, error) {
	if err := r.checkKeys([]string{keyLRRTMinLR, keyLRRTStepSize, keyLRRTStepRate, keyLRRTStaircase,
		keyLastBatchIteration}); err != nil {
		return nil, err
	}
	s := &lrRangeTest{}
	def := make([]float64, r.groups)
	for i := range def {
		def[i] = 1e-3
	}
	var err error
	if s.minLRs, err = r.floats(keyLRRTMinLR, def); err != nil {
		return nil, err
	}
	if s.size, err = r.float(keyLRRTStepSize, 2000); err != nil {
		return nil, err
	}
	if !(s.size > 0) {
		return nil, r.errf(keyLRRTStepSize, r.params[keyLRRTStepSize], "must be > 0 (training steps per LR increase)")
	}
	if s.rate, err = r.float(keyLRRTStepRate, 1.0); err != nil {
		return nil, err
	}
	if s.staircase, err = r.boolean(keyLRRTStaircase, false); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *lrRangeTest) lrAt(t int) []float64 {
	out := make([]float64, len(s.minLRs))
	if t < -1 {
		t = -1
	}
	k := float64(t+1) / s.size
	if s.staircase {
		k = math.Floor(k)
	}
	inc := 1 + s.rate*k
	for i, lr := range s.minLRs {
		out[i] = lr * inc
	}
	return out
}
