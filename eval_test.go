package deepgo_test

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/deepgo-ml/deepgo"
	"github.com/deepgo-ml/deepgo/internal/testmodel"
	"github.com/deepgo-ml/deepgo/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// evalStep is the step before whose TrainBatch an evalRun evaluates that
// step's own micro-batches, evalOther the one before which it evaluates 3
// micro-batches of other data.
const evalStep, evalOther = 2, 4

// evalLosses is what an evalRun's EvalBatch calls returned: per call, the
// loss on every rank.
type evalLosses struct {
	mu    sync.Mutex
	calls map[string][]float64 // "at step 2", "other", "after", "evaluate", "micro-batch i": rank → loss
	outs  map[int][][]float32  // rank → Evaluate's outputs after training
}

func (l *evalLosses) add(call string, rank, world int, loss float64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.calls == nil {
		l.calls = map[string][]float64{}
	}
	if l.calls[call] == nil {
		l.calls[call] = make([]float64, world)
	}
	l.calls[call][rank] = loss
}

// evalData is rank's n micro-batches of step s of run r's data set, of
// r's micro-batch size.
func evalData(r run, s, rank, n int) []model.MicroBatch {
	sz := r.layers()
	data := testmodel.NewDataset(42, 64, sz[0], sz[len(sz)-1])
	micro := globalBatch / (r.world * r.gas)
	return data.RankBatch(s, n*r.world*micro, r.world, rank, n)
}

// withEvals is r evaluating along the way: before step evalStep's
// TrainBatch on that step's micro-batches, before step evalOther's on 3
// micro-batches of step 7's data, and after the last step on 3 of step 9's.
func withEvals(r run, got *evalLosses) run {
	hook := r.hook
	r.hook = func(rank int, m *testmodel.MLP, e *deepgo.Engine, step int) {
		if hook != nil {
			hook(rank, m, e, step)
		}
		var call string
		var mbs []model.MicroBatch
		switch step {
		case evalStep:
			call, mbs = "at step", evalData(r, step, rank, r.gas)
		case evalOther:
			call, mbs = "other", evalData(r, 7, rank, 3)
		default:
			return
		}
		loss, err := e.EvalBatch(context.Background(), mbs)
		if err != nil {
			loss = math.NaN()
		}
		got.add(call, rank, r.world, loss)
	}
	r.after = func(ctx context.Context, rank int, e *deepgo.Engine) error {
		loss, err := e.EvalBatch(ctx, evalData(r, 9, rank, 3))
		got.add("after", rank, r.world, loss)
		if err != nil {
			return err
		}
		return got.evaluate(ctx, rank, r.world, e, evalData(r, 9, rank, 3))
	}
	return r
}

// plainEval is the reference of an evaluation: the mean of the MLP's loss
// over the micro-batches of every rank (data(rank)), each computed by a
// plain forward of the layers, no engine, with the fp32 values params.
func plainEval(t *testing.T, r run, params map[string][]float32, data func(rank int) []model.MicroBatch) float64 {
	t.Helper()
	var sum float64
	var n int
	for _, fwds := range plainForwards(t, r, params, data) {
		for _, f := range fwds {
			sum += f.loss
			n++
		}
	}
	return sum / float64(n)
}

// plainFwd is a plain forward's output of the last layer and its loss.
type plainFwd struct {
	out  []float32
	loss float64
}

// plainForwards is the plain forward of the MLP (no engine, the fp32
// values params) over each micro-batch of every rank (data(rank)): per
// rank, per micro-batch, the last layer's output and the loss.
func plainForwards(t *testing.T, r run, params map[string][]float32, data func(rank int) []model.MicroBatch) [][]plainFwd {
	t.Helper()
	ctx := context.Background()
	m := testmodel.NewMLP(1, r.layers()...)
	for _, l := range m.Layers {
		for _, p := range l.Params() {
			defer p.Data.Free()
			v, err := p.Data.Float32s()
			require.NoError(t, err)
			require.Len(t, params[p.Name], len(v), "parameter %s", p.Name)
			copy(v, params[p.Name])
		}
	}
	fwds := make([][]plainFwd, r.world)
	for rank := range r.world {
		for _, mb := range data(rank) {
			act := mb.Input
			for _, mod := range m.Modules() {
				var err error
				act, err = mod.Forward(ctx, act)
				require.NoError(t, err)
			}
			out := slices.Clone(act.(testmodel.Batch).X)
			loss, _, err := m.Loss(ctx, act, mb.Target, 1)
			require.NoError(t, err)
			fwds[rank] = append(fwds[rank], plainFwd{out, loss})
		}
	}
	return fwds
}

