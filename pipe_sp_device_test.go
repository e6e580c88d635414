package deepgo_test

import (
	"math"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// pipeSeqDevCases are the device tables' TP 2 + Megatron SP × PP 2 runs:
// 1F1B with 1 and 2 data-parallel ranks, the interleaved schedule with
// every block checkpointed, in fp32 and bf16.
func pipeSeqDevCases() []pipeDevCase {
	return []pipeDevCase{
		{pp: 2, dp: 1, gas: 4, sched: "1F1B", virtual: 1, tp: 2, seq: true},
		{pp: 2, dp: 2, gas: 2, sched: "1F1B", virtual: 1, tp: 2, seq: true},
		{pp: 2, dp: 2, gas: 2, sched: "Interleaved", virtual: 2, ckpt: true, tp: 2, seq: true},
		{pp: 2, dp: 1, gas: 2, sched: "Interleaved", virtual: 2, prec: "bf16", ckpt: true, tp: 2, seq: true},
	}
}

// TestPipelineMegatronSequenceParallelOnDevice: TP 2 with Megatron's
// sequence parallelism in each of 2 pipeline stages (the stages exchange
// sequence shards) trains on the simulated device, with and without
// randomized kernel delays, and through WithDevice over comm/local ranks,
// bit-identical to the CPU backend: every loss, loss scale, gradient norm
// and final parameter. On the CPU it follows the same run without
// sequence parallelism (TP × PP) and PP alone to float32 summation order
// in fp32 (only the LayerNorm gradients' sums differ; losses within 1e-6
// relative, the parameters 5e-6 norm-wise: this table's lr is 10× the nn
// tests'), to bf16's rounding in bf16.
func TestPipelineMegatronSequenceParallelOnDevice(t *testing.T) {
	const steps = 4
	for _, c := range pipeSeqDevCases() {
		t.Run(c.String(), func(t *testing.T) {
			want, err := pipeDevRun(t, "", c, steps)
			require.NoError(t, err, "cpu")
			requirePipeTrained(t, want)
			// measured: fp32 losses 5.7e-8, parameters 1.6e-6; bf16 losses
			// 1.1e-6, parameters 3.1e-5 (identical to TP × PP's)
			tol := map[string][2]float64{"": {1e-6, 5e-6}, "bf16": {1e-4, 1e-3}}[c.prec]
			for _, ref := range []pipeDevCase{withSeq(c, false), withTP(c, 1)} {
				other, err := pipeDevRun(t, "", ref, steps)
				require.NoError(t, err, "cpu %v", ref)
				followsRun(t, ref.String()+" vs "+c.String(), &other.result, &want.result, tol[0], tol[1])
			}
			requirePipeOnSim(t, c, want, steps)
		})
	}
}

// TestPipelineMegatronSequenceParallelCheckpointOnDevice: TP 2 + Megatron
// SP × 2 stages saved after 2 steps on the simulated device with kernel
// delays and resumed there, saved there and resumed on the CPU backend,
// and saved on the CPU and resumed on the device, trains the next 2 steps
// with the losses of the uninterrupted CPU run and ends with its
// parameters, bit for bit; resumed without sequence parallelism (TP × PP,
// on the device) it follows them to float32 summation order.
func TestPipelineMegatronSequenceParallelCheckpointOnDevice(t *testing.T) {
	c := pipeDevCase{pp: 2, dp: 1, gas: 2, sched: "1F1B", virtual: 1, tp: 2, seq: true}
	pipeCheckpointAcrossDevices(t, c, func(t *testing.T, dev [2]string, dir string, want *pipeDevResult) {
		if dev[1] != "sim" {
			return
		}
		plain, err := pipeDevSegment(t, dev[1], withSeq(c, false), parSeg{from: 2, to: 4, load: dir})
		require.NoError(t, err, "resume without sequence parallelism on %s", devName(dev[1]))
		followsRun(t, "resumed without megatron_sequence_parallel", &pipeDevResultTail(want, 2).result, &plain.result, 1e-6, 5e-6) // measured: 3.2e-9, 2.6e-6
	})
}

// withSeq is c with Megatron SP on or off.
func withSeq(c pipeDevCase, seq bool) pipeDevCase { c.seq = seq; return c }

// withTP is c at another TP degree (Megatron SP only where it is above 1).
func withTP(c pipeDevCase, tp int) pipeDevCase { c.tp, c.seq = tp, c.seq && tp > 1; return c }

// pipeDevResultTail is r from step from on: what a run resumed there
// compares with.
func pipeDevResultTail(r *pipeDevResult, from int) *pipeDevResult {
	out := *r
	out.losses, out.scales = r.losses[from:], r.scales[from:]
	return &out
}

// followsRun checks got's losses against want's to lossTol relative and
// its parameters, all of them as one vector, to paramTol norm-wise (the
// nn equivalence tests' measure: a small parameter such as a bias that
// AdamW moves by about lr whatever its gradient's size carries float32
// summation noise that a per-parameter bound would magnify).
func followsRun(t *testing.T, what string, want, got *result, lossTol, paramTol float64) {
	t.Helper()
	require.Len(t, got.losses, len(want.losses), "%s: losses", what)
	ld := lossDiff(want.losses, got.losses)
	keys := make([]string, 0, len(want.params))
	for k := range want.params {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var scale, d float64
	for _, k := range keys {
		a, b := want.params[k], got.params[k]
		require.Len(t, b, len(a), "%s: parameter %s", what, k)
		for i := range a {
			scale += float64(a[i]) * float64(a[i])
			d += (float64(a[i]) - float64(b[i])) * (float64(a[i]) - float64(b[i]))
		}
	}
	pd := math.Sqrt(d / scale)
	worst, where := relDiff(want.params, got.params)
	t.Logf("%s: loss %.2e, parameters %.2e norm-wise (worst one %s %.2e)", what, ld, pd, where, worst)
	require.LessOrEqual(t, ld, lossTol, "%s: losses differ, relative\nwant %v\ngot  %v", what, want.losses, got.losses)
	require.LessOrEqual(t, pd, paramTol, "%s: parameters differ norm-wise", what)
}

// pipeUlyssesDevCases are the device tables' Ulysses SP 2 × PP 2 runs:
// 1F1B with 1 and 2 data-parallel ranks, the interleaved schedule with
// every block checkpointed, in fp32, bf16 and fp16 (a loss scale that
// starts high enough to skip steps), and with frozen parameters
// (parFreeze: the tied wte, wpe's neighbours, LayerNorm parameters).
func pipeUlyssesDevCases() []pipeDevCase {
	return []pipeDevCase{
		{pp: 2, dp: 1, gas: 4, sched: "1F1B", virtual: 1, sp: 2},
		{pp: 2, dp: 2, gas: 2, sched: "1F1B", virtual: 1, sp: 2},
		{pp: 2, dp: 2, gas: 2, sched: "Interleaved", virtual: 2, ckpt: true, sp: 2},
		{pp: 2, dp: 1, gas: 2, sched: "Interleaved", virtual: 2, prec: "bf16", ckpt: true, sp: 2},
		{pp: 2, dp: 1, gas: 2, sched: "1F1B", virtual: 1, prec: "fp16", sp: 2},
		{pp: 2, dp: 2, gas: 2, sched: "1F1B", virtual: 1, sp: 2, freeze: parFreeze},
	}
}

// TestPipelineUlyssesOnDevice: Ulysses SP 2 in each of 2 pipeline stages
// (each rank on its sequence shard, the stages exchanging shards, the
// all-to-alls over each stage's SP group, ZeRO-1 over the sequence-data
// group) trains on the simulated device, with and without randomized
// kernel delays, and through WithDevice over comm/local ranks (the engine
// wraps the model's SP group for the device), bit-identical to the CPU
// backend: every loss, loss scale, gradient norm and final parameter. On
// the CPU it follows the same pipeline without SP to float32 summation
// order in fp32 and to bf16's rounding in bf16 (fp16 may skip a step more
// than without SP: see nn's TestGPTUlyssesPipelineHalf).
func TestPipelineUlyssesOnDevice(t *testing.T) {
	const steps = 4
	for _, c := range pipeUlyssesDevCases() {
		t.Run(c.String(), func(t *testing.T) {
			want, err := pipeDevRun(t, "", c, steps)
			require.NoError(t, err, "cpu")
			requirePipeTrained(t, want)
			if c.prec == "fp16" {
				require.Positive(t, want.skipped, "fp16: no step overflowed at the initial loss scale: %v", want.scales)
			} else {
				// measured: fp32 losses 1.8e-8, parameters 1.9e-6; bf16
				// losses 1.5e-3, parameters 6.4e-3: bf16's own noise at
				// this table's lr 0.01 (PP alone in bf16 ends 8.6e-4 from
				// PP alone in fp32, SP × PP in bf16 6.8e-4 on the other
				// side), as each SP rank rounds its tokens' share of a
				// gradient into bf16 where one rank rounded the whole
				tol := map[string][2]float64{"": {1e-6, 5e-6}, "bf16": {3e-3, 2e-2}}[c.prec]
				other, err := pipeDevRun(t, "", withSP(c, 1), steps)
				require.NoError(t, err, "cpu without SP")
				followsRun(t, "PP without SP vs "+c.String(), &other.result, &want.result, tol[0], tol[1])
			}
			requirePipeOnSim(t, c, want, steps)
		})
	}
}

// TestPipelineUlyssesCheckpointOnDevice: Ulysses SP 2 × 2 stages saved
// after 2 steps on the simulated device with kernel delays and resumed
// there, saved there and resumed on the CPU backend, and saved on the CPU
// and resumed on the device, trains the next 2 steps with the losses of
// the uninterrupted CPU run and ends with its parameters, bit for bit;
// resumed without SP (PP 2 alone, on the device) it follows them to
// float32 summation order.
func TestPipelineUlyssesCheckpointOnDevice(t *testing.T) {
	c := pipeDevCase{pp: 2, dp: 1, gas: 2, sched: "1F1B", virtual: 1, sp: 2}
	pipeCheckpointAcrossDevices(t, c, func(t *testing.T, dev [2]string, dir string, want *pipeDevResult) {
		if dev[1] != "sim" {
			return
		}
		plain, err := pipeDevSegment(t, dev[1], withSP(c, 1), parSeg{from: 2, to: 4, load: dir})
		require.NoError(t, err, "resume without sequence parallelism on %s", devName(dev[1]))
		followsRun(t, "resumed without sequence_parallel_size", &pipeDevResultTail(want, 2).result, &plain.result, 1e-6, 5e-6)
	})
}

// withSP is c at another Ulysses degree.
func withSP(c pipeDevCase, sp int) pipeDevCase { c.sp = sp; return c }

// pipeTensorUlyssesDevCases are the device tables' TP 2 × SP 2 × PP 2
// runs (8 ranks; the GPT with 4 heads, one per TP × SP rank): 1F1B, and
// the interleaved schedule with every block checkpointed in bf16, and 1F1B
// with frozen parameters (parFreeze).
func pipeTensorUlyssesDevCases() []pipeDevCase {
	return []pipeDevCase{
		{pp: 2, dp: 1, gas: 4, sched: "1F1B", virtual: 1, tp: 2, sp: 2},
		{pp: 2, dp: 1, gas: 2, sched: "Interleaved", virtual: 2, prec: "bf16", ckpt: true, tp: 2, sp: 2},
		{pp: 2, dp: 1, gas: 2, sched: "1F1B", virtual: 1, tp: 2, sp: 2, freeze: parFreeze},
	}
}

// TestPipelineTensorUlyssesOnDevice: Ulysses SP 2 inside TP 2 in each of
// 2 pipeline stages (PipeTensorSequenceParallelGroups' grid) trains on
// the simulated device, with and without randomized kernel delays, and
// through WithDevice over comm/local ranks (the engine wraps both model
// groups), bit-identical to the CPU backend: every loss, loss scale,
// gradient norm and final parameter. On the CPU it follows SP 4 × PP 2
// (the same 4-head model without TP) to float32 summation order in fp32
// and to bf16's rounding in bf16.
func TestPipelineTensorUlyssesOnDevice(t *testing.T) {
	const steps = 4
	for _, c := range pipeTensorUlyssesDevCases() {
		t.Run(c.String(), func(t *testing.T) {
			want, err := pipeDevRun(t, "", c, steps)
			require.NoError(t, err, "cpu")
			requirePipeTrained(t, want)
			// the bounds of TestPipelineUlyssesOnDevice; measured: fp32
			// losses 1.8e-7, parameters 3.4e-6 (this table's lr is 10×
			// the nn tests'); bf16 5.3e-4 and 8.8e-3
			tol := map[string][2]float64{"": {1e-6, 5e-6}, "bf16": {3e-3, 2e-2}}[c.prec]
			ref := withSP(withTP(c, 1), 4)
			other, err := pipeDevRun(t, "", ref, steps)
			require.NoError(t, err, "cpu %v", ref)
			followsRun(t, ref.String()+" vs "+c.String(), &other.result, &want.result, tol[0], tol[1])
			requirePipeOnSim(t, c, want, steps)
		})
	}
}

// TestPipelineTensorUlyssesCheckpointOnDevice: TP 2 × SP 2 × 2 stages
// saved after 2 steps on the simulated device with kernel delays and
// resumed there, saved there and resumed on the CPU backend, and saved on
// the CPU and resumed on the device, trains the next 2 steps with the
// losses of the uninterrupted CPU run and ends with its parameters, bit
// for bit; resumed at SP 4 without TP (on the device) it follows them to
// float32 summation order.
func TestPipelineTensorUlyssesCheckpointOnDevice(t *testing.T) {
	c := pipeDevCase{pp: 2, dp: 1, gas: 2, sched: "1F1B", virtual: 1, tp: 2, sp: 2}
	pipeCheckpointAcrossDevices(t, c, func(t *testing.T, dev [2]string, dir string, want *pipeDevResult) {
		if dev[1] != "sim" {
			return
		}
		other, err := pipeDevSegment(t, dev[1], withSP(withTP(c, 1), 4), parSeg{from: 2, to: 4, load: dir})
		require.NoError(t, err, "resume at SP 4 without TP on %s", devName(dev[1]))
		followsRun(t, "resumed at SP 4 without TP", &pipeDevResultTail(want, 2).result, &other.result, 1e-6, 5e-6) // measured: 9.6e-9, 3.1e-6
	})
}
