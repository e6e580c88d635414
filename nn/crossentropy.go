package nn

import (
	"fmt"

	"github.com/deepgo-ml/deepgo/csrc"
	"github.com/deepgo-ml/deepgo/model"
	"github.com/deepgo-ml/deepgo/tensor"
)

// CrossEntropy is softmax followed by the negative log-likelihood of the
// target class, averaged over rows. Softmax and loss are fused so the
// logits buffer can hold the probabilities and then their gradient.
type CrossEntropy struct {
	Vocab int
}

// Params is empty.
func (CrossEntropy) Params() []*model.Param { return nil }

// Forward writes probs[n, Vocab] = softmax(logits) (probs may be logits)
// and losses[n], and returns the mean loss. targets is int32 [n].
func (x CrossEntropy) Forward(ctx *csrc.Ctx, probs, losses, logits, targets *tensor.Tensor, n int) (float32, error) {
	const op = "CrossEntropy.Forward"
	if err := needF32(op, "probs", probs, n*x.Vocab, "losses", losses, n, "logits", logits, n*x.Vocab); err != nil {
		return 0, err
	}
	if err := need(op, "targets", targets, n, tensor.Int32); err != nil {
		return 0, err
	}
	if err := ctx.SoftmaxXentForward(probs.Ptr(), losses.Ptr(), logits.Ptr(), targets.Ptr(), n, x.Vocab); err != nil {
		return 0, fmt.Errorf("nn.%s: %w (a target outside [0, %d)?)", op, err, x.Vocab)
	}
	l, _ := losses.Float32s()
	var sum float64
	for _, v := range l[:n] {
		sum += float64(v)
	}
	if n == 0 {
		return 0, nil
	}
	return float32(sum / float64(n)), nil
}

// Backward writes dlogits[n, Vocab] = (probs - onehot(targets)) * dlosses
// per row (written, not accumulated; dlogits may be probs).
func (x CrossEntropy) Backward(ctx *csrc.Ctx, dlogits, probs, targets, dlosses *tensor.Tensor, n int) error {
	const op = "CrossEntropy.Backward"
	if err := needF32(op, "dlogits", dlogits, n*x.Vocab, "probs", probs, n*x.Vocab, "dlosses", dlosses, n); err != nil {
		return err
	}
	if err := need(op, "targets", targets, n, tensor.Int32); err != nil {
		return err
	}
	if err := ctx.SoftmaxXentBackward(dlogits.Ptr(), probs.Ptr(), targets.Ptr(), dlosses.Ptr(), n, x.Vocab); err != nil {
		return fmt.Errorf("nn.%s: %w", op, err)
	}
	return nil
}