// evalTol bounds an evaluation against plainEval's fp32 forward: fp32
// differs by the order of the sums (the mean over ranks of means over
// micro-batches; measured: at most 2e-16); half precision computes with
// the masters rounded to fp16 (2^-11) or bf16 (2^-8) and its activations
// rounded too (measured: 7e-6 and 3.5e-4 relative, bounded here with a
// margin of about 8). With bf16 master weights (bf16m) the masters are the
// bf16 weights the plain forward reads, so only the sum order differs, as
// in fp32 (measured: 1.7e-16).
var evalTol = map[string]float64{"": 1e-6, "fp16": 5e-5, "bf16": 3e-3, "bf16m": 1e-6}

// TestEvalBatch: EvalBatch on the data-parallel engine, every ZeRO stage
// on 1 and 2 ranks with 1 and 2 accumulation steps, fp16 with overflowing
// steps and bf16, on the CPU backend and on the simulated device with and
// without kernel delays: (1) an evaluation after training equals the mean
// over micro-batches and ranks of a plain forward of the MLP on the final
// parameters (evalTol); an evaluation of a step's own micro-batches before
// its TrainBatch returns that TrainBatch's loss, bit for bit; every rank
// gets the same value; (2) a run that evaluates between its steps trains
// bit-identically to one that does not (every loss, loss scale, skipped
// step and parameter), and the simulated device's evaluations are the
// CPU's, bit for bit.
func TestEvalBatch(t *testing.T) {
	for _, r := range deviceCases([]int{1, 2}, []int{1, 2}) {
		t.Run(r.String(), func(t *testing.T) {
			want, err := train(t, r)
			require.NoError(t, err, "without evaluations")
			var cpuEvals map[string][]float64
			var cpuOuts map[int][][]float32
			for _, dev := range []string{"", "sim", "sim+delay"} {
				r := r
				r.dev = dev
				var ev evalLosses
				got, err := train(t, withEvals(r, &ev))
				require.NoError(t, err, "%s: with evaluations", devName(dev))
				bitEqualRuns(t, want, got)
				requireEvals(t, r, got, &ev)
				if dev == "" {
					cpuEvals, cpuOuts = ev.calls, ev.outs
					continue
				}
				require.Equal(t, cpuOuts, ev.outs, "%s: Evaluate's outputs differ from the cpu's", devName(dev))
				for call, losses := range cpuEvals {
					for rank, l := range losses {
						require.Equal(t, math.Float64bits(l), math.Float64bits(ev.calls[call][rank]), "%s: evaluation %q on rank %d: cpu %v, %s %v", devName(dev), call, rank, l, devName(dev), ev.calls[call][rank])
					}
				}
			}
		})
	}
}

// requireEvals checks the evaluations of withEvals(r) against what got
// trained: every rank's value the same, the step's own micro-batches
// giving its TrainBatch loss, the last one plainEval's on the final
// parameters.
func requireEvals(t *testing.T, r run, got *result, ev *evalLosses) {
	t.Helper()
	for _, call := range []string{"at step", "other", "after"} {
		losses := ev.calls[call]
		require.Len(t, losses, r.world, "evaluation %q", call)
		for rank, l := range losses {
			require.False(t, math.IsNaN(l) || math.IsInf(l, 0), "evaluation %q on rank %d: %v", call, rank, l)
			require.Equal(t, math.Float64bits(losses[0]), math.Float64bits(l), "evaluation %q: rank %d's %v, rank 0's %v", call, rank, l, losses[0])
		}
	}
	require.Equal(t, math.Float64bits(got.losses[evalStep]), math.Float64bits(ev.calls["at step"][0]),
		"step %d's micro-batches: EvalBatch %v, TrainBatch %v", evalStep, ev.calls["at step"][0], got.losses[evalStep])
	ref := plainEval(t, r, got.params, func(rank int) []model.MicroBatch { return evalData(r, 9, rank, 3) })
	fwds := plainForwards(t, r, got.params, func(rank int) []model.MicroBatch { return evalData(r, 9, rank, 3) })
	ev.requireEvaluate(t, r.precision, fwds)
	d := math.Abs(ev.calls["after"][0]-ref) / math.Abs(ref)
	assert.LessOrEqual(t, d, evalTol[r.precision], "after training: EvalBatch %v, plain forward %v", ev.calls["after"][0], ref)
	t.Logf("%s: eval %.6f, plain %.6f (rel %.1e)", r, ev.calls["after"][0], ref, d)
}

