package deepgo_test

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/deepgo-ml/deepgo"
	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/config"
	"github.com/deepgo-ml/deepgo/data"
	"github.com/deepgo-ml/deepgo/internal/testmodel"
	"github.com/deepgo-ml/deepgo/model"
	"github.com/deepgo-ml/deepgo/monitor"
	"github.com/deepgo-ml/deepgo/nn"
	"github.com/deepgo-ml/deepgo/rundir"
	"github.com/deepgo-ml/deepgo/sim"
	"github.com/deepgo-ml/deepgo/tensor"
	"github.com/deepgo-ml/deepgo/zero"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"
)

// simDelay is the randomized-delay mode's bound per kernel: long enough to
// reorder work across ranks and streams, short enough for the tables.
const simDelay = 50 * time.Microsecond

// worldFor returns the world factory of a run's device: newWorld (the CPU
// backend over comm/local) or n simulated devices, one per rank, over a
// comm that orders collectives after each rank's stream.
func worldFor(dev string) func(ctx context.Context, n int, fn func(ctx context.Context, c comm.Comm, opts []deepgo.Option) error) error {
	switch dev {
	case "":
		return newWorld
	case "cuda":
		// every rank on GPU 0, the in-process ranks sharing it through
		// host staging (cuda.Backend.WrapComm)
		return func(ctx context.Context, n int, fn func(ctx context.Context, c comm.Comm, opts []deepgo.Option) error) error {
			return newWorld(ctx, n, func(ctx context.Context, c comm.Comm, opts []deepgo.Option) error {
				return fn(ctx, c, append(opts, deepgo.WithDevice(tensor.CUDA(0))))
			})
		}
	case "sim-option":
		// what a trainer writes: comm/local ranks, WithDevice
		return func(ctx context.Context, n int, fn func(ctx context.Context, c comm.Comm, opts []deepgo.Option) error) error {
			return newWorld(ctx, n, func(ctx context.Context, c comm.Comm, opts []deepgo.Option) error {
				return fn(ctx, c, append(opts, deepgo.WithDevice(tensor.Sim(c.Rank()))))
			})
		}
	}
	opts := sim.Options{Threads: 1, Seed: 7}
	switch dev {
	case "sim":
		opts.MaxDelay = -1 // no delays even when DEEPGO_SIM_DELAY is set
	case "sim+delay", "sim+delay+device":
		opts.MaxDelay = simDelay
	default:
		panic("unknown test device " + dev)
	}
	return func(ctx context.Context, n int, fn func(ctx context.Context, c comm.Comm, opts []deepgo.Option) error) error {
		w, err := sim.NewWorldTimeout(n, opts, 30*time.Second)
		if err != nil {
			return err
		}
		defer w.Close()
		var g errgroup.Group
		for r := range n {
			g.Go(func() error {
				c := w.Comm(r)
				o := []deepgo.Option{deepgo.WithComm(c)}
				if dev == "sim+delay+device" {
					// WithDevice beside a sim world's comm on that device:
					// the engine must compute on the comm's backend (its
					// stream orders the collectives), not a second one
					o = append(o, deepgo.WithDevice(tensor.Sim(r)))
				}
				return fn(ctx, c, o)
			})
		}
		return g.Wait()
	}
}

// bitEqualRuns requires got to be bit-for-bit want: every loss, loss scale
// and parameter element, and the skipped-step count.
func bitEqualRuns(t *testing.T, want, got *result) {
	t.Helper()
	require.Len(t, got.losses, len(want.losses), "losses")
	for i := range want.losses {
		require.Equal(t, math.Float64bits(want.losses[i]), math.Float64bits(got.losses[i]), "loss of step %d: want %v got %v", i, want.losses[i], got.losses[i])
	}
	require.Equal(t, want.scales, got.scales, "loss scales")
	require.Equal(t, want.skipped, got.skipped, "skipped steps")
	require.NoError(t, bitEqual(want.params, got.params), "parameters")
}

