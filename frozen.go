package deepgo

// Frozen parameters (model.Param.Frozen, PyTorch's requires_grad=False):
// the engine keeps them itself, outside the ZeRO layout, replicated on
// every data-parallel rank in the working dtype (under tensor parallelism
// each TP rank its shard of a split one), bound with Data and a nil Grad.
// ZeRO (reduction, norm, overflow check, optimizer) sees only the
// trainable parameters, so e.params and the zero.ModuleSpecs list those
// alone, and every (module, parameter) index the engine shares with ZeRO
// counts trainable parameters only.

import (
	"context"
	"errors"
	"fmt"

	"github.com/deepgo-ml/deepgo/backend"
	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/model"
	"github.com/deepgo-ml/deepgo/tensor"
	"github.com/deepgo-ml/deepgo/zero"
)

// frozenParam is one frozen parameter: its module, the Param, and its
// value in the engine's memory (the working dtype). The pipeline engine
// also marks copy (a later holder of a weight tied across stages, or a
// second holder on the stage: not saved) and tied (several stages hold
// it; pipe_frozen.go).
type frozenParam struct {
	m          int
	p          *model.Param
	t          *tensor.Tensor
	copy, tied bool
}

// checkFrozen refuses a model with nothing left to train.
func (e *Engine) checkFrozen() error {
	if len(e.frozen) == 0 {
		return nil
	}
	trainable := 0
	for _, ps := range e.params {
		trainable += len(ps)
	}
	if trainable == 0 {
		return fmt.Errorf("deepgo.Initialize: every parameter is frozen (model.Param.Frozen on all %d): nothing to train", len(e.frozen))
	}
	return nil
}

// initFrozen copies every frozen parameter's initial value into engine
// memory in dt, as ZeRO does a trainable one's (through float32, rank 0's
// value broadcast to every rank), so that freezing a parameter keeps the
// bits its working copy would have had.
func (e *Engine) initFrozen(ctx context.Context, dt tensor.DType) error {
	for i := range e.frozen {
		f := &e.frozen[i]
		src, n := f.p.Data, numel(f.p.Shape)
		if src == nil {
			return fmt.Errorf("deepgo.Initialize: frozen parameter %s has no initial value (Param.Data is nil)", f.p.Name)
		}
		if src.Numel() != n {
			return fmt.Errorf("deepgo.Initialize: frozen parameter %s: initial value has %d elements, shape %v says %d", f.p.Name, src.Numel(), f.p.Shape, n)
		}
		t, err := e.loadFrozen(ctx, src, dt, f.p.Shape)
		if err != nil {
			return fmt.Errorf("deepgo.Initialize: frozen parameter %s: %w", f.p.Name, err)
		}
		f.t = t
	}
	return nil
}

// loadFrozen returns a new tensor of dt and shape on the engine's backend
// holding src (any float dtype, any memory) as rank 0 has it.
func (e *Engine) loadFrozen(ctx context.Context, src *tensor.Tensor, dt tensor.DType, shape []int) (*tensor.Tensor, error) {
	t, err := e.be.Empty(dt, shape...)
	if err != nil {
		return nil, err
	}
	if err := e.castVia(ctx, t, src, e.c.Size() > 1); err != nil {
		t.Free()
		return nil, err
	}
	return t, nil
}

// castInto writes src (any float dtype, any memory) into dst on the
// engine's backend, through float32 as Initialize does.
func (e *Engine) castInto(dst, src *tensor.Tensor) error {
	return e.castVia(context.Background(), dst, src, false)
}

// castVia is castInto, with bcast rank 0's float32 value broadcast to
// every rank first.
func (e *Engine) castVia(ctx context.Context, dst, src *tensor.Tensor, bcast bool) error {
	var c comm.Comm
	if bcast {
		c = e.c
	}
	return castOver(ctx, e.be, c, dst, src)
}