// TestEvalBatchMidAccumulation: an EvalBatch between the micro-steps of
// an optimizer step (Forward, Backward, Step by hand, gradient
// accumulation 2), and one after a Forward never followed by Backward,
// leave the step bit-identical to the same micro-steps without them, at
// ZeRO stages 2 and 3 on 2 ranks.
func TestEvalBatchMidAccumulation(t *testing.T) {
	for _, stage := range []int{2, 3} {
		t.Run(fmt.Sprintf("stage%d", stage), func(t *testing.T) {
			base := run{stage: stage, world: 2, gas: 2, steps: 1}
			var results [2]*result
			for i, eval := range []bool{false, true} {
				r := base
				r.steps = -1 // no TrainBatch: the steps are done by hand in after
				r.after = func(ctx context.Context, rank int, e *deepgo.Engine) error {
					for s := range 3 {
						for j, mb := range evalData(base, s, rank, 2) {
							if eval && j == 1 {
								if _, err := e.Forward(ctx, evalData(base, 5, rank, 1)[0]); err != nil {
									return err
								}
								if _, err := e.EvalBatch(ctx, evalData(base, 6, rank, 3)); err != nil {
									return err
								}
							}
							if _, err := e.Forward(ctx, mb); err != nil {
								return err
							}
							if err := e.Backward(ctx); err != nil {
								return err
							}
							if err := e.Step(ctx); err != nil {
								return err
							}
						}
					}
					if e.GlobalSteps() != 3 {
						return fmt.Errorf("rank %d: %d steps, want 3", rank, e.GlobalSteps())
					}
					return nil
				}
				var err error
				results[i], err = train(t, r)
				require.NoError(t, err, "evaluations: %v", eval)
			}
			require.NoError(t, bitEqual(results[0].params, results[1].params), "parameters")
		})
	}
}