// deviceCases is the device tables' cases: every ZeRO stage on each of
// worlds with each of gases in fp32, and on 2 ranks fp16 with steps 2, 3
// and 7 overflowing on rank 1, bf16, fp32 and bf16 with frozen
// parameters, and (stages 1-3) bf16 master weights and optimizer states.
func deviceCases(worlds, gases []int) []run {
	overflowAt := map[int]bool{2: true, 3: true, 7: true}
	inject := func(rank int, m *testmodel.MLP, _ *deepgo.Engine, step int) {
		if rank == 1 {
			m.Layers[1].InjectInf = func() bool { return overflowAt[step] }
		}
	}
	var cases []run
	for _, stage := range []int{0, 1, 2, 3} {
		for _, world := range worlds {
			for _, gas := range gases {
				cases = append(cases, run{stage: stage, world: world, gas: gas, steps: 8})
			}
		}
		cases = append(cases,
			run{stage: stage, world: 2, gas: 2, precision: "fp16", steps: 10, hook: inject},
			run{stage: stage, world: 2, gas: 1, precision: "bf16", steps: 6},
			// frozen parameters (frozen_test.go): kept on the device outside ZeRO
			run{stage: stage, world: 2, gas: 2, steps: 6, freeze: freezeMixed},
			run{stage: stage, world: 2, gas: 1, precision: "bf16", steps: 6, freeze: freezeModule})
		if stage > 0 { // bf16 masters and moments on the device (bf16master_test.go)
			cases = append(cases, run{stage: stage, world: 2, gas: 2, precision: "bf16m", steps: 6})
		}
	}
	return cases
}

// TestDeviceEquivalence: the engine's table on the simulated device
// (memory Go may not read, kernels queued on a stream, collectives ordered
// after it), with and without randomized kernel delays, is bit-identical
// to the CPU backend: every ZeRO stage on 1, 2 and 4 ranks, gradient
// accumulation, fp16 with overflowing steps and bf16. A copy the engine
// forgot, or a read before the stream finished, fails it.
func TestDeviceEquivalence(t *testing.T) {
	cases := deviceCases([]int{1, 2, 4}, []int{1, 4})
	var table strings.Builder
	fmt.Fprintf(&table, "\n%-34s %8s %8s %10s\n", "case", "skipped", "steps", "last loss")
	for _, r := range cases {
		t.Run(r.String(), func(t *testing.T) {
			want, err := train(t, r)
			require.NoError(t, err)
			devs := []string{"sim", "sim+delay"}
			if r.gas == 1 && r.world <= 2 {
				devs = append(devs, "sim-option")
			}
			for _, dev := range devs {
				r := r
				r.dev = dev
				var mem zero.Memory
				hook := r.hook
				r.hook = func(rank int, m *testmodel.MLP, e *deepgo.Engine, step int) {
					if hook != nil {
						hook(rank, m, e, step)
					}
					if rank == 0 && step == 1 {
						mem = e.Memory()
					}
				}
				got, err := train(t, r)
				require.NoError(t, err, dev)
				bitEqualRuns(t, want, got)
				// the engine's state lived on the device, nothing in host memory
				require.Equal(t, tensor.Sim(0), mem.Device, "%s: Memory().Device", dev)
				require.Positive(t, mem.DeviceBytes, "%s: device bytes", dev)
				require.GreaterOrEqual(t, mem.DeviceBytes, mem.ParamBytes()+mem.Grads+mem.OptimizerState, "%s: device bytes", dev)
				require.Zero(t, mem.HostBytes, "%s: host bytes of engine state", dev)
			}
			fmt.Fprintf(&table, "%-34s %8d %8d %10.6f\n", r, want.skipped, len(want.losses), want.losses[len(want.losses)-1])
		})
	}
	t.Log(table.String())
}

// gptRun trains a small GPT for steps steps on world ranks of dev (ZeRO
// stage, fp32 or bf16, activation checkpointing of one block, attention
// window: 0 full) and returns rank 0's losses and final parameters.
func gptRun(t *testing.T, dev string, world, stage int, prec string, window, steps int) *result {
	t.Helper()
	const vocab, seqLen, micro = 32, 16, 4
	src, err := data.NewMarkov(vocab, 1, 2, 3)
	require.NoError(t, err)
	corpus := &data.Tokens{IDs: src.Generate(20_000, 4), Vocab: vocab}
	precJSON := ""
	if prec == "bf16" {
		precJSON = `, "bf16": {"enabled": true}`
	}
	cfgJSON := fmt.Sprintf(`{"train_micro_batch_size_per_gpu": %d, "gradient_accumulation_steps": 2, "gradient_clipping": 1.0,
		"zero_optimization": {"stage": %d, "reduce_bucket_size": 4000, "stage3_param_persistence_threshold": 100},
		"optimizer": {"type": "AdamW", "params": {"lr": 0.01, "weight_decay": 0.01}}%s}`, micro, stage, precJSON)
	res := &result{}
	err = worldFor(dev)(context.Background(), world, func(ctx context.Context, c comm.Comm, opts []deepgo.Option) error {
		cfg, err := config.Parse([]byte(cfgJSON))
		if err != nil {
			return err
		}
		g, err := nn.NewReadyGPT(nn.GPTConfig{Layers: 2, Heads: 2, Width: 32, Vocab: vocab, SeqLen: seqLen, AttentionWindow: window,
			Checkpointing: nn.Checkpointing{Enabled: true, NumberCheckpoints: 1}}, nil, 1)
		if err != nil {
			return err
		}
		defer g.Free()
		e, err := initEngine(ctx, cfg, g, opts...)
		if err != nil {
			return err
		}
		defer e.Close()
		s, err := data.NewDistributedSampler(corpus.NumWindows(seqLen), c.Rank(), c.Size(), 5, true)
		if err != nil {
			return err
		}
		for range steps {
			mbs := make([]model.MicroBatch, 2)
			for i := range mbs {
				mbs[i] = corpus.MakeBatch(s.Next(micro), seqLen).MicroBatch()
			}
			loss, err := e.TrainBatch(ctx, mbs)
			if err != nil {
				return err
			}
			if c.Rank() == 0 {
				res.losses = append(res.losses, loss)
				res.scales = append(res.scales, e.LossScale())
			}
		}
		p, err := e.Parameters(ctx)
		if err != nil {
			return err
		}
		if c.Rank() == 0 {
			res.params = p
		}
		return nil
	})
	require.NoError(t, err, "%s world %d stage %d %s window %d", devName(dev), world, stage, prec, window)
	return res
}

