package zero

// This file holds CPU optimizer offload on a device backend
// (offload_optimizer.device "cpu", DeepSpeed's ZeRO-Offload): the fp32
// master chunk, a host copy of the reduced gradient chunk and the optimizer
// state live in host memory; the step runs on the host backend's fused CPU
// kernels; the updated weights (model dtype) go back to the device.
//
// Gradients go down per unit as they become final (gradcopy.go): in the
// micro-step that ends with a step (SetAccumulationBoundary, from the
// engine's IsGradientAccumulationBoundary) each unit's owned chunk starts
// down with backend.CopyAsync, on the device's copy stream, right after the
// reduction that finishes it: stages 2-3 as its reduce-scatter is folded
// in during backward, stages 0-1 of one rank when backward ends, stages 0-1
// of several ranks as the boundary reduction in Overflow does each unit.
// Earlier micro-steps copy nothing: their chunks are not final. The
// overflow check and the clip norm still read the device chunks, which
// nothing writes until the step, so they see the bits the copies carry.
// Without a boundary (the pipeline engine, whose tied-weight reduction
// writes the chunks after backward) every unit starts down at Step.
//
// At Step the sub-groups go in order: each waits for the downloads of its
// units, steps on the host, and its updated weights are copied up; an
// upload returns once its source is staged, so it runs on the device while
// the host steps the next sub-group (the backends are safe for concurrent
// use). Every download has been waited for when Step, ZeroGrad (a skipped
// step) or Close returns: the host chunks may not be touched before.

// pin_memory (Config.PinHost): the buffers the copies cross with (the
// gradient chunk, the half weights) come from the device backend's
// HostEmpty, page-locked on CUDA, so its Copy runs them on its stream by
// DMA instead of staging pageable memory; aligned host memory on the
// simulated device. The master chunk and the optimizer state never cross
// and stay in the host backend's memory.

import (
	"context"
	"fmt"

	"github.com/deepgo-ml/deepgo/backend"
	"github.com/deepgo-ml/deepgo/tensor"
)

// offloaded reports whether the step runs on the host (Config.HostOffload).
func (z *Optimizer) offloaded() bool { return z.cfg.HostOffload != nil }

// stepBackend is the backend the master weights live on and the optimizer
// steps with.
func (z *Optimizer) stepBackend() backend.Backend {
	if z.offloaded() {
		return z.cfg.HostOffload
	}
	return z.be
}

// allocOffload allocates unit u's host buffers: the gradient chunk the
// step reads and, for half models, the model-dtype weights it writes
// (z.copies), remembering the device range they go to (ownParam).
func (z *Optimizer) allocOffload(u, n int, ownParam *tensor.Tensor) error {
	var err error
	host := z.cfg.HostOffload
	if z.cfg.PinHost {
		host = pinnedHost{Backend: host, dev: z.be}
	}
	if z.hostGrad[u], err = z.acct.alloc(host, CatGrads, z.cfg.AccumDType, n); err != nil {
		return err
	}
	z.upload[u] = ownParam // nil with a ParamStore
	if z.cfg.ModelDType != tensor.Float32 && !z.bf16Master() {
		// booked with the master: the host side of the weights, not a resident parameter
		if z.copies[u], err = z.acct.alloc(host, CatMaster, z.cfg.ModelDType, n); err != nil {
			return err
		}
	}
	if z.cfg.PinHost {
		z.pinned += int64(z.hostGrad[u].Bytes())
		if z.copies[u] != nil {
			z.pinned += int64(z.copies[u].Bytes())
		}
	}
	return nil
}

// pinnedHost is the host backend with the device backend's HostEmpty as
// its allocator: what allocOffload allocates from with pin_memory.
type pinnedHost struct {
	backend.Backend
	dev backend.Backend
}

func (p pinnedHost) Empty(dt tensor.DType, shape ...int) (*tensor.Tensor, error) {
	return backend.HostEmpty(p.dev, dt, shape...)
}

// freeOffload frees what allocOffload made.
func (z *Optimizer) freeOffload() {
	if !z.offloaded() {
		return
	}
	for u := range z.hostGrad {
		z.acct.free(CatGrads, z.hostGrad[u])
		if z.cfg.ModelDType != tensor.Float32 && !z.bf16Master() {
			z.acct.free(CatMaster, z.copies[u])
		}
	}
	z.pinned = 0
}

// stepOffloaded steps the sub-groups on the host. The units whose
// gradients did not start down during backward (no boundary was set) start
// now, all at once; each sub-group waits for the downloads it reads, steps,
// and its updated weights go up while the next one waits and steps. Every
// download has ended when it returns, on failure too.
func (z *Optimizer) stepOffloaded(ctx context.Context, g []*tensor.Tensor, lr, gradScale float64) (err error) {
	defer func() {
		if serr := z.settleDownloads(ctx); err == nil {
			err = serr
		}
	}()
	for u := range g {
		if z.down[u] == nil {
			if err := z.startDownload(u, g[u]); err != nil {
				return err
			}
		}
	}
	for _, sg := range z.subs {
		grads, err := z.downloaded(ctx, sg)
		if err == nil {
			err = z.stepOne(sg, grads, lr, gradScale)
		}
		if err == nil {
			err = z.uploadParts(sg.parts)
		}
		if err != nil {
			return z.subErr(sg, err)
		}
	}
	return nil
}

// downloaded waits for the gradient downloads of sg's units and returns
// views of sg's parts of the host chunks.
func (z *Optimizer) downloaded(ctx context.Context, sg *subGroup) ([]*tensor.Tensor, error) {
	for _, p := range sg.parts {
		if z.down[p.unit] == nil {
			continue // nothing owned
		}
		if err := z.down[p.unit].Wait(ctx); err != nil {
			return nil, fmt.Errorf("zero: copying the gradients of bucket %d to the host: %w", p.unit, err)
		}
	}
	return views(sg.parts, z.hostGrad)
}

// uploadParts copies the updated weights of parts (the model-dtype host
// copies, or the fp32 masters of an fp32 model) to their device ranges.
func (z *Optimizer) uploadParts(parts []subPart) error {
	if z.pstore != nil {
		return nil // the partitions live in the store: writeBack stores them after the step
	}
	src := z.copies
	if z.cfg.ModelDType == tensor.Float32 || z.bf16Master() {
		src = z.master
	}
	from, err := views(parts, src)
	if err != nil {
		return err
	}
	to, err := views(parts, z.upload)
	if err != nil {
		return err
	}
	for i := range to {
		if err := z.be.Copy(to[i], from[i]); err != nil {
			return err
		}
	}
	return nil
}

// allParts is every unit's whole owned chunk.
func (z *Optimizer) allParts() []subPart {
	parts := make([]subPart, len(z.lay.Units))
	for u := range parts {
		_, n := z.own(u)
		parts[u] = subPart{u, 0, n}
	}
	return parts
}
