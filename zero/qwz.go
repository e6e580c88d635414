package zero

// This file holds ZeRO++ qwZ (zero_optimization.zero_quantized_weights):
// stage-3 gathers move int8 weights and one float32 scale per group instead
// of the model dtype, as DeepSpeed 0.19.8's all_gather_coalesced(quantize=
// True) does. Each rank quantizes its partition of a unit (DeepSpeed: the
// concatenation of a module's ds_tensors) in QuantGroups groups, all-gathers
// the int8 values and the scales, and dequantizes the gathered bytes into
// the unit's model-dtype buffer. Masters, gradients and the shard itself
// are untouched: only what forward and backward compute with changes.

import (
	"context"
	"errors"
	"fmt"

	"github.com/deepgo-ml/deepgo/backend"
	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/tensor"
)

// qwzTargetGroup is CUDAQuantizer.target_group_size.
const qwzTargetGroup = 8000

// QuantGroups is the number of quantization groups DeepSpeed's
// CUDAQuantizer.quantize picks for a partition of n elements: the fewest
// groups of at most about 8000 elements such that n is a multiple of
// 8×groups, doubled while that stays true and groups exceed 8000 elements.
// Its assertions are errors: n must be a multiple of 8, a group must stay
// under 16000 elements, and there must be more elements than groups.
func QuantGroups(n int) (int, error) {
	if n <= 0 {
		return 0, fmt.Errorf("a partition of %d elements cannot be quantized", n)
	}
	g := (n + qwzTargetGroup - 1) / qwzTargetGroup
	for g < n {
		if n%(8*g) == 0 {
			break
		}
		g++
	}
	for n%(16*g) == 0 && float64(n)/float64(g) > qwzTargetGroup {
		g *= 2
	}
	switch {
	case n%(8*g) != 0:
		return 0, fmt.Errorf("quantized weights need a partition whose size is a multiple of 8; %d cannot be divided by 8*%d", n, g)
	case float64(n)/float64(g) >= 16000:
		return 0, fmt.Errorf("partition of %d elements in %d groups: a group of %d elements is larger than 16k", n, g, n/g)
	case n <= g:
		return 0, fmt.Errorf("adaptive grouping cannot find a group size for a partition of %d elements", n)
	}
	return g, nil
}

// qwzAlign pads stage-3 chunks to a multiple of 8 elements under qwZ: the
// quantizer needs a partition of a multiple of 8 (DeepSpeed asserts it of
// each coalesced partition). Checkpoints do not depend on the padding
// (they reshard across it), so a run may switch qwZ on or off across a
// save and load.
func qwzAlign(cfg *Config) {
	if !cfg.QuantizedWeights || cfg.Stage != 3 {
		return
	}
	a, b := cfg.Align, 8
	for b != 0 {
		a, b = b, a%b
	}
	cfg.Align = cfg.Align / a * 8
}

// qwz is the Optimizer's quantized-gather state.
type qwz struct {
	quant  backend.Quantizer
	groups []int        // per unit: QuantGroups of its chunk
	warm   map[int]bool // persistent units gathered once (quantized) already
	stats  QwZStats
}

// QwZStats counts what qwZ did: gathers that went quantized, and the bytes
// those moved (int8 values and scales, this rank's share) against what the
// model dtype would have moved.
type QwZStats struct {
	Gathers            int64
	SentBytes, Unquant int64
}

// QwZ reports qwZ's counters (zero when zero_quantized_weights is off).
func (z *Optimizer) QwZ() QwZStats {
	if z.qwz == nil {
		return QwZStats{}
	}
	return z.qwz.stats
}

// openQwZ prepares qwZ when cfg.QuantizedWeights is set: stage 3 only (at
// stages 0-2 the engine warns and leaves it unset, as DeepSpeed hands the
// key to its stage-3 optimizer only), on a backend with a Quantizer, and
// every unit's chunk must be groupable as DeepSpeed's quantizer requires.
func (z *Optimizer) openQwZ() error {
	if !z.cfg.QuantizedWeights {
		return nil
	}
	if z.cfg.Stage != 3 {
		return fmt.Errorf("zero: zero_optimization.zero_quantized_weights at stage %d: qwZ quantizes stage-3 gathers only", z.cfg.Stage)
	}
	q, ok := z.be.(backend.Quantizer)
	if !ok {
		return fmt.Errorf("zero: zero_optimization.zero_quantized_weights: not supported on %s: it has no int8 quantizer kernel", z.be.Name())
	}
	s := &qwz{quant: q, groups: make([]int, len(z.lay.Units)), warm: map[int]bool{}}
	for u, unit := range z.lay.Units {
		g, err := QuantGroups(unit.Chunk(z.world))
		if err != nil {
			return fmt.Errorf("zero: zero_optimization.zero_quantized_weights: unit %d (modules %v, %d elements over %d ranks): %w",
				u, z.moduleNames(unit.Modules), unit.Numel, z.world, err)
		}
		s.groups[u] = g
	}
	z.qwz = s
	return nil
}