// TestEvalBatchRefused: data EvalBatch refuses on 2 ranks at ZeRO stage 3,
// on the CPU backend and the simulated device: none, a wrong size, or a
// different number of micro-batches on one rank. Every rank gets an error
// at once (the ranks agree before any forward), the one naming its own
// data or the rank at fault, and nothing is marked: the next EvalBatch
// and TrainBatch run. An evaluation that fails part way (the loss refuses
// its target) leaves the engine refusing later calls, as a TrainBatch
// failing part way does.
func TestEvalBatchRefused(t *testing.T) {
	r := run{stage: 3, world: 2, gas: 1}
	half := globalBatch / 2
	data := testmodel.NewDataset(42, 64, sizes[0], sizes[len(sizes)-1])
	good := func(rank int) []model.MicroBatch {
		return []model.MicroBatch{data.Micro(0, globalBatch, rank*half, half)}
	}
	cases := []struct {
		name string
		data func(rank int) []model.MicroBatch
		want [2]string // rank 0's, rank 1's error
	}{
		{"none anywhere", func(int) []model.MicroBatch { return nil },
			[2]string{"EvalBatch: no micro-batches: want at least one", "EvalBatch: no micro-batches: want at least one"}},
		{"none on rank 1", func(rank int) []model.MicroBatch { return good(rank)[:1-rank] },
			[2]string{"rank 1 of group", "EvalBatch: no micro-batches"}},
		{"wrong size on rank 1", func(rank int) []model.MicroBatch {
			mbs := append(good(rank), good(rank)...)
			if rank == 1 {
				mbs[1] = data.Micro(0, globalBatch, 0, 3)
			}
			return mbs
		}, [2]string{"rank 1 of group", "micro-batch 1 holds 3 samples, train_micro_batch_size_per_gpu is 8"}},
		{"different counts", func(rank int) []model.MicroBatch {
			if rank == 1 {
				return append(good(rank), good(rank)...)
			}
			return good(rank)
		}, [2]string{"were handed different numbers of micro-batches: rank 0 1, rank 1 2", "were handed different numbers of micro-batches: rank 0 1, rank 1 2"}},
	}
	for _, dev := range []string{"", "sim"} {
		t.Run(devName(dev), func(t *testing.T) {
			r := r
			r.dev, r.steps = dev, -1
			r.after = func(ctx context.Context, rank int, e *deepgo.Engine) error {
				for _, c := range cases {
					if _, err := e.EvalBatch(ctx, c.data(rank)); err == nil || !strings.Contains(err.Error(), c.want[rank]) {
						return fmt.Errorf("%s: rank %d: want an error saying %q, got %v", c.name, rank, c.want[rank], err)
					}
					if _, err := e.EvalBatch(ctx, good(rank)); err != nil {
						return fmt.Errorf("%s: rank %d: the next EvalBatch: %w", c.name, rank, err)
					}
				}
				if _, err := e.TrainBatch(ctx, good(rank)); err != nil {
					return fmt.Errorf("rank %d: TrainBatch after the refusals: %w", rank, err)
				}
				bad := good(rank)
				bad[0].Target = bad[0].Input // 8 wide, where the loss wants 4
				if _, err := e.EvalBatch(ctx, bad); err == nil || !strings.Contains(err.Error(), "EvalBatch: micro-batch 0: loss") {
					return fmt.Errorf("rank %d: an evaluation whose loss fails: got %v", rank, err)
				}
				for op, err := range map[string]error{"TrainBatch": second(e.TrainBatch(ctx, good(rank))), "EvalBatch": second(e.EvalBatch(ctx, good(rank)))} {
					if err == nil || !strings.Contains(err.Error(), op+": an earlier call failed part way") {
						return fmt.Errorf("rank %d: %s after a failed evaluation: want it refused, got %v", rank, op, err)
					}
				}
				return nil
			}
			r.opts = []deepgo.Option{deepgo.WithLog(discard{})}
			// the ranks' failed evaluations leave them refusing Parameters
			_, err := train(t, r)
			require.ErrorContains(t, err, "Parameters: an earlier call failed part way")
		})
	}
}

// second is the error of a (value, error) pair.
func second[T any](_ T, err error) error { return err }

// TestEvalBatchOffload: EvalBatch with the optimizer offloaded (to the
// host, to NVMe) and with ZeRO-3's parameter partitions offloaded (to NVMe,
// paged through two buffers; to the host on the device), on the CPU
// backend and the simulated device: TestEvalBatch's checks (a run with
// evaluations trains bit-identically, a step's micro-batches evaluate to
// its TrainBatch loss, the last evaluation is the plain forward's).
func TestEvalBatchOffload(t *testing.T) {
	const z3 = `, "stage3_param_persistence_threshold": 20, "stage3_prefetch_bucket_size": 300`
	for _, c := range []struct {
		name, extra string
		stage       int
	}{
		{"optimizer to the host", `, "offload_optimizer": {"device": "cpu"}`, 2},
		{"parameters and optimizer to nvme", z3 + `, "offload_param": {"device": "nvme", "nvme_path": %q, "buffer_count": 2, "buffer_size": 1024, "max_in_cpu": 0}, "offload_optimizer": {"device": "nvme", "nvme_path": %[1]q}`, 3},
		{"parameters to the host", z3 + `, "offload_param": {"device": "cpu"}`, 3},
	} {
		t.Run(c.name, func(t *testing.T) {
			for _, dev := range []string{"", "sim"} {
				r := run{stage: c.stage, world: 2, gas: 2, steps: 6, dev: dev, opts: []deepgo.Option{deepgo.WithLog(discard{})}}
				r.zeroExtra = c.extra
				if strings.Contains(c.extra, "%") {
					r.zeroExtra = fmt.Sprintf(c.extra, t.TempDir())
				}
				want, err := train(t, r)
				require.NoError(t, err, "%s: without evaluations", devName(dev))
				var ev evalLosses
				got, err := train(t, withEvals(r, &ev))
				require.NoError(t, err, "%s: with evaluations", devName(dev))
				bitEqualRuns(t, want, got)
				requireEvals(t, r, got, &ev)
			}
		})
	}
}
