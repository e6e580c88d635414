package backend

import "github.com/deepgo-ml/deepgo/tensor"

// VocabParallel is the vocabulary-parallel end of a tensor-parallel
// language model (Megatron's vocab-parallel embedding and cross-entropy):
// each rank of the group holds the token ids [lo, lo+v) of a vocabulary
// of vocab, so its logits are the slice logits[n, v] of each row. The
// cross-entropy combines the slices in three steps separated by the
// caller's all-reduces over the group, of per-row scalars only: maxes
// (max) after VocabXentMax, sums and tlogits (sum) after VocabXentExp; row
// r's loss is then log(sums[r]) - tlogits[r], and VocabXentGrad turns the
// weights into the gradient, never gathering the [n, vocab] logits.
//
// The arithmetic is fixed to the bit (dg_nn_math.h's dg_nn_vxent_*, the
// Go loops these kernels replaced: Go's max, float32(math.Exp(float64(x))),
// each row in element order with its sum in float64), so every backend
// gives the CPU's bits, but for which NaN a NaN row holds on CUDA. Sizes
// and tensors follow NN's rules; the kernels run on its stream.
type VocabParallel interface {
	// VocabXentMax writes maxes[n], the largest logit of each row of
	// logits[n, v] (Go's max: a NaN wins, +0 beats -0).
	VocabXentMax(maxes, logits *tensor.Tensor, n, v int) error
	// VocabXentExp replaces logits[n, v] by the weights e^(logits -
	// maxes[row]) and writes sums[n], each row's sum of them (float64 in
	// element order, rounded once), and tlogits[n], the target's logit
	// minus the max where targets[r] is in [lo, lo+v), else 0. The slice
	// [lo, lo+v) must lie in [0, vocab); a target outside [0, vocab) is
	// an *ArgError on targets.
	VocabXentExp(logits, sums, tlogits, maxes, targets *tensor.Tensor, n, v, lo, vocab int) error
	// VocabXentGrad writes, in place of the weights, the gradient of d
	// times the summed loss: logits[r, :] = (logits[r, :] * (1/sums[r]) -
	// onehot) * d, onehot 1 at targets[r] - lo where the slice holds the
	// target.
	VocabXentGrad(logits, sums, targets *tensor.Tensor, d float32, n, v, lo int) error
	// VocabClearRows zeroes the rows r of x[n, c] whose ids[r] is outside
	// [lo, lo+v): the embedding's rows of tokens another rank holds.
	VocabClearRows(x, ids *tensor.Tensor, n, c, lo, v int) error
}

// CheckVocabXentMax validates VocabXentMax's arguments on dev.
func CheckVocabXentMax(dev tensor.Device, maxes, logits *tensor.Tensor, n, v int) error {
	const op = "VocabXentMax"
	if err := checkSizes(op, size{"n", n, 0}, size{"v", v, 1}); err != nil {
		return err
	}
	return checkActs(op, dev, tensor.Float32, req("maxes", maxes, n), req("logits", logits, n*v))
}

// CheckVocabXentExp validates VocabXentExp's arguments on dev (not the
// target values: the kernel reads them).
func CheckVocabXentExp(dev tensor.Device, logits, sums, tlogits, maxes, targets *tensor.Tensor, n, v, lo, vocab int) error {
	const op = "VocabXentExp"
	if err := checkSizes(op, size{"n", n, 0}, size{"v", v, 1}); err != nil {
		return err
	}
	if err := checkSlice(op, lo, v, vocab); err != nil {
		return err
	}
	if err := checkActs(op, dev, tensor.Float32, req("logits", logits, n*v), req("sums", sums, n), req("tlogits", tlogits, n),
		req("maxes", maxes, n)); err != nil {
		return err
	}
	return checkActs(op, dev, tensor.Int32, req("targets", targets, n))
}

// CheckVocabXentGrad validates VocabXentGrad's arguments on dev.
func CheckVocabXentGrad(dev tensor.Device, logits, sums, targets *tensor.Tensor, n, v, lo int) error {
	const op = "VocabXentGrad"
	if err := checkSizes(op, size{"n", n, 0}, size{"v", v, 1}, size{"lo", lo, 0}); err != nil {
		return err
	}
	if err := checkActs(op, dev, tensor.Float32, req("logits", logits, n*v), req("sums", sums, n)); err != nil {
		return err
	}
	return checkActs(op, dev, tensor.Int32, req("targets", targets, n))
}

// CheckVocabClearRows validates VocabClearRows's arguments on dev.
func CheckVocabClearRows(dev tensor.Device, x, ids *tensor.Tensor, n, c, lo, v int) error {
	const op = "VocabClearRows"
	if err := checkSizes(op, size{"n", n, 0}, size{"c", c, 0}, size{"lo", lo, 0}, size{"v", v, 0}); err != nil {
		return err
	}
	if err := checkActs(op, dev, tensor.Float32, req("x", x, n*c)); err != nil {
		return err
	}
	return checkActs(op, dev, tensor.Int32, req("ids", ids, n))
}

// checkSlice validates that [lo, lo+v) lies in a vocabulary of vocab ids.
func checkSlice(op string, lo, v, vocab int) error {
	if lo < 0 || vocab < v || lo > vocab-v {
		return ArgErr(op, "lo", "%d: the slice [lo, lo+v) = [%d, %d) must lie in the vocabulary [0, %d)", lo, lo, lo+v, vocab)
	}
	return nil
}
