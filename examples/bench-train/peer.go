package main

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"
	"time"

	"github.com/deepgo-ml/deepgo/internal/benchutil"
	"github.com/deepgo-ml/deepgo/nn"
)

// peerScript is the same GPT in PyTorch eager (peer.py).
//
//go:embed peer.py
var peerScript string

// peerRun is peer.py's output.
type peerRun struct {
	Torch        string  `json:"torch"`
	TorchThreads int     `json:"torch_threads"`
	Params       int     `json:"params"`
	TokensPerSec float64 `json:"tokens_per_s"`
	Loss         float64 `json:"loss"`
	Busy         float64 `json:"busy_threads"`
	Attention    string  `json:"attention"`
}

// peerResult compares one thread count: medians over rounds of each
// round's mean step, MFU against the run's best sgemm timing on that thread
// count.
type peerResult struct {
	Threads     int       `json:"threads"`
	Ours        float64   `json:"deepgo_tokens_per_s"`
	Torch       float64   `json:"torch_tokens_per_s"`
	OursVsTorch float64   `json:"deepgo_over_torch"`
	OursMFU     float64   `json:"deepgo_mfu"`
	TorchMFU    float64   `json:"torch_mfu"`
	OursLoss    float32   `json:"deepgo_loss"`
	TorchLoss   float64   `json:"torch_loss"`
	OursBusy    float64   `json:"deepgo_busy_threads"`
	TorchBusy   float64   `json:"torch_busy_threads"`
	OursRounds  []float64 `json:"deepgo_rounds_tokens_per_s"`
	TorchRounds []float64 `json:"torch_rounds_tokens_per_s"`
}

// peerReport is the "peer" object of the JSON.
type peerReport struct {
	Method    string       `json:"method"`
	Torch     string       `json:"torch"`
	Attention string       `json:"torch_attention"`
	Rounds    int          `json:"rounds"`
	Results   []peerResult `json:"results"`
	// Unavailable says why no peer ran (no venv); the JSON then holds it
	// in place of the report.
	Unavailable string `json:"-"`
}

// setMFU fills each result's MFUs from the run's best sgemm FLOP/s per
// thread count (known only once every round has timed its own).
func (r *peerReport) setMFU(flopsPerToken float64, peaks map[int]float64) {
	for i := range r.Results {
		x := &r.Results[i]
		x.OursMFU, x.TorchMFU = flopsPerToken*x.Ours/peaks[x.Threads], flopsPerToken*x.Torch/peaks[x.Threads]
	}
}

// peerTimeout bounds one peer.py run (PyTorch's import, a warm-up step and
// the timed steps: under a minute at the default shape on one thread), so
// that a stuck peer fails the benchmark instead of hanging it.
const peerTimeout = 10 * time.Minute

// runPeer times the GPT (checkpointing off) and the same GPT in PyTorch
// eager alternately: each round runs, per thread count, samplePeak (the
// run's peak sgemm, timed again), ours, then one peer.py process. The
// caller fills the MFUs (setMFU) once every peak is in. Without the peers'
// venv it says why in Unavailable and times nothing.
func runPeer(ctx context.Context, cfg nn.GPTConfig, p params, rounds int, in, tg []int32, samplePeak func(threads int) error) (*peerReport, error) {
	py, err := benchutil.PeerPython()
	if err != nil {
		return &peerReport{Unavailable: err.Error()}, nil
	}
	rep := peerReport{Rounds: rounds, Method: "per round and thread count: deepgo's GPT then the same GPT in PyTorch eager (fp32, one python process), " +
		"each forward+backward, the mean of " + strconv.Itoa(p.steps) + " steps after one warm-up; tokens/s are medians over rounds; " +
		"MFU = flops_per_token * tokens/s / peak_sgemm_gflops (the best sgemm timing of the run on that thread count, one per round among them); busy_threads = CPU seconds / wall seconds over the timed steps, median over rounds " +
		"(below the threads asked for: the machine was shared)"}
	for _, th := range []int{1, 2} {
		r := peerResult{Threads: th}
		var oursBusy, torchBusy []float64
		for round := 0; round < rounds; round++ {
			if err := samplePeak(th); err != nil {
				return nil, err
			}
			ours, err := bench(cfg, th, p.steps, in, tg, p.batch, p.seq)
			if err != nil {
				return nil, err
			}
			var pr peerRun
			args := []string{strconv.Itoa(th), strconv.Itoa(p.steps), strconv.Itoa(cfg.Layers), strconv.Itoa(cfg.Heads),
				strconv.Itoa(cfg.Width), strconv.Itoa(cfg.Vocab), strconv.Itoa(p.seq), strconv.Itoa(p.batch)}
			pctx, cancel := context.WithTimeout(ctx, peerTimeout)
			err = benchutil.RunPeer(pctx, py, peerScript, map[string]string{"OMP_NUM_THREADS": strconv.Itoa(th)}, &pr, args...)
			cancel()
			if err != nil {
				return nil, err
			}
			if pr.Params != cfg.NumParams() {
				return nil, fmt.Errorf("peer.py %v: the PyTorch GPT has %d parameters, deepgo's %d: not the same model", args, pr.Params, cfg.NumParams())
			}
			rep.Torch, rep.Attention = pr.Torch, pr.Attention
			r.OursRounds = append(r.OursRounds, ours.TokensPerSec)
			r.TorchRounds = append(r.TorchRounds, pr.TokensPerSec)
			r.OursLoss, r.TorchLoss = ours.Loss, pr.Loss
			oursBusy, torchBusy = append(oursBusy, ours.Busy), append(torchBusy, pr.Busy)
		}
		r.Ours, r.Torch = benchutil.Median(r.OursRounds), benchutil.Median(r.TorchRounds)
		r.OursVsTorch = r.Ours / r.Torch
		r.OursBusy, r.TorchBusy = benchutil.Median(oursBusy), benchutil.Median(torchBusy)
		rep.Results = append(rep.Results, r)
	}
	return &rep, nil
}
