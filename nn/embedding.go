package nn

import (
	"fmt"

	"github.com/deepgo-ml/deepgo/csrc"
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

func (e *Embedding) check(op string, tokens *tensor.Tensor, b, t int, grad bool) (paramTypes, error) {
	if t > e.MaxSeq {
		return paramTypes{}, fmt.Errorf("nn.%s: sequence length %d exceeds the position table's %d", op, t, e.MaxSeq)
	}
	pt, err := checkParams(op, grad, e.Params(), []int{e.Vocab, e.Width}, []int{e.MaxSeq, e.Width})
	if err != nil {
		return pt, err
	}
	return pt, need(op, "tokens", tokens, b*t, tensor.Int32)
}

// Forward computes out[b, t, :] = Tok[tokens[b, t]] + Pos[t] for int32
// tokens[B, T]. A token outside [0, Vocab) is an error.
func (e *Embedding) Forward(ctx *csrc.Ctx, out, tokens *tensor.Tensor, b, t int) error {
	const op = "Embedding.Forward"
	pt, err := e.check(op, tokens, b, t, false)
	if err != nil {
		return err
	}
	if err := needF32(op, "out", out, b*t*e.Width); err != nil {
		return err
	}
	if err := ctx.EncoderForwardMixed(out.Ptr(), tokens.Ptr(), c(pt.data), e.Tok.Data.Ptr(), e.Pos.Data.Ptr(), b, t, e.Width, e.Vocab); err != nil {
		return fmt.Errorf("nn.%s: %w (a token id outside [0, %d)?)", op, err, e.Vocab)
	}
	return nil
}

// Backward accumulates Tok.Grad[tokens[b, t]] += dout[b, t, :] and
// Pos.Grad[t] += dout[b, t, :]; a half-precision gradient gets one rounding
// per element per call (a repeated token's rows are summed first).
func (e *Embedding) Backward(ctx *csrc.Ctx, dout, tokens *tensor.Tensor, b, t int) error {
	return e.backward(ctx, "Embedding.Backward", nil, dout, tokens, b, t)
}

// backward is Backward, except that with dtok (float32 [Vocab, Width]) the
// token table's gradient is accumulated there instead of into Tok.Grad: a
// model that uses Tok twice (tied) sums both uses in dtok and adds the total
// into Tok.Grad once.
func (e *Embedding) backward(ctx *csrc.Ctx, op string, dtok, dout, tokens *tensor.Tensor, b, t int) error {
	pt, err := e.check(op, tokens, b, t, true)
	if err != nil {
		return err
	}
	if err := needF32(op, "dout", dout, b*t*e.Width); err != nil {
		return err
	}
	if dtok == nil {
		err = ctx.EncoderBackwardMixed(c(pt.grad), e.Tok.Grad.Ptr(), e.Pos.Grad.Ptr(), dout.Ptr(), tokens.Ptr(), b, t, e.Width, e.Vocab)
	} else {
		if err := needF32(op, "token gradient", dtok, e.Vocab*e.Width); err != nil {
			return err
		}
		err = ctx.EncoderBackwardMixed(csrc.F32, dtok.Ptr(), nil, dout.Ptr(), tokens.Ptr(), b, t, e.Width, e.Vocab)
		if err == nil {
			err = ctx.EncoderBackwardMixed(c(pt.grad), nil, e.Pos.Grad.Ptr(), dout.Ptr(), tokens.Ptr(), b, t, e.Width, e.Vocab)
		}
	}
	if err != nil {
		return fmt.Errorf("nn.%s: %w", op, err)
	}
	return nil
}
