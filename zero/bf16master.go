package zero

// This file holds bf16.bf16_master_weights_and_grads (Config.MasterDType
// bfloat16): the masters of this rank's shard and the gradient partitions
// the step reads are bfloat16, and the base optimizer (optim.WithBF16Master)
// updates them as DeepSpeedCPUAdam does. Without offload the masters are a
// bf16 buffer beside the bf16 parameters, which are copied from them after
// each step (DeepSpeed keeps the same two copies); with offload_optimizer
// they are the host weights that go up to the device.
//
// Checkpoints keep fp32: Master and ReadOptimizerState widen bf16 masters
// and moments exactly to float32 (a cache freed at the next Step or Close),
// and Restore rounds fp32 values to nearest even. So a checkpoint saved
// with bf16 masters loads bit for bit into bf16 masters and exactly into
// fp32 ones; one saved with fp32 masters loads into bf16 masters rounded.

import (
	"fmt"

	"github.com/deepgo-ml/deepgo/tensor"
)

// bf16Master reports whether the masters are bfloat16.
func (z *Optimizer) bf16Master() bool { return z.cfg.MasterDType == tensor.BFloat16 }

// checkMasterDType checks Config.MasterDType against the rest of cfg.
func checkMasterDType(cfg Config) error {
	switch {
	case cfg.MasterDType == tensor.Float32:
		return nil
	case cfg.MasterDType != tensor.BFloat16:
		return fmt.Errorf("zero: master dtype %v: allowed float32, bfloat16", cfg.MasterDType)
	case cfg.ModelDType != tensor.BFloat16:
		return fmt.Errorf("zero: bf16.bf16_master_weights_and_grads with model dtype %v: needs bf16.enabled", cfg.ModelDType)
	case cfg.Stage < 1:
		return fmt.Errorf("zero: bf16.bf16_master_weights_and_grads at zero_optimization.stage %d: allowed 1, 2, 3", cfg.Stage)
	case cfg.AccumDType != tensor.BFloat16:
		return fmt.Errorf("zero: bf16.bf16_master_weights_and_grads with data_types.grad_accum_dtype %v: the gradient partitions must be bf16", cfg.AccumDType)
	}
	return nil
}

// castInto writes src into dst, converting the dtype; either may be in
// host memory or on the backend's device.
func (z *Optimizer) castInto(dst, src *tensor.Tensor) error {
	if dst.DType() == src.DType() {
		return z.be.Copy(dst, src)
	}
	b := z.be
	switch {
	case src.Device() == z.be.Device():
	case z.offloaded():
		b = z.cfg.HostOffload
	default: // host source, device backend: convert on the device
		s, err := z.be.Empty(src.DType(), src.Numel())
		if err != nil {
			return err
		}
		defer s.Free()
		if err := z.be.Copy(s, src); err != nil {
			return err
		}
		src = s
	}
	tmp, err := b.Empty(dst.DType(), dst.Numel())
	if err != nil {
		return err
	}
	defer tmp.Free()
	if err := b.Cast([]*tensor.Tensor{tmp}, []*tensor.Tensor{src}); err != nil {
		return err
	}
	return z.be.Copy(dst, tmp)
}

// widen returns a float32 copy of the bfloat16 t where t lives.
func (z *Optimizer) widen(t *tensor.Tensor) (*tensor.Tensor, error) {
	if t.Device().IsCPU() {
		out, err := tensor.Empty(tensor.Float32, t.Numel())
		if err != nil {
			return nil, err
		}
		in, err := t.Uint16s()
		if err != nil {
			out.Free()
			return nil, err
		}
		o, _ := out.Float32s()
		for i, h := range in {
			o[i] = tensor.BFloat16ToFloat32(h)
		}
		return out, nil
	}
	out, err := z.be.Empty(tensor.Float32, t.Numel())
	if err != nil {
		return nil, err
	}
	if err := z.be.Cast([]*tensor.Tensor{out}, []*tensor.Tensor{t}); err != nil {
		out.Free()
		return nil, err
	}
	return out, nil
}

// widenState replaces every bfloat16 tensor of st by a float32 copy kept
// in the state cache (freeStateCache frees it).
func (z *Optimizer) widenState(st map[string][]*tensor.Tensor) (map[string][]*tensor.Tensor, error) {
	out := make(map[string][]*tensor.Tensor, len(st))
	for name, ts := range st {
		out[name] = make([]*tensor.Tensor, len(ts))
		for i, t := range ts {
			if t == nil || t.DType() != tensor.BFloat16 {
				out[name][i] = t
				continue
			}
			w, err := z.widen(t)
			if err != nil {
				return nil, fmt.Errorf("zero: widening state %q[%d]: %w", name, i, err)
			}
			z.widened = append(z.widened, w)
			out[name][i] = w
		}
	}
	return out, nil
}

// freeMasterCache frees Master's float32 copies (the masters change).
func (z *Optimizer) freeMasterCache() {
	for u, t := range z.masterW {
		if t != nil {
			t.Free()
			z.masterW[u] = nil
		}
	}
}

// mirror copies the stepped bf16 masters of sg to the model's parameters
// (without offload the masters are a buffer of their own).
func (z *Optimizer) mirror(sg *subGroup) error {
	for i, dst := range sg.mirror {
		if err := z.be.Copy(dst, sg.params[i]); err != nil {
			return fmt.Errorf("zero: copying bf16 masters to the parameters: %w", err)
		}
	}
	return nil
}
