package deepgo_test

import (
	"fmt"
	"testing"

	"github.com/deepgo-ml/deepgo/cuda"
	"github.com/deepgo-ml/deepgo/internal/gputest"
	"github.com/deepgo-ml/deepgo/tensor"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// needGPU skips (fails under DEEPGO_REQUIRE_GPU=1) without a CUDA device:
// these tests run in the -tags cuda binary make gpu-check carries to a GPU.
func needGPU(t *testing.T) {
	t.Helper()
	if !cuda.Available() {
		gputest.Unavailable(t, "no CUDA device (build with -tags cuda on a GPU machine)")
	}
}

// Tolerances of the CUDA runs against the CPU backend's. The element math
// of every kernel is shared, but nvcc contracts a*b+c into one FMA where
// the C compiler may not, so fp32 results differ by a few roundings (1e-6
// relative, the engine's own fp32 equivalence bound); the mixed-precision
// runs inherit TestMixedPrecision's bounds (one unit roundoff of fp16,
// 2.5 of bf16). bf16 master weights (bf16m: masters and moments bf16,
// stepped by the CUDA twin of csrc/optim_bf16.c, bit for bit the CPU's
// step) take bf16's: a gradient that rounds to the other bf16 neighbour
// moves a master by one bf16 ulp.
var cudaTol = map[string]float64{"": 1e-6, "fp16": 5e-4, "bf16": 1e-2, "bf16m": 1e-2}

// TestDeviceEquivalenceCUDA: the engine's table on GPU 0 (in-process
// ranks sharing it through host staging) against the CPU backend: every
// ZeRO stage on 1 and 2 ranks with accumulation, fp16 with overflowing
// steps (the same steps skipped), bf16, and bf16 master weights with bf16
// moments stepped on the GPU (no offload).
func TestDeviceEquivalenceCUDA(t *testing.T) {
	needGPU(t)
	cases := deviceCases([]int{1, 2}, []int{1, 2})
	for _, r := range cases {
		t.Run(r.String(), func(t *testing.T) {
			want, err := train(t, r)
			require.NoError(t, err)
			r.dev = "cuda"
			got, err := train(t, r)
			require.NoError(t, err)
			ld, pd := compareRuns(t, "cuda vs cpu", want, got, cudaTol[r.precision], cudaTol[r.precision])
			assert.Equal(t, want.skipped, got.skipped, "skipped steps")
			t.Logf("loss %.2e param %.2e", ld, pd)
		})
	}
}

// TestStage3HPZOnCUDA: ZeRO++ hpZ (2 and 4 of 4 ranks on GPU 0) is
// bit-identical to plain stage 3 on the GPU: it changes only which group
// gathers the same bytes.
func TestStage3HPZOnCUDA(t *testing.T) {
	needGPU(t)
	for _, base := range hpzCases(t) {
		base.dev = "cuda"
		t.Run(base.String(), func(t *testing.T) {
			want, err := train(t, base)
			require.NoError(t, err)
			for _, h := range []int{2, 4} {
				got, err := train(t, withHPZ(base, h))
				require.NoError(t, err, "hpZ %d", h)
				bitEqualRuns(t, want, got)
			}
		})
	}
}

// TestStage3QwZOnCUDA: TestStage3QwZ on GPU 0 (the quantizer's CUDA
// twin, cuBLAS matmuls): each forward's weights bit-equal to the
// reference's quantize-dequantize of the masters.
func TestStage3QwZOnCUDA(t *testing.T) {
	needGPU(t)
	stage3QwZTable(t, []string{"cuda"})
}

// TestSaveModelOnCUDA: TestSaveModel's cases on GPU 0: the file holds the
// rounded masters, whole, from device memory.
func TestSaveModelOnCUDA(t *testing.T) {
	needGPU(t)
	var cases []saveModelCase
	for _, c := range saveModelCases() {
		if c.dev == "" { // one of each: the sim ones repeat CPU cases
			c.dev, c.live = "cuda", false
			cases = append(cases, c)
		}
	}
	saveModelTable(t, cases)
}

// TestGPTOnCUDA: the GPT (cuBLAS matmuls, every nn kernel's CUDA twin)
// trains 50 steps on GPU 0 as on the CPU: losses within 1e-4 relative per
// step and parameters within 1e-3 norm-wise (cuBLAS sums in another order
// than the CPU's tiles; 50 Adam steps compound that), fp32 ZeRO-2 and
// bf16 ZeRO-3 (bf16 bounds: 1e-2), the attention's key biases aside
// (withoutKeyBias: their gradient is rounding noise).
func TestGPTOnCUDA(t *testing.T) {
	needGPU(t)
	for _, c := range []struct {
		world, stage int
		prec         string
		tol          float64
	}{{1, 2, "", 1e-4}, {2, 3, "bf16", 1e-2}} {
		t.Run(fmt.Sprintf("world%d/stage%d/%s", c.world, c.stage, c.prec), func(t *testing.T) {
			want := gptRun(t, "", c.world, c.stage, c.prec, 0, 50)
			got := gptRun(t, "cuda", c.world, c.stage, c.prec, 0, 50)
			kd, _ := relDiff(keyBiases(want.params), keyBiases(got.params))
			want.params, got.params = withoutKeyBias(want.params), withoutKeyBias(got.params)
			ld, pd := compareRuns(t, "cuda vs cpu", want, got, c.tol, 10*c.tol)
			t.Logf("loss %.4f -> %.4f; cuda vs cpu: loss %.2e param %.2e (key biases %.2e)", want.losses[0], want.losses[49], ld, pd, kd)
		})
	}
}

// TestPipelineOnCUDA: TestPipelineOnDevice's pipelines (but fp16, whose
// skipped steps hang on where the first gradient overflows) on GPU 0
// (in-process ranks sharing it through host staging, the stages'
// transfers included) against the CPU backend, within TestGPTOnCUDA's
// bounds (cuBLAS sums in another order than the CPU's tiles), each rank's
// engine state in GPU memory (with offload_optimizer, the masters and the
// optimizer state in host memory).
func TestPipelineOnCUDA(t *testing.T) {
	needGPU(t)
	const steps = 5
	for _, c := range pipeDevCases() {
		if c.prec == "fp16" {
			continue
		}
		t.Run(c.String(), func(t *testing.T) {
			want, err := pipeDevRun(t, "", c, steps)
			require.NoError(t, err, "cpu")
			got, err := pipeDevRun(t, "cuda", c, steps)
			require.NoError(t, err, "cuda")
			tol := map[string]float64{"": 1e-4, "bf16": 1e-2}[c.prec]
			ld, pd := compareRuns(t, "cuda vs cpu", &want.result, &got.result, tol, 10*tol)
			assert.Equal(t, want.skipped, got.skipped, "skipped steps")
			for r, mem := range got.mem {
				assert.Equal(t, tensor.CUDA(0), mem.Device, "rank %d: Memory().Device", r)
				assert.Positive(t, mem.DeviceBytes, "rank %d: device bytes", r)
				if c.offload {
					assert.GreaterOrEqual(t, mem.HostBytes, mem.OptimizerState+mem.Master, "rank %d: host bytes hold the state and the masters", r)
				} else {
					assert.Zero(t, mem.HostBytes, "rank %d: host bytes of engine state", r)
				}
			}
			t.Logf("loss %.4f -> %.4f; cuda vs cpu: loss %.2e param %.2e", want.losses[0], want.losses[steps-1], ld, pd)
		})
	}
}

// TestPipelineWallClockBreakdownOnCUDA: TestPipelineWallClockBreakdown on
// GPU 0 (in-process ranks sharing it through host staging): DeepSpeed's
// PipelineEngine lines on rank 0 alone, every timer a stage runs positive
// with the spans synchronized, the monitor's tags the printed times.
func TestPipelineWallClockBreakdownOnCUDA(t *testing.T) {
	needGPU(t)
	for _, c := range pipeTimerCases() {
		t.Run(c.String(), func(t *testing.T) { pipeWallClock(t, "cuda", c) })
	}
}

// TestModelParallelOnCUDA: TestModelParallelOnDevice's TP, Megatron SP
// and Ulysses runs on GPU 0 (in-process ranks sharing it; the engine
// wraps the model's groups in host staging) against the CPU backend,
// within the CUDA tolerances (cuBLAS sums in another order).
func TestModelParallelOnCUDA(t *testing.T) {
	needGPU(t)
	const steps = 4
	for _, c := range parDevCases() {
		t.Run(c.String(), func(t *testing.T) {
			want, err := parDevRun(t, "", c, steps)
			require.NoError(t, err, "cpu")
			got, err := parDevRun(t, "cuda", c, steps)
			require.NoError(t, err, "cuda")
			tol := map[string]float64{"": 1e-4, "bf16": 1e-2}[c.prec]
			ld, pd := compareRuns(t, "cuda vs cpu", want, got, tol, 10*tol)
			t.Logf("cuda vs cpu: loss %.2e param %.2e", ld, pd)
		})
	}
}

// TestPipelineTensorParallelOnCUDA: TestPipelineTensorParallelOnDevice's
// TP × PP runs on GPU 0 against the CPU backend, within the CUDA
// tolerances.
func TestPipelineTensorParallelOnCUDA(t *testing.T) { pipeCasesOnCUDA(t, pipeTPDevCases()) }

// pipeCasesOnCUDA runs each pipeline case on GPU 0 and on the CPU
// backend and compares them within the CUDA tolerances.
func pipeCasesOnCUDA(t *testing.T, cases []pipeDevCase) {
	needGPU(t)
	const steps = 4
	for _, c := range cases {
		t.Run(c.String(), func(t *testing.T) {
			want, err := pipeDevRun(t, "", c, steps)
			require.NoError(t, err, "cpu")
			got, err := pipeDevRun(t, "cuda", c, steps)
			require.NoError(t, err, "cuda")
			tol := map[string]float64{"": 1e-4, "bf16": 1e-2}[c.prec]
			ld, pd := compareRuns(t, "cuda vs cpu", &want.result, &got.result, tol, 10*tol)
			t.Logf("cuda vs cpu: loss %.2e param %.2e", ld, pd)
		})
	}
}

// TestPipelineMegatronSequenceParallelOnCUDA:
// TestPipelineMegatronSequenceParallelOnDevice's TP 2 + Megatron SP × PP 2
// runs on GPU 0 against the CPU backend, within the CUDA tolerances.
func TestPipelineMegatronSequenceParallelOnCUDA(t *testing.T) {
	pipeCasesOnCUDA(t, pipeSeqDevCases())
}

// TestSaveAsyncOnCUDA: TestSaveAsyncMatchesSave's runs on GPU 0: a Save
// and a SaveAsync of the same state write the same files byte for byte,
// and the run that saves and the run resumed from the background save
// follow the CPU backend's uninterrupted run within the CUDA tolerances.
func TestSaveAsyncOnCUDA(t *testing.T) {
	needGPU(t)
	for _, c := range asyncCases() {
		t.Run(c.name, func(t *testing.T) {
			tol := map[string]float64{"": 1e-4, "bf16": 1e-2}[c.prec]
			requireAsyncMatchesSave(t, c.run, []string{"cuda"}, func(t *testing.T, want, got *result) {
				ld, pd := compareRuns(t, "cuda vs cpu", want, got, tol, 10*tol)
				t.Logf("cuda vs cpu: loss %.2e param %.2e", ld, pd)
			})
		})
	}
}

// TestPipelineUlyssesOnCUDA: TestPipelineUlyssesOnDevice's Ulysses SP 2 ×
// PP 2 runs (but fp16, as TestPipelineOnCUDA leaves it out) on GPU 0
// against the CPU backend, within the CUDA tolerances.
func TestPipelineUlyssesOnCUDA(t *testing.T) {
	var cases []pipeDevCase
	for _, c := range pipeUlyssesDevCases() {
		if c.prec != "fp16" {
			cases = append(cases, c)
		}
	}
	pipeCasesOnCUDA(t, cases)
}

// TestPipelineTensorUlyssesOnCUDA: TestPipelineTensorUlyssesOnDevice's
// TP 2 × SP 2 × PP 2 runs on GPU 0 against the CPU backend, within the
// CUDA tolerances.
func TestPipelineTensorUlyssesOnCUDA(t *testing.T) {
	pipeCasesOnCUDA(t, pipeTensorUlyssesDevCases())
}

// TestEvalBatchCUDA: TestEvalBatch's runs on GPU 0 (in-process ranks
// sharing it): the evaluations are consistent on the device (every rank's
// the same, a step's own micro-batches giving its TrainBatch loss bit for
// bit, plainEval's within evalTol), the run that evaluates trains
// bit-identically to the same device's run that does not, and the
// evaluations follow the CPU's within the CUDA tolerances.
func TestEvalBatchCUDA(t *testing.T) {
	needGPU(t)
	for _, r := range deviceCases([]int{1, 2}, []int{1, 2}) {
		t.Run(r.String(), func(t *testing.T) {
			var cpuEv, ev evalLosses
			cpu, err := train(t, withEvals(r, &cpuEv))
			require.NoError(t, err, "cpu")
			r.dev = "cuda"
			want, err := train(t, r)
			require.NoError(t, err, "cuda, no evaluations")
			got, err := train(t, withEvals(r, &ev))
			require.NoError(t, err, "cuda")
			bitEqualRuns(t, want, got)
			requireEvals(t, r, got, &ev)
			for call, losses := range cpuEv.calls {
				assert.InEpsilon(t, losses[0], ev.calls[call][0], max(cudaTol[r.precision], 1e-6), "evaluation %q: cpu %v, cuda %v", call, losses[0], ev.calls[call][0])
			}
			compareRuns(t, "cuda vs cpu", cpu, got, cudaTol[r.precision], cudaTol[r.precision])
		})
	}
}

// TestPipelineEvalBatchCUDA: TestPipelineEvalBatch's pipelines (but fp16,
// as TestPipelineOnCUDA leaves it out) on GPU 0: a step's micro-batches
// evaluated before its TrainBatch give its loss bit for bit on every rank,
// the run trains bit-identically to the device's run without the
// evaluations, and the evaluations follow the CPU's within the CUDA
// tolerances.
func TestPipelineEvalBatchCUDA(t *testing.T) {
	needGPU(t)
	const steps = 4
	for _, c := range pipeEvalCases() {
		if c.prec == "fp16" {
			continue
		}
		t.Run(c.String(), func(t *testing.T) {
			cpuEv, ev := &stepEvals{}, &stepEvals{}
			_, err := pipeDevSegment(t, "", c, parSeg{to: steps, before: cpuEv.before})
			require.NoError(t, err, "cpu")
			want, err := pipeDevRun(t, "cuda", c, steps)
			require.NoError(t, err, "cuda, no evaluations")
			got, err := pipeDevSegment(t, "cuda", c, parSeg{to: steps, before: ev.before})
			require.NoError(t, err, "cuda")
			bitEqualRuns(t, &want.result, &got.result)
			ev.require(t, &got.result, len(got.mem), 1e-14)
			tol := map[string]float64{"": 1e-4, "bf16": 1e-2}[c.prec]
			for k, v := range cpuEv.own {
				assert.InEpsilon(t, v, ev.own[k], tol, "step %d rank %d: cpu %v, cuda %v", k[0], k[1], v, ev.own[k])
			}
		})
	}
}

// TestPipelineEvaluateCUDA: TestPipelineEvaluate's pipelines on GPU 0:
// the last stage's outputs and every stage's per-micro-batch losses
// follow a plain CPU forward of the same parameters within the CUDA
// tolerance (1e-4 of the largest logit; losses 1e-5), the other stages
// get no outputs, and the loss is EvalBatch's bit for bit.
func TestPipelineEvaluateCUDA(t *testing.T) {
	needGPU(t)
	for _, c := range pipeEvaluateCases {
		t.Run(c.String(), func(t *testing.T) {
			pipelineEvaluate(t, "cuda", c, 1e-4, 1e-5)
		})
	}
}