// TestGPTOnDevice: the GPT (every nn kernel, activation checkpointing,
// tied embeddings) trains 50 steps on the simulated device with kernel
// delays, bit-identical to the CPU backend, under ZeRO-2 on 2 ranks in fp32
// (full attention and a 5-token sliding window) and ZeRO-3 in bf16; and the
// loss falls.
func TestGPTOnDevice(t *testing.T) {
	for _, c := range []struct {
		world, stage int
		prec         string
		window       int
	}{{2, 2, "", 0}, {2, 2, "", 5}, {2, 3, "bf16", 0}} {
		t.Run(fmt.Sprintf("world%d/stage%d/%s/window%d", c.world, c.stage, c.prec, c.window), func(t *testing.T) {
			want := gptRun(t, "", c.world, c.stage, c.prec, c.window, 50)
			got := gptRun(t, "sim+delay", c.world, c.stage, c.prec, c.window, 50)
			bitEqualRuns(t, want, got)
			require.Less(t, want.losses[49], want.losses[0]*0.8, "the loss falls: %v", want.losses)
			t.Logf("loss %.4f -> %.4f, bit-identical on sim", want.losses[0], want.losses[49])
		})
	}
}

// On the simulated device the engine's memory is out of Go's reach: a
// trainer reading a parameter's bound tensor directly gets an error (the
// same read on the CPU succeeds), and reads it through Parameters instead.
func TestDeviceMemoryRefusesHostReads(t *testing.T) {
	cfg, err := config.Parse([]byte(`{"train_micro_batch_size_per_gpu": 2, "optimizer": {"type": "SGD", "params": {"lr": 0.1}}}`))
	require.NoError(t, err)
	for _, dev := range []tensor.Device{tensor.CPU, tensor.Sim(0)} {
		m := testmodel.NewMLP(1, 4, 3)
		e, err := initEngine(context.Background(), cfg, m, deepgo.WithDevice(dev))
		require.NoError(t, err, "%v", dev)
		w := m.Layers[0].Params()[0]
		_, err = w.Data.Float32s()
		if dev.IsCPU() {
			require.NoError(t, err, "host read on the CPU")
		} else {
			require.ErrorContains(t, err, "not in host memory", "host read of %v memory", dev)
			_, err = w.Grad.Float32s()
			require.ErrorContains(t, err, "not in host memory", "host read of a %v gradient", dev)
		}
		p, err := e.Parameters(context.Background())
		require.NoError(t, err)
		require.Len(t, p[w.Name], 12, "Parameters copies %s to the host", w.Name)
		require.NoError(t, e.Close())
	}
}

