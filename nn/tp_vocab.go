package nn

// The vocabulary-parallel ends of a TP GPT: each rank's wte shard holds
// the rows of token ids [lo, lo+V/n). The embedding looks up the tokens it
// holds (zero rows for the others) and all-reduces, so every token's row
// and its position row arrive once. The tied head computes only its
// logits slice, and the cross-entropy combines the slices through three
// all-reduces of per-row scalars (max, sum of exponentials, target logit),
// never gathering the [N, V] logits. The per-row loops read float32 host
// memory: the activations themselves on the CPU backend, host copies of
// them on a device (staged through the backend's Copy, tp_device.go).

import (
	"fmt"
	"math"

	"github.com/deepgo-ml/deepgo/backend"
	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/tensor"
)

// tpTokens remaps ids to this rank's shard (0 for a token held elsewhere)
// in the group's host buffer and records which rows are held here.
func (g *GPT) tpTokens(ids []int32) error {
	s := g.tp
	lo, v := g.vocabRange()
	if s.tokens == nil || s.tokens.Numel() != len(ids) {
		if s.tokens != nil {
			s.tokens.Free()
		}
		t, err := tensor.Empty(tensor.Int32, len(ids))
		if err != nil {
			return err
		}
		s.tokens, s.held = t, make([]bool, len(ids))
	}
	local, err := s.tokens.Int32s()
	if err != nil {
		return err
	}
	for i, id := range ids {
		if id < 0 || int(id) >= g.Config.Vocab {
			return fmt.Errorf("nn.GPT.Forward: token %d at %d: outside the vocabulary [0, %d)", id, i, g.Config.Vocab)
		}
		j := int(id) - lo
		s.held[i] = j >= 0 && j < v
		local[i] = 0
		if s.held[i] {
			local[i] = int32(j)
		}
	}
	if !onDevice(s.be) {
		return nil
	}
	d, err := scratchOn(s.be, &s.devTokens, tensor.Int32, len(ids))
	if err != nil {
		return err
	}
	if d, err = d.Slice(0, len(ids)); err != nil {
		return err
	}
	if err := s.be.Copy(d, s.tokens); err != nil {
		return fmt.Errorf("nn.GPT.Forward: remapped tokens: %w", err)
	}
	return nil
}

// localTokens is the remapped ids where the kernels read them: the host
// buffer on the CPU backend, its device copy on a device.
func (s *tpState) localTokens() *tensor.Tensor {
	if onDevice(s.be) {
		v, _ := s.devTokens.Slice(0, s.tokens.Numel())
		return v
	}
	return s.tokens
}

// clearRows zeroes the rows of x[N, C] whose token this rank does not hold.
func (g *GPT) clearRows(x *tensor.Tensor) error {
	c := g.Config.Width
	st, err := stage(g.tp.be, &g.tp.hostF, x, len(g.tp.held)*c, true)
	if err != nil {
		return err
	}
	v, err := st.host.Float32s()
	if err != nil {
		return err
	}
	for i, h := range g.tp.held {
		if !h {
			clear(v[i*c : (i+1)*c])
		}
	}
	return st.store()
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
	if err := k.EncoderForward(sum, g.tp.localTokens(), e.Tok.Data, e.Pos.Data, b, t, e.Width, e.Vocab); err != nil {
		return fmt.Errorf("nn.Embedding.Forward: %w", err)
	}
	// the holder of a token contributes its row and the position row
	if err := g.clearRows(sum); err != nil {
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
	if err := k.EncoderBackward(nil, e.Pos.Grad, dout, g.tp.localTokens(), b, t, e.Width, e.Vocab); err != nil {
		return fmt.Errorf("nn.Embedding.Backward: %w", err)
	}
	if err := copyF32(k, spare, dout, b*t*e.Width); err != nil {
		return err
	}
	if err := g.clearRows(spare); err != nil {
		return err
	}
	if err := k.EncoderBackward(dtok, nil, spare, g.tp.localTokens(), b, t, e.Width, e.Vocab); err != nil {
		return fmt.Errorf("nn.Embedding.Backward: %w", err)
	}
	return nil
}

// tpXent is the vocabulary-parallel cross-entropy of logits[n, V/size]
// against targets[n]: it returns the mean loss (the same on every rank)
// and leaves in logits the gradient of gradScale × that mean.
func (g *GPT) tpXent(logits, targets *tensor.Tensor, n int, gradScale float64) (float64, error) {
	lo, v := g.vocabRange()
	lst, err := stage(g.tp.be, &g.tp.hostF, logits, n*v, true)
	if err != nil {
		return 0, err
	}
	x, err := lst.host.Float32s()
	if err != nil {
		return 0, err
	}
	tst, err := stage(g.tp.be, &g.tp.hostI, targets, n, true)
	if err != nil {
		return 0, err
	}
	tg, err := tst.host.Int32s()
	if err != nil {
		return 0, err
	}
	red, err := tensor.Empty(tensor.Float32, 3*n) // max | sum exp | target logit
	if err != nil {
		return 0, err
	}
	defer red.Free()
	r, _ := red.Float32s()
	mx, se, tl := r[:n], r[n:2*n], r[2*n:]
	for i := 0; i < n; i++ {
		m := float32(math.Inf(-1))
		for _, z := range x[i*v : (i+1)*v] {
			m = max(m, z)
		}
		mx[i] = m
	}
	if err := g.tp.allReduce(red, n, comm.Max); err != nil {
		return 0, err
	}
	for i := 0; i < n; i++ {
		row := x[i*v : (i+1)*v]
		tl[i] = 0
		if j := int(tg[i]) - lo; j >= 0 && j < v {
			tl[i] = row[j] - mx[i]
		}
		var s float64
		for j, z := range row {
			e := float32(math.Exp(float64(z - mx[i])))
			row[j] = e
			s += float64(e)
		}
		se[i] = float32(s)
	}
	tail, _ := red.Slice(n, 2*n)
	if err := g.tp.allReduce(tail, 2*n, comm.Sum); err != nil {
		return 0, err
	}
	var loss float64
	for i := 0; i < n; i++ {
		// -log softmax(target) = log sum exp(z - max) - (target - max)
		loss += float64(float32(math.Log(float64(se[i])) - float64(tl[i])))
	}
	d := float32(gradScale / float64(n))
	for i := 0; i < n; i++ {
		row := x[i*v : (i+1)*v]
		inv := 1 / se[i]
		for j := range row {
			row[j] *= inv
		}
		if j := int(tg[i]) - lo; j >= 0 && j < v {
			row[j] -= 1
		}
		for j := range row {
			row[j] *= d
		}
	}
	// the gradient replaces the logits where the head's backward reads them
	return loss / float64(n), lst.store()
}
