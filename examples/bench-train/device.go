package main

import (
	"cmp"
	"context"
	"fmt"
	"runtime"
	"slices"
	"time"

	"github.com/deepgo-ml/deepgo/backend"
	"github.com/deepgo-ml/deepgo/internal/benchdev"
	"github.com/deepgo-ml/deepgo/nn"
	"github.com/deepgo-ml/deepgo/tensor"
)

// The device run measures the GPT's own Forward and Backward (as the CPU
// run does), not the engine's TrainBatch: TrainBatch adds the optimizer
// step, gradient reduction and loss scaling, which bench-adam measures on
// their own, and the tokens/s here must stay comparable with the CPU
// figures. Parameters and gradients are copied to device memory and bound
// to the model; activations are allocated there by the model itself.

// deviceWarmup is how many untimed rounds precede the timed ones: the
// first allocates the activations (and loads cuBLAS), the second runs warm.
const deviceWarmup = 2

// cudaPeakN is the side of the GPU's peak sgemm: large enough for cuBLAS to
// fill an H200 (1.1 TFLOP, ~20 ms), small enough to allocate anywhere.
const cudaPeakN = 8192

// deviceBackend is what a device run needs: memory and copies, the layer
// kernels, Synchronize to time queued work.
type deviceBackend interface {
	backend.Backend
	backend.NN
}

// newDeviceBackend opens dev (benchdev.Open) with the layer kernels.
func newDeviceBackend(dev tensor.Device, threads int) (deviceBackend, error) {
	b, err := benchdev.Open(dev, threads)
	if err != nil {
		return nil, err
	}
	nb, ok := b.(deviceBackend)
	if !ok {
		b.Close()
		return nil, fmt.Errorf("-device %v: backend %s has no layer kernels (backend.NN)", dev, b.Name())
	}
	return nb, nil
}

// runDevice fills out with the device's peak and the runs with and without
// activation checkpointing.
func runDevice(dev tensor.Device, p params, cfg nn.GPTConfig, flopsPerToken float64, in, tg []int32, out map[string]any) error {
	ctx := context.Background()
	threads := cmp.Or(p.threads, runtime.GOMAXPROCS(0))
	be, err := newDeviceBackend(dev, threads)
	if err != nil {
		return err
	}
	defer be.Close()
	n, how := cmp.Or(p.peakN, cpuPeakN), fmt.Sprintf("the simulated device's LinearForward: the CPU backend's OpenBLAS sgemm on its %d threads", threads)
	if dev.Kind == tensor.KindCUDA {
		n, how = cmp.Or(p.peakN, cudaPeakN), "cuBLAS SGEMM via cuda.Backend.LinearForward (CUBLAS_COMPUTE_32F_PEDANTIC: fp32 FMAs, no TF32, the math the model's matmuls use)"
	}
	pk, err := devicePeak(ctx, be, n, max(5, p.steps))
	if err != nil {
		return fmt.Errorf("peak: %w", err)
	}
	method := fmt.Sprintf("%d^3 sgemm on device tensors, %s; median of %d rounds after %d warm-up, each timed to Synchronize", n, how, max(5, p.steps), deviceWarmup)
	out["device"] = dev.String()
	out["backend"] = be.Name()
	if dev.Kind == tensor.KindSim {
		out["threads"] = threads
	}
	out["peak_method"] = method
	out["peak_gflops"] = pk / 1e9
	out["mfu_formula"] = "MFU = (6*N + 6*L*T_eff*C*2) * tokens_per_s / peak; N = params without wpe, T_eff = (T+1)/2; peak: see peak_method"
	out["timing"] = fmt.Sprintf("per round: Forward (which waits for the loss) + Backward + Synchronize; median of -steps rounds after %d warm-up", deviceWarmup)
	var runs []run
	for _, ck := range []bool{false, true} {
		c := cfg
		c.Checkpointing.Enabled = ck
		res, err := benchDevice(ctx, be, c, p.steps, in, tg, p.batch, p.seq)
		if err != nil {
			return fmt.Errorf("checkpointing %v: %w", ck, err)
		}
		if dev.Kind == tensor.KindSim {
			res.Threads = threads
		}
		res.GFLOPs = flopsPerToken * res.TokensPerSec / 1e9
		res.MFU = flopsPerToken * res.TokensPerSec / pk
		runs = append(runs, res)
	}
	out["runs"] = runs
	return nil
}

