package nn

import (
	"fmt"

	"github.com/deepgo-ml/deepgo/csrc"
	"github.com/deepgo-ml/deepgo/model"
	"github.com/deepgo-ml/deepgo/tensor"
)

// Embedding is GPT-2's input layer: a token embedding Tok [Vocab, Width]
// plus a learned position embedding Pos [MaxSeq, Width].
type Embedding struct {
	Vocab, MaxSeq, Width int
	Tok, Pos             *model.Param
}

// NewEmbedding declares name.wte [vocab, width] and name.wpe [maxSeq, width].
func NewEmbedding(name string, vocab, maxSeq, width int) *Embedding {
	return &Embedding{Vocab: vocab, MaxSeq: maxSeq, Width: width,
		Tok: newParam(name+".wte", vocab, width), Pos: newParam(name+".wpe", maxSeq, width)}
}

// Params lists Tok then Pos.
func (e *Embedding) Params() []*model.Param { return []*model.Param{e.Tok, e.Pos} }

func (e *Embedding) check(op string, tokens *tensor.Tensor, b, t int, grad bool) error {
	if t > e.MaxSeq {
		return fmt.Errorf("nn.%s: sequence length %d exceeds the position table's %d", op, t, e.MaxSeq)
	}
	if _, err := checkParams(op, grad, e.Params(), []int{e.Vocab, e.Width}, []int{e.MaxSeq, e.Width}); err != nil {
		return err
	}
	return need(op, "tokens", tokens, b*t, tensor.Int32)
}

// Forward computes out[b, t, :] = Tok[tokens[b, t]] + Pos[t] for int32
// tokens[B, T]. A token outside [0, Vocab) is an error.
func (e *Embedding) Forward(ctx *csrc.Ctx, out, tokens *tensor.Tensor, b, t int) error {
	const op = "Embedding.Forward"
	if err := e.check(op, tokens, b, t, false); err != nil {
		return err
	}
	if err := needF32(op, "out", out, b*t*e.Width); err != nil {
		return err
	}
	if err := ctx.EncoderForward(out.Ptr(), tokens.Ptr(), e.Tok.Data.Ptr(), e.Pos.Data.Ptr(), b, t, e.Width, e.Vocab); err != nil {
		return fmt.Errorf("nn.%s: %w (a token id outside [0, %d)?)", op, err, e.Vocab)
	}
	return nil
}

// Backward accumulates Tok.Grad[tokens[b, t]] += dout[b, t, :] and
// Pos.Grad[t] += dout[b, t, :].
func (e *Embedding) Backward(ctx *csrc.Ctx, dout, tokens *tensor.Tensor, b, t int) error {
	const op = "Embedding.Backward"
	if err := e.check(op, tokens, b, t, true); err != nil {
		return err
	}
	if err := needF32(op, "dout", dout, b*t*e.Width); err != nil {
		return err
	}
	if err := ctx.EncoderBackward(e.Tok.Grad.Ptr(), e.Pos.Grad.Ptr(), dout.Ptr(), tokens.Ptr(), b, t, e.Width, e.Vocab); err != nil {
		return fmt.Errorf("nn.%s: %w", op, err)
	}
	return nil
}
