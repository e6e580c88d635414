package main

import (
	"context"
	"fmt"
	"time"

	"github.com/deepgo-ml/deepgo/backend"
	"github.com/deepgo-ml/deepgo/internal/benchdev"
	"github.com/deepgo-ml/deepgo/internal/benchutil"
	"github.com/deepgo-ml/deepgo/optim"
	"github.com/deepgo-ml/deepgo/tensor"
)

// deviceResult is one case on a device: the step's bytes per parameter
// moved per second against the device's roof, timed alternately with it.
type deviceResult struct {
	Case          string  `json:"case"`
	Params        int     `json:"params"`
	BytesPerParam int     `json:"bytes_per_param"`
	Seconds       float64 `json:"seconds_per_step"`
	ParamsPerSec  float64 `json:"params_per_s"`
	GBps          float64 `json:"effective_GB_s"`
	RoofGBps      float64 `json:"roof_GB_s"`
	OfRoof        float64 `json:"fraction_of_roof"`
}

// deviceReport is the JSON of a device run.
type deviceReport struct {
	Device     string             `json:"device"`
	Backend    string             `json:"backend"`
	Kernels    string             `json:"optimizer_kernels"`
	Threads    int                `json:"threads,omitempty"`
	RoofMethod string             `json:"roof_method"`
	Timing     string             `json:"timing"`
	Roof       map[string]float64 `json:"roof_GB_s"`
	Results    []deviceResult     `json:"results"`
}

// roof is a device's memory roof: run moves bytes per call.
type roof struct {
	method string
	run    func() error
	bytes  float64
	free   func()
}

// deviceRoof measures what bounds the step on dev, over arrays of the
// optimizer's fp32 footprint (p, g, m, v: 16 B per parameter). On a GPU it
// is a device-to-device copy of the footprint (read 16 B, write 16 B per
// parameter): the fastest the device moves memory. On the simulated device
// it is the CPU run's roof (an in-place a += s*b over two halves of the
// footprint, 12 B per element), since its kernels are the CPU's.
func deviceRoof(be backend.Backend, n int) (*roof, error) {
	const scale = 1
	src, err := deviceFilled(be, tensor.Float32, 4*n, scale)
	if err != nil {
		return nil, err
	}
	if be.Device().Kind == tensor.KindCUDA {
		dst, err := be.Empty(tensor.Float32, 4*n)
		if err != nil {
			src.Free()
			return nil, err
		}
		return &roof{
			method: "device-to-device Backend.Copy of the optimizer's fp32 footprint (16 B/param: p, g, m, v); bytes moved = 2 x 16 B/param (read + write)",
			run:    func() error { return be.Copy(dst, src) },
			bytes:  32 * float64(n),
			free:   func() { dst.Free(); src.Free() },
		}, nil
	}
	a, _ := src.Slice(0, 2*n)
	b, _ := src.Slice(2*n, 2*n)
	return &roof{
		method: "in-place Backend.Axpy a += s*b over the optimizer's fp32 footprint (a, b: 8 B/param each; 12 B moved per element), as the cpu run",
		run:    func() error { return be.Axpy(1e-3, []*tensor.Tensor{b}, []*tensor.Tensor{a}) },
		bytes:  12 * 2 * float64(n),
		free:   func() { src.Free() },
	}, nil
}

// deviceFilled is a device tensor of n elements holding fill's values,
// copied in from the host (Go cannot write device memory).
func deviceFilled(be backend.Backend, dt tensor.DType, n int, scale float32) (*tensor.Tensor, error) {
	h, err := tensor.Empty(dt, n)
	if err != nil {
		return nil, err
	}
	defer h.Free()
	fill(h, scale)
	d, err := be.Empty(dt, n)
	if err != nil {
		return nil, err
	}
	if err := be.Copy(d, h); err != nil {
		d.Free()
		return nil, err
	}
	return d, nil
}