// A trainer that only calls Initialize and TrainBatch gets the config's
// csv_monitor files, on the simulated device too, and the engine's NaN/Inf
// check (a collective over each rank's master shard) runs at the interval
// WithMonitorOptions sets.
func TestEngineMonitorFromConfig(t *testing.T) {
	for _, dev := range []string{"", "sim"} {
		out := t.TempDir()
		r := run{stage: 2, world: 2, gas: 1, steps: 4, dev: dev,
			extra: fmt.Sprintf(`, "csv_monitor": {"enabled": true, "output_path": %q, "job_name": "job"}`, out)}
		r.opts = []deepgo.Option{deepgo.WithMonitorOptions(monitor.WithFiniteCheck(2, nil))}
		got, err := train(t, r)
		require.NoError(t, err, devName(dev))
		run, err := rundir.Read(filepath.Join(out, "job"))
		require.NoError(t, err, devName(dev))
		loss := run.Series[monitor.TagLoss]
		require.NotNil(t, loss, "%s: %s", devName(dev), monitor.TagLoss)
		require.Len(t, loss.Steps, 4, devName(dev))
		for i, v := range loss.Values {
			assert.InDelta(t, got.losses[i], v, 1e-12, "%s: step %d loss", devName(dev), i+1)
		}
		nf := run.Series[monitor.TagNonfinite]
		require.NotNil(t, nf, "%s: %s", devName(dev), monitor.TagNonfinite)
		assert.Equal(t, []float64{0, 0}, nf.Values, "%s: NaN/Inf checks at steps 2 and 4", devName(dev))
	}
}

// TestSimWorldWithDevice: a sim world's comm given with WithDevice for the
// same device trains bit-identical to the CPU in both engines. (It once
// made a second backend for the device, whose kernels the comm's
// collectives were not ordered after: random wrong gradients.)
func TestSimWorldWithDevice(t *testing.T) {
	r := run{stage: 2, world: 2, gas: 2, steps: 6}
	want, err := train(t, r)
	require.NoError(t, err)
	r.dev = "sim+delay+device"
	got, err := train(t, r)
	require.NoError(t, err)
	bitEqualRuns(t, want, got)

	c := pipeDevCase{pp: 2, dp: 1, gas: 2, sched: "1F1B", virtual: 1}
	pwant, err := pipeDevRun(t, "", c, 3)
	require.NoError(t, err)
	pgot, err := pipeDevRun(t, "sim+delay+device", c, 3)
	require.NoError(t, err)
	bitEqualRuns(t, &pwant.result, &pgot.result)
}

// TestDeviceOptionFollowsRankThreads: WithDevice makes the device's
// backend with the thread count of the rank's CPU pool (comm/local's
// Options.Threads, 1 here), so a one-rank GPT run on sim gives the CPU's
// bits on any machine; it once took GOMAXPROCS threads, whose blocking
// changed the last bits.
func TestDeviceOptionFollowsRankThreads(t *testing.T) {
	want := gptRun(t, "", 1, 2, "", 0, 4)
	got := gptRun(t, "sim-option", 1, 2, "", 0, 4)
	bitEqualRuns(t, want, got)
}

// The key third of an attention's c_attn.bias adds q . b_k to every score
// of query q, the same for all its keys, and softmax ignores that: its
// gradient is zero but for rounding (1e-9 against the value bias's 1e-1,
// nn's TestKeyBiasGradientIsNoise). Adam normalises that noise into full
// lr-sized steps of arbitrary sign, so two backends that round differently
// (cuBLAS and OpenBLAS) drift apart there and only there. Runs that compare
// different arithmetic compare the rest (withoutKeyBias) and report the key
// biases (keyBiases) without a bound.
const keyBiasSuffix = "attn.c_attn.bias"

// withoutKeyBias returns params with the key third of every c_attn.bias
// removed (the query and value thirds kept, in order).
func withoutKeyBias(params map[string][]float32) map[string][]float32 {
	out := make(map[string][]float32, len(params))
	for k, v := range params {
		if strings.HasSuffix(k, keyBiasSuffix) {
			n := len(v) / 3
			v = append(append([]float32(nil), v[:n]...), v[2*n:]...)
		}
		out[k] = v
	}
	return out
}

// keyBiases returns the key third of every c_attn.bias in params.
func keyBiases(params map[string][]float32) map[string][]float32 {
	out := map[string][]float32{}
	for k, v := range params {
		if strings.HasSuffix(k, keyBiasSuffix) {
			n := len(v) / 3
			out[k] = v[n : 2*n]
		}
	}
	return out
}

func TestWithoutKeyBias(t *testing.T) {
	p := map[string][]float32{"transformer.h.0.attn.c_attn.bias": {1, 2, 3, 4, 5, 6}, "wte": {7, 8}}
	require.Equal(t, map[string][]float32{"transformer.h.0.attn.c_attn.bias": {1, 2, 5, 6}, "wte": {7, 8}}, withoutKeyBias(p))
	require.Equal(t, map[string][]float32{"transformer.h.0.attn.c_attn.bias": {3, 4}}, keyBiases(p))
	require.Equal(t, []float32{1, 2, 3, 4, 5, 6}, p["transformer.h.0.attn.c_attn.bias"], "input untouched")
}