// castOver writes src (any float dtype, any memory) into dst on be's
// device through float32, with c (nil: none) rank 0's float32 value
// broadcast over c first (both engines).
func castOver(ctx context.Context, be backend.Backend, c comm.Comm, dst, src *tensor.Tensor) error {
	n := src.Numel()
	tmp, err := be.Empty(tensor.Float32, n)
	if err != nil {
		return err
	}
	defer tmp.Free()
	dev, err := flat(src)
	if err != nil {
		return err
	}
	if src.Device() != be.Device() {
		d, err := be.Empty(src.DType(), n)
		if err != nil {
			return err
		}
		defer d.Free()
		if err := be.Copy(d, dev); err != nil {
			return err
		}
		dev = d
	}
	if err := castFlat(be, tmp, dev); err != nil {
		return err
	}
	if c != nil {
		if err := c.Broadcast(ctx, tmp, 0); err != nil {
			return fmt.Errorf("broadcasting the initial value: %w", err)
		}
	}
	return castFlat(be, dst, tmp)
}

// frozenList is the frozen Params.
func (e *Engine) frozenList() []*model.Param {
	ps := make([]*model.Param, len(e.frozen))
	for i, f := range e.frozen {
		ps[i] = f.p
	}
	return ps
}

// bindFrozen points module m's frozen parameters at their values, with no
// gradient.
func (e *Engine) bindFrozen(m int) { bindFrozenIn(e.frozen, m) }

// bindFrozenIn points the Params of fs in module m at their values, with
// no gradient (both engines).
func bindFrozenIn(fs []frozenParam, m int) {
	for _, f := range fs {
		if f.m == m {
			f.p.Data, f.p.Grad = f.t, nil
		}
	}
}

// frozenBytesIn is the memory the values of fs take.
func frozenBytesIn(fs []frozenParam) int64 {
	var n int64
	for _, f := range fs {
		if f.t != nil {
			n += int64(f.t.Bytes())
		}
	}
	return n
}

// freeFrozen frees the frozen values (Close).
func (e *Engine) freeFrozen() error { return freeFrozenIn(e.frozen) }

// freeFrozenIn frees the values of fs, clearing them (both engines).
func freeFrozenIn(fs []frozenParam) error {
	var errs []error
	for i := range fs {
		if t := fs[i].t; t != nil {
			errs = append(errs, t.Free())
			fs[i].t = nil
		}
	}
	return errors.Join(errs...)
}

// frozenFloat32s adds the frozen parameters' values, widened to float32,
// to out (Parameters).
func (e *Engine) frozenFloat32s(out map[string][]float32) error {
	for _, f := range e.frozen {
		v, err := float32sOf(e.be, f.t)
		if err != nil {
			return fmt.Errorf("deepgo: frozen parameter %s: %w", f.p.Name, err)
		}
		out[f.p.Name] = v
	}
	return nil
}

// float32sOf reads t (any float dtype, on be's device) as float32 values.
func float32sOf(be backend.Backend, t *tensor.Tensor) ([]float32, error) {
	w, err := be.Empty(tensor.Float32, t.Numel())
	if err != nil {
		return nil, err
	}
	defer w.Free()
	if err := castFlat(be, w, t); err != nil {
		return nil, err
	}
	h, free, err := zero.ToHost(be, w)
	if err != nil {
		return nil, err
	}
	defer free()
	v, err := h.Float32s()
	if err != nil {
		return nil, err
	}
	return append([]float32(nil), v...), nil
}

// frozenMemory adds the frozen values to m (Memory).
func (e *Engine) frozenMemory(m *zero.Memory) { frozenMemoryIn(e.frozen, m) }

// frozenMemoryIn adds the values of fs to m (both engines' Memory).
func frozenMemoryIn(fs []frozenParam, m *zero.Memory) {
	n := frozenBytesIn(fs)
	m.Frozen = n
	m.Peak += n
	countLive(m, n)
}

// numel is the element count of shape.
func numel(shape []int) int {
	n := 1
	for _, d := range shape {
		n *= d
	}
	return n
}

// flat views t as 1-D.
func flat(t *tensor.Tensor) (*tensor.Tensor, error) { return t.Slice(0, t.Numel()) }

// castFlat casts src into dst, element for element, whatever their shapes.
func castFlat(be backend.Backend, dst, src *tensor.Tensor) error {
	d, err := flat(dst)
	if err != nil {
		return err
	}
	s, err := flat(src)
	if err != nil {
		return err
	}
	return be.Cast([]*tensor.Tensor{d}, []*tensor.Tensor{s})
}
