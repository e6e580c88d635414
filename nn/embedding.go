package nn

import (
	"fmt"

	"github.com/deepgo-ml/deepgo/backend"
	"github.com/deepgo-ml/deepgo/model"
	"github.com/deepgo-ml/deepgo/tensor"
)

// Embedding is GPT-2's input layer: a token embedding Tok [Vocab, Width]
// plus a learned position embedding Pos [MaxSeq, Width]. The tables may be
// float32, float16 or bfloat16 (see Linear).
type Embedding struct {
	Vocab, MaxSeq, Width int
	Tok, Pos             *model.Param
}

// NewEmbedding declares name.wte.weight [vocab, width] and name.wpe.weight
// [maxSeq, width], the Hugging Face GPT-2 names.
func NewEmbedding(name string, vocab, maxSeq, width int) *Embedding {
	e := &Embedding{Vocab: vocab, MaxSeq: maxSeq, Width: width,
		Tok: newParam(name+".wte.weight", vocab, width), Pos: newParam(name+".wpe.weight", maxSeq, width)}
	// Before the Hugging Face names the tables were name.wte and name.wpe.
	e.Tok.Aliases = []string{name + ".wte"}
	e.Pos.Aliases = []string{name + ".wpe"}
	return e
}

// Params lists Tok then Pos.
func (e *Embedding) Params() []*model.Param { return []*model.Param{e.Tok, e.Pos} }

func (e *Embedding) check(op string, dev tensor.Device, tokens *tensor.Tensor, b, t int, grad bool) error {
	if t > e.MaxSeq {
		return fmt.Errorf("nn.%s: sequence length %d exceeds the position table's %d", op, t, e.MaxSeq)
	}
	if err := checkParams(op, dev, grad, e.Params(), []int{e.Vocab, e.Width}, []int{e.MaxSeq, e.Width}); err != nil {
		return err
	}
	return need(op, dev, "tokens", tokens, b*t, tensor.Int32)
}

// Forward computes out[b, t, :] = Tok[tokens[b, t]] + Pos[t] on be for
// int32 tokens[B, T]. A token outside [0, Vocab) is an error.
func (e *Embedding) Forward(be backend.NN, out, tokens *tensor.Tensor, b, t int) error {
	const op = "Embedding.Forward"
	dev := be.Device()
	if err := e.check(op, dev, tokens, b, t, false); err != nil {
		return err
	}
	if err := needF32(op, dev, "out", out, b*t*e.Width); err != nil {
		return err
	}
	if err := be.EncoderForward(out, tokens, e.Tok.Data, e.Pos.Data, b, t, e.Width, e.Vocab); err != nil {
		return fmt.Errorf("nn.%s: %w", op, err)
	}
	return nil
}

// Backward accumulates Tok.Grad[tokens[b, t]] += dout[b, t, :] and
// Pos.Grad[t] += dout[b, t, :]; a half-precision gradient gets one rounding
// per element per call (a repeated token's rows are summed first). A frozen
// table without a gradient bound is skipped.
func (e *Embedding) Backward(be backend.NN, dout, tokens *tensor.Tensor, b, t int) error {
	return e.backward(be, "Embedding.Backward", nil, dout, tokens, b, t)
}

// backward is Backward, except that with dtok (float32 [Vocab, Width]) the
// token table's gradient is accumulated there instead of into Tok.Grad: a
// model that uses Tok twice (tied) sums both uses in dtok and adds the total
// into Tok.Grad once.
func (e *Embedding) backward(be backend.NN, op string, dtok, dout, tokens *tensor.Tensor, b, t int) error {
	dev := be.Device()
	if err := e.check(op, dev, tokens, b, t, true); err != nil {
		return err
	}
	if err := needF32(op, dev, "dout", dout, b*t*e.Width); err != nil {
		return err
	}
	tok, pos := gradOf(e.Tok), gradOf(e.Pos)
	var err error
	switch {
	case dtok == nil && tok == nil && pos == nil:
		// both tables frozen: nothing to accumulate
	case dtok == nil:
		err = be.EncoderBackward(tok, pos, dout, tokens, b, t, e.Width, e.Vocab)
	default:
		if err := needF32(op, dev, "token gradient", dtok, e.Vocab*e.Width); err != nil {
			return err
		}
		// two calls: the tables' gradients share one dtype per call
		err = be.EncoderBackward(dtok, nil, dout, tokens, b, t, e.Width, e.Vocab)
		if err == nil && pos != nil {
			err = be.EncoderBackward(nil, pos, dout, tokens, b, t, e.Width, e.Vocab)
		}
	}
	if err != nil {
		return fmt.Errorf("nn.%s: %w", op, err)
	}
	return nil
}
