package nn

import (
	"fmt"

	"github.com/deepgo-ml/deepgo/backend"
	"github.com/deepgo-ml/deepgo/model"
	"github.com/deepgo-ml/deepgo/tensor"
)

// Attention is the parameter-free core of causal multi-head self-attention:
// softmax(q k^T / sqrt(HeadSize)) v per head, each query seeing only keys at
// or before its own position, and with Window > 0 only the last Window of
// them (itself included: Longformer/Mistral-style sliding window). The
// projections around it are Linear layers (see Block). Heads is a field, not
// derived from the width, so a tensor-parallel shard is an Attention with
// Heads/world heads over its slice of q, k, v.
type Attention struct {
	Heads, HeadSize int
	Window          int // attention_window_size; <= 0: full causal
}

// Params is empty.
func (Attention) Params() []*model.Param { return nil }

// Span is the length of one row of saved softmax weights for t tokens:
// min(Window, t), or t without a window (backend.AttentionSpan), so the
// weights a windowed layer keeps grow as T*Window, not T*T.
func (a Attention) Span(t int) int { return backend.AttentionSpan(t, a.Window) }

// Forward reads qkv[B, T, 3*Heads*HeadSize] (all heads' queries, then keys,
// then values per token) and writes out[B, T, Heads*HeadSize] and the
// softmax weights att[B, Heads, T, Span(T)], which Backward needs.
func (a Attention) Forward(be backend.NN, out, att, qkv *tensor.Tensor, b, t int) error {
	const op = "Attention.Forward"
	c := a.Heads * a.HeadSize
	if err := needF32(op, be.Device(), "out", out, b*t*c, "att", att, b*a.Heads*t*a.Span(t), "qkv", qkv, b*t*3*c); err != nil {
		return err
	}
	if err := be.AttentionForward(out, att, qkv, b, t, a.Heads, a.HeadSize, a.Window); err != nil {
		return fmt.Errorf("nn.%s: %w", op, err)
	}
	return nil
}

// Backward accumulates dqkv[B, T, 3C] from dout[B, T, C] and the saved att.
func (a Attention) Backward(be backend.NN, dqkv, dout, qkv, att *tensor.Tensor, b, t int) error {
	return a.backward(be, dqkv, dout, qkv, att, b, t, false)
}

// backwardWrite is Backward into scratch dqkv whatever it held, the bits
// of clearing it and accumulating; one call on a backend.GradWriter, Zero
// and Backward on another.
func (a Attention) backwardWrite(be backend.NN, dqkv, dout, qkv, att *tensor.Tensor, b, t int) error {
	return a.backward(be, dqkv, dout, qkv, att, b, t, true)
}

func (a Attention) backward(be backend.NN, dqkv, dout, qkv, att *tensor.Tensor, b, t int, write bool) error {
	const op = "Attention.Backward"
	c := a.Heads * a.HeadSize
	if err := needF32(op, be.Device(), "dqkv", dqkv, b*t*3*c, "dout", dout, b*t*c, "qkv", qkv, b*t*3*c, "att", att, b*a.Heads*t*a.Span(t)); err != nil {
		return err
	}
	add := func() error { return be.AttentionBackward(dqkv, dout, qkv, att, b, t, a.Heads, a.HeadSize, a.Window) }
	var err error
	if write {
		err = intoScratch(be, dqkv, func(gw backend.GradWriter) error {
			return gw.AttentionBackwardWrite(dqkv, dout, qkv, att, b, t, a.Heads, a.HeadSize, a.Window)
		}, add)
	} else {
		err = add()
	}
	if err != nil {
		return fmt.Errorf("nn.%s: %w", op, err)
	}
	return nil
}
