package main

import (
	"context"
	_ "embed"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/deepgo-ml/deepgo/backend"
	"github.com/deepgo-ml/deepgo/internal/benchutil"
	"github.com/deepgo-ml/deepgo/optim"
	"github.com/deepgo-ml/deepgo/tensor"
)

// peerScript times the peers for one round and thread count (peer.py).
//
//go:embed peer.py
var peerScript string

// peerTiming is one optimizer's timing in peer.py.
type peerTiming struct {
	Best   float64 `json:"best_s"`
	Median float64 `json:"median_s"`
	Busy   float64 `json:"busy_threads"`
}

// peerRound is peer.py's output.
type peerRound struct {
	Torch        string `json:"torch"`
	DeepSpeed    string `json:"deepspeed"`
	TorchThreads int    `json:"torch_threads"`
	TorchMode    string `json:"torch_adamw_mode"`
	Results      []struct {
		Params    int        `json:"params"`
		DeepSpeed peerTiming `json:"deepspeed"`
		Torch     peerTiming `json:"torch"`
	} `json:"results"`
}

// peerResult compares one size and thread count: each rate is the median
// over rounds of the round's best step.
type peerResult struct {
	Params          int     `json:"params"`
	Threads         int     `json:"threads"`
	Ours            float64 `json:"deepgo_params_per_s"`
	DeepSpeed       float64 `json:"deepspeed_params_per_s"`
	Torch           float64 `json:"torch_params_per_s"`
	OursVsDeepSpeed float64 `json:"deepgo_over_deepspeed"`
	OursVsTorch     float64 `json:"deepgo_over_torch"`
	RoofGBps        float64 `json:"update_roof_GB_s"`
	OursOfRoof      float64 `json:"deepgo_fraction_of_roof"`
	DeepSpeedOfRoof float64 `json:"deepspeed_fraction_of_roof"`
	// RoundRatios is ours over DeepSpeed within each round (the two ran
	// seconds apart); its median and minimum show how much of the
	// comparison is the machine's drift between rounds.
	RoundRatios      []float64 `json:"deepgo_over_deepspeed_rounds"`
	RoundRatioMedian float64   `json:"deepgo_over_deepspeed_round_median"`
	RoundRatioMin    float64   `json:"deepgo_over_deepspeed_round_min"`
	OursBusy         float64   `json:"deepgo_busy_threads"`
	DeepSpeedBusy    float64   `json:"deepspeed_busy_threads"`
	TorchBusy        float64   `json:"torch_busy_threads"`
}

// peerReport is the "peer" object of the JSON.
type peerReport struct {
	Method    string       `json:"method"`
	Torch     string       `json:"torch"`
	DeepSpeed string       `json:"deepspeed"`
	TorchMode string       `json:"torch_adamw"`
	Rounds    int          `json:"rounds"`
	Results   []peerResult `json:"results"`
}

// peerSamples gathers one size and thread count's per-round rates.
type peerSamples struct{ ours, roof, ds, torch, oursBusy, dsBusy, torchBusy []float64 }

