package backend

import "github.com/deepgo-ml/deepgo/tensor"

// The vocabulary-parallel kernels on the C core (see VocabParallel), in
// cpu_nn.go's pattern: checks against b's device, addresses taken while
// the tensors are known live, only the C call handed to Exec. An empty
// call (n == 0) has no address to give C and does nothing.

// VocabXentMax runs the C core's row max (see VocabParallel).
func (b *CPU) VocabXentMax(maxes, logits *tensor.Tensor, n, v int) error {
	if err := CheckVocabXentMax(b.dev, maxes, logits, n, v); err != nil || n == 0 {
		return err
	}
	pm, pl := maxes.Ptr(), logits.Ptr()
	return b.Exec("VocabXentMax", false, func() error { return b.ctx.VocabXentMax(pm, pl, n, v) })
}

// VocabXentExp runs the C core's weights, sums and target logits (see
// VocabParallel). On a view a target outside [0, vocab) is found when the
// kernel runs, after the call.
func (b *CPU) VocabXentExp(logits, sums, tlogits, maxes, targets *tensor.Tensor, n, v, lo, vocab int) error {
	const op = "VocabXentExp"
	if err := CheckVocabXentExp(b.dev, logits, sums, tlogits, maxes, targets, n, v, lo, vocab); err != nil || n == 0 {
		return err
	}
	pl, ps, pt, pm, pg := logits.Ptr(), sums.Ptr(), tlogits.Ptr(), maxes.Ptr(), targets.Ptr()
	return b.Exec(op, false, func() error {
		return idErr(op, "targets", vocab, b.ctx.VocabXentExp(pl, ps, pt, pm, pg, n, v, lo, vocab))
	})
}

// VocabXentGrad runs the C core's gradient of the weights (see
// VocabParallel).
func (b *CPU) VocabXentGrad(logits, sums, targets *tensor.Tensor, d float32, n, v, lo int) error {
	if err := CheckVocabXentGrad(b.dev, logits, sums, targets, n, v, lo); err != nil || n == 0 {
		return err
	}
	pl, ps, pg := logits.Ptr(), sums.Ptr(), targets.Ptr()
	return b.Exec("VocabXentGrad", false, func() error { return b.ctx.VocabXentGrad(pl, ps, pg, d, n, v, lo) })
}

// VocabClearRows runs the C core's row mask (see VocabParallel).
func (b *CPU) VocabClearRows(x, ids *tensor.Tensor, n, c, lo, v int) error {
	if err := CheckVocabClearRows(b.dev, x, ids, n, c, lo, v); err != nil || n*c == 0 {
		return err
	}
	px, pi := x.Ptr(), ids.Ptr()
	return b.Exec("VocabClearRows", false, func() error { return b.ctx.VocabClearRows(px, pi, n, c, lo, v) })
}
