package nn

import (
	"fmt"

	"github.com/deepgo-ml/deepgo/backend"
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
// and losses[n] on be, and returns the mean loss, summed in float64 on the
// host from a copy of losses. targets is int32 [n].
func (x CrossEntropy) Forward(be backend.NN, probs, losses, logits, targets *tensor.Tensor, n int) (float32, error) {
	const op = "CrossEntropy.Forward"
	dev := be.Device()
	if err := needF32(op, dev, "probs", probs, n*x.Vocab, "losses", losses, n, "logits", logits, n*x.Vocab); err != nil {
		return 0, err
	}
	if err := need(op, dev, "targets", targets, n, tensor.Int32); err != nil {
		return 0, err
	}
	if err := be.SoftmaxXentForward(probs, losses, logits, targets, n, x.Vocab); err != nil {
		return 0, fmt.Errorf("nn.%s: %w", op, err)
	}
	l := make([]float32, n)
	if err := download(be, l, losses); err != nil {
		return 0, fmt.Errorf("nn.%s: losses: %w", op, err)
	}
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
func (x CrossEntropy) Backward(be backend.NN, dlogits, probs, targets, dlosses *tensor.Tensor, n int) error {
	const op = "CrossEntropy.Backward"
	dev := be.Device()
	if err := needF32(op, dev, "dlogits", dlogits, n*x.Vocab, "probs", probs, n*x.Vocab, "dlosses", dlosses, n); err != nil {
		return err
	}
	if err := need(op, dev, "targets", targets, n, tensor.Int32); err != nil {
		return err
	}
	if err := be.SoftmaxXentBackward(dlogits, probs, targets, dlosses, n, x.Vocab); err != nil {
		return fmt.Errorf("nn.%s: %w", op, err)
	}
	return nil
}