// runDevice times the three AdamW cases of the CPU run for each size on
// dev's optimizer kernels, each alternately with the device's roof.
func runDevice(dev tensor.Device, sizes []int, reps, threads int) (*deviceReport, error) {
	ctx := context.Background()
	be, err := benchdev.Open(dev, threads)
	if err != nil {
		return nil, err
	}
	defer be.Close()
	k, err := optim.KernelsFor(be)
	if err != nil {
		return nil, err
	}
	rep := &deviceReport{Device: dev.String(), Backend: be.Name(), Kernels: fmt.Sprintf("%T (optim.KernelsFor)", k), Roof: map[string]float64{},
		Timing: fmt.Sprintf("step and roof alternately, %d rounds after one warm-up each, each call timed to Synchronize; the best of each kept", reps)}
	if dev.Kind == tensor.KindSim {
		rep.Threads = threads
	}
	synced := func(f func() error) func() error {
		return func() error {
			if err := f(); err != nil {
				return err
			}
			return be.Synchronize(ctx)
		}
	}
	for _, n := range sizes {
		r, err := deviceRoof(be, n)
		if err != nil {
			return nil, fmt.Errorf("%dM roof: %w", n>>20, err)
		}
		rep.RoofMethod = r.method
		err = benchDeviceSize(rep, be, k, n, reps, r, synced)
		r.free()
		if err != nil {
			return nil, fmt.Errorf("%dM: %w", n>>20, err)
		}
	}
	return rep, nil
}

// benchDeviceSize appends the three cases at n parameters.
func benchDeviceSize(rep *deviceReport, be backend.Backend, k optim.Kernels, n, reps int, r *roof, synced func(func() error) func() error) error {
	key := fmt.Sprintf("%dM", n>>20)
	for _, c := range adamCases {
		g := optim.ParamGroup{Name: "shard"}
		var live []*tensor.Tensor
		add := func(dst *[]*tensor.Tensor, dt tensor.DType, scale float32) error {
			t, err := deviceFilled(be, dt, n, scale)
			if err != nil {
				return err
			}
			live = append(live, t)
			*dst = append(*dst, t)
			return nil
		}
		err := add(&g.Params, c.p, 1)
		if err == nil {
			err = add(&g.Grads, c.g, 1)
		}
		if err == nil && c.copy {
			err = add(&g.Copies, tensor.BFloat16, 0)
		}
		var d [2]time.Duration
		if err == nil {
			d, err = timeStep(be, k, g, reps, r, synced)
		}
		for _, t := range live {
			t.Free()
		}
		if err != nil {
			return fmt.Errorf("%s: %w", c.name, err)
		}
		sec, roofGBps := d[0].Seconds(), r.bytes/d[1].Seconds()/1e9
		rep.Roof[key] = max(rep.Roof[key], roofGBps)
		gbs := float64(c.bytesPerEl) * float64(n) / sec / 1e9
		rep.Results = append(rep.Results, deviceResult{Case: c.name, Params: n, BytesPerParam: c.bytesPerEl,
			Seconds: sec, ParamsPerSec: float64(n) / sec, GBps: gbs, RoofGBps: roofGBps, OfRoof: gbs / roofGBps})
	}
	return nil
}

// timeStep returns the best step and roof times of g on k, its moments in
// the device's memory (optim.New's default store on a device backend).
func timeStep(be backend.Backend, k optim.Kernels, g optim.ParamGroup, reps int, r *roof, synced func(func() error) func() error) ([2]time.Duration, error) {
	o, err := optim.New("AdamW", map[string]any{"lr": 1e-4, "weight_decay": 0.01}, be, optim.WithKernels(k))
	if err != nil {
		return [2]time.Duration{}, err
	}
	defer o.Close()
	step := synced(func() error { return o.Step(g, 1e-4, 1) })
	if err := step(); err != nil { // allocates the moments
		return [2]time.Duration{}, err
	}
	if err := synced(r.run)(); err != nil {
		return [2]time.Duration{}, err
	}
	kd, rd, err := benchutil.Interleaved(reps, step, synced(r.run))
	return [2]time.Duration{kd, rd}, err
}