// runPeers times our fp32 AdamW step, its roof and the peers (DeepSpeed's
// CPU Adam and PyTorch's AdamW, in one peer.py process per round and thread
// count) on the same sizes, interleaved: each round runs, per thread count,
// the roof and our step alternately reps times per size, then the peers.
// Without the peers' venv it returns ErrNoPeers's text and times nothing.
func runPeers(ctx context.Context, sizes []int, reps, rounds int) (any, error) {
	py, err := benchutil.PeerPython()
	if err != nil {
		return err.Error(), nil
	}
	type buf struct{ p, g *tensor.Tensor }
	bufs := make([]buf, len(sizes))
	for i, n := range sizes {
		var ts [2]*tensor.Tensor
		for j, numel := range []int{n, n} {
			if ts[j], err = tensor.Empty(tensor.Float32, numel); err != nil {
				return nil, err
			}
			defer ts[j].Free()
			fill(ts[j], 1)
		}
		bufs[i] = buf{ts[0], ts[1]}
	}
	rep := peerReport{Rounds: rounds, Method: "per round and thread count: for each size the update roof (the step's 28 B/param of traffic, no math) and deepgo's fp32 AdamW alternately " +
		strconv.Itoa(reps) + " times (best kept), then one python process timing DeepSpeedCPUAdam(adamw_mode=True) and torch.optim.AdamW " +
		"on one fp32 parameter of that size (one warm-up step, then the best of " + strconv.Itoa(reps) +
		" steps, perf_counter around step()); rates are medians over rounds; busy_threads = CPU seconds / wall seconds " +
		"of the timed section (ours: with the roof and the set-up; below the threads asked for: the machine was shared); deepgo_over_deepspeed_rounds: ours over DeepSpeed within each round; lr 1e-4, betas (0.9, 0.999), eps 1e-8, weight_decay 0.01"}
	samples := map[[2]int]*peerSamples{}
	threads := []int{1, 2}
	for round := 0; round < rounds; round++ {
		for _, th := range threads {
			for i, n := range sizes {
				b := bufs[i]
				s := samples[[2]int{n, th}]
				if s == nil {
					s = &peerSamples{}
					samples[[2]int{n, th}] = s
				}
				c0, t0 := benchutil.CPUTime(), time.Now()
				step, roofT, err := oursAndRoof(b.p, b.g, th, reps)
				if err != nil {
					return nil, err
				}
				s.oursBusy = append(s.oursBusy, (benchutil.CPUTime()-c0).Seconds()/time.Since(t0).Seconds())
				s.ours = append(s.ours, float64(n)/step.Seconds())
				s.roof = append(s.roof, 28*float64(n)/roofT.Seconds()/1e9)
			}
			var pr peerRound
			args := []string{strconv.Itoa(th), strconv.Itoa(reps)}
			for _, n := range sizes {
				args = append(args, strconv.Itoa(n))
			}
			if err := benchutil.RunPeer(ctx, py, peerScript, map[string]string{"OMP_NUM_THREADS": strconv.Itoa(th)}, &pr, args...); err != nil {
				return nil, err
			}
			if len(pr.Results) != len(sizes) {
				return nil, fmt.Errorf("peer.py %v: %d results, want %d", args, len(pr.Results), len(sizes))
			}
			rep.Torch, rep.DeepSpeed, rep.TorchMode = pr.Torch, pr.DeepSpeed, pr.TorchMode
			for _, r := range pr.Results {
				s := samples[[2]int{r.Params, th}]
				if s == nil {
					return nil, fmt.Errorf("peer.py %v: a result for %d params, which was not asked for", args, r.Params)
				}
				s.ds = append(s.ds, float64(r.Params)/r.DeepSpeed.Best)
				s.torch = append(s.torch, float64(r.Params)/r.Torch.Best)
				s.dsBusy = append(s.dsBusy, r.DeepSpeed.Busy)
				s.torchBusy = append(s.torchBusy, r.Torch.Busy)
			}
		}
	}
	med := benchutil.Median
	for _, th := range threads {
		for _, n := range sizes {
			s := samples[[2]int{n, th}]
			r := peerResult{Params: n, Threads: th, Ours: med(s.ours), DeepSpeed: med(s.ds), Torch: med(s.torch),
				RoofGBps: med(s.roof), OursBusy: med(s.oursBusy), DeepSpeedBusy: med(s.dsBusy), TorchBusy: med(s.torchBusy)}
			r.OursVsDeepSpeed, r.OursVsTorch = r.Ours/r.DeepSpeed, r.Ours/r.Torch
			r.RoundRatios, r.RoundRatioMedian, r.RoundRatioMin = roundRatios(s.ours, s.ds)
			// the step moves 28 B per fp32 parameter (p, g, m, v read; p, m, v written)
			r.OursOfRoof = 28 * r.Ours / 1e9 / r.RoofGBps
			r.DeepSpeedOfRoof = 28 * r.DeepSpeed / 1e9 / r.RoofGBps
			rep.Results = append(rep.Results, r)
		}
	}
	return rep, nil
}

// oursAndRoof makes a th-thread backend and AdamW, takes one untimed step
// (allocating and touching the moments), then times the step on p, g and
// the update roof on the same buffers alternately reps times; it returns
// the best of each.
func oursAndRoof(p, g *tensor.Tensor, th, reps int) (step, roof time.Duration, err error) {
	be, err := backend.NewCPU(th)
	if err != nil {
		return 0, 0, err
	}
	defer be.Close()
	o, err := optim.New("AdamW", map[string]any{"lr": 1e-4, "weight_decay": 0.01}, be)
	if err != nil {
		return 0, 0, err
	}
	defer o.Close()
	grp := optim.ParamGroup{Name: "peer", Params: []*tensor.Tensor{p}, Grads: []*tensor.Tensor{g}}
	if err := o.Step(grp, 1e-4, 1); err != nil {
		return 0, 0, err
	}
	return benchutil.Interleaved(reps, func() error { return o.Step(grp, 1e-4, 1) }, updateRoof(be, o, grp))
}

// roundRatios pairs a[i] with b[i] (one round's two rates) and returns the
// ratios with their median and minimum.
func roundRatios(a, b []float64) (r []float64, med, lo float64) {
	if len(a) != len(b) || len(a) == 0 {
		return nil, 0, 0
	}
	r = make([]float64, len(a))
	for i := range a {
		r[i] = a[i] / b[i]
	}
	return r, benchutil.Median(r), slices.Min(r)
}