func (z *Optimizer) moduleNames(ms []int) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = z.mods[m].Name
	}
	return out
}

// gatherAsync starts unit u's stage-3 gather of src into dst over c (the
// data-parallel group, or hpZ's group gathering secondary chunks): a plain
// all-gather, or with qwZ the quantized one (DeepSpeed quantizes the
// secondary gathers too).
func (z *Optimizer) gatherAsync(ctx context.Context, c comm.Comm, u int, dst, src *tensor.Tensor) comm.Work {
	if z.qwz == nil {
		return c.AllGatherAsync(ctx, dst, src)
	}
	return z.quantizedGather(ctx, c, u, dst, src)
}

// gatherPersistentUnit gathers persistent unit u: quantized the first time
// (DeepSpeed fetches a persistent parameter through the quantizing
// coordinator once), in the model dtype after that (its post-step and
// post-load all_gather of persistent parameters does not quantize).
func (z *Optimizer) gatherPersistentUnit(ctx context.Context, u int, dst, src *tensor.Tensor) error {
	if z.qwz == nil || z.qwz.warm[u] {
		return z.c.AllGather(ctx, dst, src)
	}
	z.qwz.warm[u] = true
	return z.quantizedGather(ctx, z.c, u, dst, src).Wait(ctx)
}

// quantizedGather quantizes src (this rank's chunk of unit u), starts the
// all-gathers of its int8 values and scales, and returns the Work whose
// Wait dequantizes them into dst.
func (z *Optimizer) quantizedGather(ctx context.Context, c comm.Comm, u int, dst, src *tensor.Tensor) comm.Work {
	s := z.qwz
	n, g, world := src.Numel(), s.groups[u], c.Size()
	w := &qwzWork{z: z, dst: dst, done: make(chan struct{})}
	if world != z.world { // an hpZ secondary chunk: groups of its own size
		var err error
		if g, err = QuantGroups(n); err != nil {
			return w.fail(fmt.Errorf("zero: qwZ: hpZ secondary chunk of unit %d: %w", u, err))
		}
	}
	bufs := []struct {
		dt tensor.DType
		n  int
		p  **tensor.Tensor
	}{{tensor.Uint8, n, &w.q}, {tensor.Float32, g, &w.s}, {tensor.Uint8, n * world, &w.qa}, {tensor.Float32, g * world, &w.sa}}
	for _, b := range bufs {
		t, err := z.gathered.get(b.dt, b.n)
		if err != nil {
			return w.fail(err)
		}
		*b.p = t
	}
	if err := s.quant.QuantizeInt8(w.q, w.s, src); err != nil {
		return w.fail(fmt.Errorf("zero: qwZ: quantizing partition of unit %d: %w", u, err))
	}
	w.wq = c.AllGatherAsync(ctx, w.qa, w.q)
	w.ws = c.AllGatherAsync(ctx, w.sa, w.s)
	go func() {
		<-w.wq.Done()
		<-w.ws.Done()
		close(w.done)
	}()
	s.stats.Gathers++
	s.stats.SentBytes += int64(n + 4*g)
	s.stats.Unquant += int64(n * dst.DType().Size())
	return w
}

// qwzWork is a quantized gather in flight: the int8 and scale all-gathers,
// then (in Wait, once) the dequantization into dst.
type qwzWork struct {
	z            *Optimizer
	dst          *tensor.Tensor
	q, s, qa, sa *tensor.Tensor
	wq, ws       comm.Work
	done         chan struct{}
	finished     bool
	err          error
}

// fail ends w with err before any collective started.
func (w *qwzWork) fail(err error) comm.Work {
	w.err, w.finished = err, true
	w.release()
	close(w.done)
	return w
}

func (w *qwzWork) release() {
	for _, t := range []**tensor.Tensor{&w.q, &w.s, &w.qa, &w.sa} {
		w.z.gathered.put(*t)
		*t = nil
	}
}

// Done is closed once both all-gathers are over; Wait then dequantizes.
func (w *qwzWork) Done() <-chan struct{} { return w.done }

// Wait waits for both all-gathers and dequantizes the gathered values into
// the unit's buffer (stream-ordered on a device, like any kernel after a
// gather). A ctx that ends first leaves it to be waited for again.
func (w *qwzWork) Wait(ctx context.Context) error {
	if w.finished {
		return w.err
	}
	e1 := w.wq.Wait(ctx)
	e2 := w.ws.Wait(ctx)
	if ctx.Err() != nil && (e1 != nil || e2 != nil) {
		select {
		case <-w.done:
		default:
			return errors.Join(e1, e2)
		}
	}
	w.finished = true
	w.err = errors.Join(e1, e2)
	if w.err == nil {
		w.err = w.z.qwz.quant.DequantizeInt8(w.dst, w.qa, w.sa)
		if w.err != nil {
			w.err = fmt.Errorf("zero: qwZ: dequantizing gathered weights: %w", w.err)
		}
	}
	w.release()
	return w.err
}