// median runs f warm-up rounds then rounds timed rounds, each ended by
// be.Synchronize (f only queues work), and returns the median duration.
func median(ctx context.Context, be backend.Backend, rounds int, f func() error) (time.Duration, error) {
	ds := make([]time.Duration, 0, rounds)
	for i := range deviceWarmup + rounds {
		t0 := time.Now()
		if err := f(); err != nil {
			return 0, err
		}
		if err := be.Synchronize(ctx); err != nil {
			return 0, err
		}
		if i >= deviceWarmup {
			ds = append(ds, time.Since(t0))
		}
	}
	slices.Sort(ds)
	return ds[len(ds)/2], nil
}

// devicePeak is the rate (FLOP/s) of out[n,n] = in[n,n] @ w[n,n]^T on the
// device, through the backend's LinearForward.
func devicePeak(ctx context.Context, be deviceBackend, n, rounds int) (float64, error) {
	host, err := tensor.Empty(tensor.Float32, n, n)
	if err != nil {
		return 0, err
	}
	defer host.Free()
	h, _ := host.Float32s()
	for j := range h {
		h[j] = float32(j%7) * 0.1
	}
	var ts [3]*tensor.Tensor
	for i := range ts {
		if ts[i], err = be.Empty(tensor.Float32, n, n); err != nil {
			return 0, err
		}
		defer ts[i].Free()
		if err := be.Copy(ts[i], host); err != nil {
			return 0, err
		}
	}
	d, err := median(ctx, be, rounds, func() error { return be.LinearForward(ts[0], ts[1], ts[2], nil) })
	if err != nil {
		return 0, err
	}
	return 2 * float64(n) * float64(n) * float64(n) / d.Seconds(), nil
}

// benchDevice times the GPT's Forward + Backward with every parameter and
// gradient in the device's memory.
func benchDevice(ctx context.Context, be deviceBackend, cfg nn.GPTConfig, steps int, in, tg []int32, B, T int) (run, error) {
	g, err := nn.NewReadyGPT(cfg, nil, 1) // host values, initialized
	if err != nil {
		return run{}, err
	}
	defer g.Free() // the host buffers and the device activations
	var onDevice []*tensor.Tensor
	defer func() {
		for _, t := range onDevice {
			t.Free()
		}
	}()
	for _, p := range g.Params() {
		v, err := be.Empty(tensor.Float32, p.Shape...)
		if err != nil {
			return run{}, fmt.Errorf("%s: %w", p.Name, err)
		}
		onDevice = append(onDevice, v)
		gr, err := be.Empty(tensor.Float32, p.Shape...)
		if err != nil {
			return run{}, fmt.Errorf("%s gradient: %w", p.Name, err)
		}
		onDevice = append(onDevice, gr)
		if err := be.Copy(v, p.Data); err != nil {
			return run{}, fmt.Errorf("%s: %w", p.Name, err)
		}
		// an engine binds its device partitions the same way (engine.go)
		p.Data, p.Grad = v, gr
	}
	var loss float32
	d, err := median(ctx, be, steps, func() error {
		if loss, err = g.Forward(be, in, tg, B, T); err != nil {
			return err
		}
		return g.Backward(be)
	})
	if err != nil {
		return run{}, err
	}
	st := g.ActivationStats()
	sec := d.Seconds()
	return run{Device: be.Device().String(), Checkpointing: cfg.Checkpointing.Enabled, TokensPerSec: float64(B*T) / sec, StepSeconds: sec,
		ActivationBytes: st.Bytes, ScratchBytes: st.ScratchBytes, Loss: loss, Rounds: steps}, nil
}
