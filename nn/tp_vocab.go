package nn

// The vocabulary-parallel ends of a TP GPT: each rank's wte shard holds
// the rows of token ids [lo, lo+V/n). The embedding looks up the tokens it
// holds (zero rows for the others) and all-reduces, so every token's row
// and its position row arrive once. The tied head computes only its
// logits slice, and the cross-entropy combines the slices through three
// all-reduces of per-row scalars (max, sum of exponentials, target logit),
// never gathering the [N, V] logits. The row work is the backend's
// (backend.VocabParallel: the row mask, the max, the exponentials and
// their sums, the gradient), on the activations where they live, so on a
// device neither the logits nor the embedding's rows visit the host: only
// the token ids go in, and 2N per-row scalars come out for the loss.

import (
	"fmt"
	"math"

	"github.com/deepgo-ml/deepgo/backend"
	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/tensor"
)

// tpTokens validates ids and writes, in the group's host buffer, the ids
// remapped to this rank's shard (0 for a token held elsewhere) followed by
// the ids themselves (which say what clearRows clears), and copies both to
// the device on a device backend.
func (g *GPT) tpTokens(ids []int32) error {
	s := g.tp
	lo, v := g.vocabRange()
	n := len(ids)
	if s.tokens == nil || s.tokens.Numel() != 2*n {
		if s.tokens != nil {
			s.tokens.Free()
		}
		t, err := tensor.Empty(tensor.Int32, 2*n)
		if err != nil {
			return err
		}
		s.tokens = t
	}
	both, err := s.tokens.Int32s()
	if err != nil {
		return err
	}
	local := both[:n]
	for i, id := range ids {
		if id < 0 || int(id) >= g.Config.Vocab {
			return fmt.Errorf("nn.GPT.Forward: token %d at %d: outside the vocabulary [0, %d)", id, i, g.Config.Vocab)
		}
		local[i] = 0
		if j := int(id) - lo; j >= 0 && j < v {
			local[i] = int32(j)
		}
	}
	copy(both[n:], ids)
	if !onDevice(s.be) {
		return nil
	}
	d, err := scratchOn(s.be, &s.devTokens, tensor.Int32, 2*n)
	if err != nil {
		return err
	}
	if d, err = d.Slice(0, 2*n); err != nil {
		return err
	}
	if err := s.be.Copy(d, s.tokens); err != nil {
		return fmt.Errorf("nn.GPT.Forward: remapped tokens: %w", err)
	}
	return nil
}

// tokenIDs is tpTokens's buffer where the kernels read it: the host
// buffer on the CPU backend, its device copy on a device.
func (s *tpState) tokenIDs() *tensor.Tensor {
	if onDevice(s.be) {
		return s.devTokens
	}
	return s.tokens
}

// localTokens is the remapped ids (where the kernels read them).
func (s *tpState) localTokens() *tensor.Tensor {
	n := s.tokens.Numel() / 2
	v, _ := s.tokenIDs().Slice(0, n)
	return v
}

// clearRows zeroes the rows of x[N, C] whose token this rank does not
// hold, with the backend's row mask.
func (g *GPT) clearRows(k backend.NN, x *tensor.Tensor) error {
	n := g.tp.tokens.Numel() / 2
	ids, err := g.tp.tokenIDs().Slice(n, n)
	if err != nil {
		return err
	}
	lo, v := g.vocabRange()
	if err := k.VocabClearRows(x, ids, n, g.Config.Width, lo, v); err != nil {
		return fmt.Errorf("nn.GPT: vocabulary-parallel embedding: %w", err)
	}
	return nil
}

// tpEmbedForward writes out[N, C] = wte[ids] + wpe[t], the rows summed
// over the group.
func (g *GPT) tpEmbedForward(k backend.NN, out *tensor.Tensor, ids []int32, b, t int) error {
	if err := g.tpTokens(ids); err != nil {
		return err
	}
	e := g.Embed
	if err := checkParams("Embedding.Forward", k.Device(), false, e.Params(), []int{e.Vocab, e.Width}, []int{e.MaxSeq, e.Width}); err != nil {
		return err
	}
	sum := out
	if g.tp.seqOn() {
		sum = g.st.scratch.Proj // [N, C]; out is this rank's sequence shard
	}
	pos, err := g.positions(e.Pos.Data, t) // a Ulysses shard's rows
	if err != nil {
		return err
	}
	if err := k.EncoderForward(sum, g.tp.localTokens(), e.Tok.Data, pos, b, t, e.Width, e.Vocab); err != nil {
		return fmt.Errorf("nn.Embedding.Forward: %w", err)
	}
	// the holder of a token contributes its row and the position row
	if err := g.clearRows(k, sum); err != nil {
		return err
	}
	if g.tp.seqOn() {
		return g.tp.scatterSeq(out, sum, b, t, e.Width)
	}
	return g.tp.allReduce(out, b*t*e.Width, comm.Sum)
}

// tpEmbedBackward adds the position gradient (every row, the same on every
// rank) into wpe's and the held rows' token gradient into dtok; spare is an
// [N, C] buffer it may overwrite.
func (g *GPT) tpEmbedBackward(k backend.NN, dtok, dout, spare *tensor.Tensor, b, t int) error {
	e := g.Embed
	if err := checkParams("Embedding.Backward", k.Device(), true, e.Params(), []int{e.Vocab, e.Width}, []int{e.MaxSeq, e.Width}); err != nil {
		return err
	}
	if g.tp.seqOn() {
		// dout is this rank's sequence shard: every rank gathers the whole
		// gradient, so wpe's stays the same on every rank
		full := g.st.scratch.Proj
		if err := g.tp.gatherSeq(full, dout, b, t, e.Width); err != nil {
			return err
		}
		dout, spare = full, g.st.scratch.DLN
	}
	// a frozen table (model.Param.Frozen: dtok or Pos.Grad nil) is skipped
	if pg := gradOf(e.Pos); pg != nil {
		pos, err := g.positions(pg, t)
		if err != nil {
			return err
		}
		if err := k.EncoderBackward(nil, pos, dout, g.tp.localTokens(), b, t, e.Width, e.Vocab); err != nil {
			return fmt.Errorf("nn.Embedding.Backward: %w", err)
		}
	}
	if dtok == nil {
		return nil
	}
	if err := copyF32(k, spare, dout, b*t*e.Width); err != nil {
		return err
	}
	if err := g.clearRows(k, spare); err != nil {
		return err
	}
	if err := k.EncoderBackward(dtok, nil, spare, g.tp.localTokens(), b, t, e.Width, e.Vocab); err != nil {
		return fmt.Errorf("nn.Embedding.Backward: %w", err)
	}
	return nil
}

// tpXent is the vocabulary-parallel cross-entropy of logits[n, V/size]
// against targets[n]: it returns the mean loss (the same on every rank)
// and leaves in logits the gradient of gradScale × that mean. The rows
// stay where they are (the backend's VocabParallel kernels); only the
// per-row scalars move: all-reduced over the group in the device's memory
// and, for the loss, 2n of them copied to the host.
func (g *GPT) tpXent(k backend.NN, logits, targets *tensor.Tensor, n int, gradScale float64) (float64, error) {
	lo, v := g.vocabRange()
	s := g.tp
	red, err := scratchOn(s.be, &s.xent, tensor.Float32, 3*n) // max | sum exp | target logit
	if err != nil {
		return 0, err
	}
	mx, se, tl, tail, err := xentSlices(red, n)
	if err != nil {
		return 0, err
	}
	if err := k.VocabXentMax(mx, logits, n, v); err != nil {
		return 0, fmt.Errorf("nn.GPT.Loss: %w", err)
	}
	if err := s.allReduce(red, n, comm.Max); err != nil {
		return 0, err
	}
	if err := k.VocabXentExp(logits, se, tl, mx, targets, n, v, lo, g.Config.Vocab); err != nil {
		return 0, fmt.Errorf("nn.GPT.Loss: %w", err)
	}
	if err := s.allReduce(tail, 2*n, comm.Sum); err != nil {
		return 0, err
	}
	host := make([]float32, 2*n)
	if err := download(k, host, tail); err != nil {
		return 0, fmt.Errorf("nn.GPT.Loss: the loss's sums: %w", err)
	}
	var loss float64
	for i, sum := range host[:n] {
		// -log softmax(target) = log sum exp(z - max) - (target - max)
		loss += float64(float32(math.Log(float64(sum)) - float64(host[n+i])))
	}
	// the gradient replaces the logits where the head's backward reads them
	if err := k.VocabXentGrad(logits, se, targets, float32(gradScale/float64(n)), n, v, lo); err != nil {
		return 0, fmt.Errorf("nn.GPT.Loss: %w", err)
	}
	return loss / float64(n), nil
}

// xentSlices views red's per-row scalars: the maxes, sums and target
// logits of n rows, and the last two together.
func xentSlices(red *tensor.Tensor, n int) (mx, se, tl, tail *tensor.Tensor, err error) {
	if mx, err = red.Slice(0, n); err != nil {
		return
	}
	if se, err = red.Slice(n, n); err != nil {
		return
	}
	if tl, err = red.Slice(2*n, n); err != nil {
		return
	}
	tail, err = red.Slice(n, 2*n)
	return
}
