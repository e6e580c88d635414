package deepgo_test

import (
	"context"
	"fmt"
	"math"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/deepgo-ml/deepgo"
	"github.com/deepgo-ml/deepgo/backend"
	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/config"
	"github.com/deepgo-ml/deepgo/data"
	"github.com/deepgo-ml/deepgo/model"
	"github.com/deepgo-ml/deepgo/nn"
	"github.com/deepgo-ml/deepgo/tensor"
	"github.com/deepgo-ml/deepgo/zero"
	"github.com/stretchr/testify/require"
)

// pipeDevCase is one pipeline run of the device tables: pp stages × dp
// data-parallel ranks (ZeRO-1 in each stage's group), gas micro-batches
// per TrainBatch under schedule sched with virtual stages per rank, in
// precision prec ("", "bf16", "fp16"), every block checkpointed when ckpt,
// with offload_optimizer device "cpu" when offload (on a device the step
// then runs on the host; on the CPU backend nothing moves), the model
// sharded over tp tensor-parallel ranks per stage when tp > 1, each
// stage's ranks on sequence shards over sp Ulysses ranks when sp > 1.
type pipeDevCase struct {
	pp, dp, gas int
	tp          int
	sp          int // Ulysses sequence_parallel_size (pipe × data × seq grid)
	sched       string
	virtual     int
	prec        string
	ckpt        bool
	offload     bool
	seq         bool   // Megatron SP (megatron_sequence_parallel) over the TP group
	freeze      string // the parameters frozen (a regexp, parFreeze; "": none)
}

func (c pipeDevCase) String() string {
	p := c.prec
	if p == "" {
		p = "fp32"
	}
	s := fmt.Sprintf("pp%d-dp%d-%s-v%d-gas%d-%s", c.pp, c.dp, c.sched, c.virtual, c.gas, p)
	if c.tp > 1 {
		s += fmt.Sprintf("-tp%d", c.tp)
	}
	if c.seq {
		s += "-megatronsp"
	}
	if c.sp > 1 {
		s += fmt.Sprintf("-sp%d", c.sp)
	}
	if c.ckpt {
		s += "-ckpt"
	}
	if c.offload {
		s += "-offload"
	}
	if c.freeze != "" {
		s += "-frozen"
	}
	return s
}

// pipeDevClip is the device tables' gradient_clipping: below the GPT's
// early gradient norms, so the clipped update is what the runs compare.
const pipeDevClip = 0.5

func (c pipeDevCase) config() string {
	prec := ""
	switch c.prec {
	case "bf16":
		prec = `, "bf16": {"enabled": true}`
	case "fp16":
		prec = `, "fp16": {"enabled": true, "initial_scale_power": 17}`
	}
	ckpt, offload := 0, ""
	if c.ckpt {
		ckpt = 1
	}
	if c.offload {
		offload = `, "offload_optimizer": {"device": "cpu", "pin_memory": true}`
	}
	return fmt.Sprintf(`{"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": %d, "gradient_clipping": %g,
		"pipeline_model_parallel_size": %d, "tensor_model_parallel_size": %d, "megatron_sequence_parallel": %v,
		"sequence_parallel_size": %d,
		"pipeline_schedule": {"type": %q, "virtual_stages": %d},
		"pipeline": {"partition": "uniform", "activation_checkpoint_interval": %d},
		"zero_optimization": {"stage": 1%s},
		"optimizer": {"type": "AdamW", "params": {"lr": 0.01, "weight_decay": 0.01}}%s}`,
		c.gas, pipeDevClip, c.pp, max(1, c.tp), c.seq && c.tp > 1, max(1, c.sp), c.sched, c.virtual, ckpt, offload, prec)
}

// devArenaGPT is a GPT whose pipeline parts' modules each take a small
// buffer from the call's arena in Forward, as a model keeping its
// activations there does, and fail when it is not on the device of the
// call's backend (the GPT's own activations live in memory of its own).
type devArenaGPT struct{ *nn.GPT }

func (a devArenaGPT) NewPart(start, stop int) (model.Part, error) {
	p, err := a.GPT.NewPart(start, stop)
	if err != nil {
		return nil, err
	}
	return devArenaPart{p}, nil
}

type devArenaPart struct{ model.Part }

func (p devArenaPart) Modules() []model.Module {
	var out []model.Module
	for _, m := range p.Part.Modules() {
		out = append(out, devArenaModule{m})
	}
	return out
}

type devArenaModule struct{ model.Module }

func (m devArenaModule) Forward(ctx context.Context, in model.Activation) (model.Activation, error) {
	a, ok := tensor.ArenaFromContext(ctx)
	be, ok2 := backend.FromContext(ctx)
	if !ok || !ok2 {
		return nil, fmt.Errorf("module %s: the forward's context carries no arena (%v) or no backend (%v)", m.Name(), ok, ok2)
	}
	t, err := a.Float32(64)
	if err != nil {
		return nil, fmt.Errorf("module %s: %w", m.Name(), err)
	}
	if t.Device() != be.Device() {
		return nil, fmt.Errorf("module %s: the arena allocates on %v, the backend computes on %v", m.Name(), t.Device(), be.Device())
	}
	return m.Module.Forward(ctx, in)
}

// pipeDevResult is a pipeline run of the device tables: rank 0's losses,
// loss scales, gradient norms, skipped steps and gathered parameters, and
// every rank's Memory after its last step.
type pipeDevResult struct {
	result
	norms []float64
	mem   []zero.Memory
}

// pipeDevRun trains a small GPT (2 blocks, tied embedding; its 4 modules
// cut uniformly) with c for steps batches on the ranks of dev (worldFor);
// under TP the parameters are rank 0's unsharded over its TP group; under
// Ulysses each rank is handed its sequence shard of its data rank's
// micro-batches.
func pipeDevRun(t *testing.T, dev string, c pipeDevCase, steps int) (*pipeDevResult, error) {
	t.Helper()
	return pipeDevSegment(t, dev, c, parSeg{to: steps})
}

// pipeDevSegment is pipeDevRun over the steps of seg (loading and saving
// as it says).
func pipeDevSegment(t *testing.T, dev string, c pipeDevCase, seg parSeg) (*pipeDevResult, error) {
	t.Helper()
	const vocab, seqLen, micro = 32, 16, 2
	src, err := data.NewMarkov(vocab, 1, 2, 3)
	require.NoError(t, err)
	corpus := &data.Tokens{IDs: src.Generate(20_000, 4), Vocab: vocab}
	tp, sp := max(1, c.tp), max(1, c.sp)
	res := &pipeDevResult{mem: make([]zero.Memory, c.pp*c.dp*tp*sp)}
	var mu sync.Mutex
	err = worldFor(dev)(context.Background(), c.pp*c.dp*tp*sp, func(ctx context.Context, cm comm.Comm, opts []deepgo.Option) error {
		cfg, err := config.Parse([]byte(c.config()))
		if err != nil {
			return err
		}
		gc := nn.GPTConfig{Layers: 2, Heads: 2, Width: 32, Vocab: vocab, SeqLen: seqLen}
		if tp*sp > 2 {
			gc.Heads = 4 // one per TP × SP rank
		}
		// the grid is pipe × data (× seq, × model fastest): a pipe's
		// stages and a stage's TP ranks read the same batches, its SP
		// ranks their shards of them
		d := (cm.Rank() / tp) % c.dp
		var tc, seq comm.Comm
		switch {
		case tp > 1 && sp > 1:
			gs, err := deepgo.PipeTensorSequenceParallelGroups(ctx, cm, c.pp, tp, sp)
			if err != nil {
				return err
			}
			tc, seq, d = gs.Tensor, gs.Seq, gs.DataRank
		case tp > 1:
			if tc, err = deepgo.PipeTensorParallelGroup(ctx, cm, c.pp, tp); err != nil {
				return err
			}
		case sp > 1:
			if seq, d, err = deepgo.PipeSequenceParallelGroup(ctx, cm, c.pp, sp); err != nil {
				return err
			}
		}
		if tc != nil {
			defer tc.Close()
			gc.TP = nn.TP{Comm: tc, SequenceParallel: c.seq}
			opts = append(opts, deepgo.WithTensorParallel(tc))
		}
		if seq != nil {
			defer seq.Close()
			gc.SP = nn.SP{Comm: seq}
			opts = append(opts, deepgo.WithSequenceParallel(seq))
		}
		g, err := nn.NewReadyGPT(gc, nil, 1)
		if err != nil {
			return err
		}
		defer g.Free()
		if c.freeze != "" {
			re := regexp.MustCompile(c.freeze)
			for _, p := range g.Params() {
				p.Frozen = re.MatchString(p.Name)
			}
		}
		tr, err := deepgo.Initialize(ctx, cfg, devArenaGPT{g}, opts...)
		if err != nil {
			return err
		}
		defer tr.Close()
		pe, ok := tr.(*deepgo.PipeEngine)
		if !ok {
			return fmt.Errorf("Initialize returned %T, want *deepgo.PipeEngine", tr)
		}
		if seg.load != "" {
			if _, err := pe.Load(ctx, seg.load, deepgo.LoadOptions{}); err != nil {
				return err
			}
		}
		for step := seg.from; step < seg.to; step++ {
			if err := seg.saveAt(ctx, pe, step); err != nil {
				return err
			}
			mbs := make([]model.MicroBatch, c.gas)
			for i := range mbs {
				k := ((step*c.dp+d)*c.gas + i) * micro
				b := corpus.MakeBatch([]int{k, k + 1}, seqLen)
				if seq != nil {
					if b, err = b.SequenceShard(seq.Rank(), sp); err != nil {
						return err
					}
				}
				mbs[i] = b.MicroBatch()
			}
			if seg.before != nil {
				if err := seg.before(ctx, cm.Rank(), step, pe, mbs); err != nil {
					return err
				}
			}
			loss, err := pe.TrainBatch(ctx, mbs)
			if err != nil {
				return err
			}
			if step == seg.to-1 {
				mu.Lock()
				res.mem[cm.Rank()] = pe.Memory()
				mu.Unlock()
			}
			if cm.Rank() == 0 {
				res.losses = append(res.losses, loss)
				res.scales = append(res.scales, pe.LossScale())
				res.norms = append(res.norms, pe.GradNorm())
			}
		}
		if err := seg.end(ctx, cm.Rank(), pe); err != nil {
			return err
		}
		p, err := pe.Parameters(ctx)
		if err != nil {
			return err
		}
		if p, err = g.Unshard(ctx, p); err != nil {
			return err
		}
		if cm.Rank() == 0 {
			res.params, res.skipped = p, pe.SkippedSteps()
		}
		return nil
	})
	return res, err
}

// pipeDevCases is the device tables' pipelines: 2 stages under 1F1B,
// GPipe and the interleaved schedule, 2 stages × 2 data-parallel ranks,
// gradient accumulation, fp32, bf16 and fp16 (a dynamic loss scale that
// starts high enough to skip steps), activation checkpointing, and frozen
// parameters (parFreeze: the tied wte among them) under 1F1B × 2
// data-parallel ranks and the interleaved schedule in bf16.
func pipeDevCases() []pipeDevCase {
	return []pipeDevCase{
		{pp: 2, dp: 1, gas: 4, sched: "1F1B", virtual: 1},
		{pp: 2, dp: 2, gas: 2, sched: "1F1B", virtual: 1},
		{pp: 2, dp: 1, gas: 4, sched: "Interleaved", virtual: 2},
		{pp: 2, dp: 1, gas: 2, sched: "GPipe", virtual: 1, prec: "bf16"},
		{pp: 2, dp: 2, gas: 4, sched: "1F1B", virtual: 1, prec: "bf16", ckpt: true},
		{pp: 2, dp: 1, gas: 2, sched: "1F1B", virtual: 1, prec: "fp16"},
		{pp: 2, dp: 2, gas: 2, sched: "1F1B", virtual: 1, offload: true},
		{pp: 2, dp: 1, gas: 2, sched: "Interleaved", virtual: 2, prec: "bf16", offload: true},
		{pp: 2, dp: 2, gas: 2, sched: "1F1B", virtual: 1, freeze: parFreeze},
		{pp: 2, dp: 1, gas: 4, sched: "Interleaved", virtual: 2, prec: "bf16", freeze: parFreeze},
	}
}

// requirePipeTrained checks that a reference run exercised what the table
// compares: finite falling losses, every parameter gathered (the tied wte
// once), and at least one applied step whose gradient was clipped.
func requirePipeTrained(t *testing.T, want *pipeDevResult) {
	t.Helper()
	for i, l := range want.losses {
		require.False(t, math.IsNaN(l) || math.IsInf(l, 0), "loss of step %d is %v", i, l)
	}
	require.Less(t, want.losses[len(want.losses)-1], want.losses[0], "the loss falls: %v", want.losses)
	require.Contains(t, want.params, "transformer.wte.weight", "the gathered parameters")
	require.Greater(t, len(want.params), 10, "the gathered parameters: %d", len(want.params))
	require.Greater(t, slicesMax(want.norms), pipeDevClip, "no step's gradient norm exceeded gradient_clipping: %v", want.norms)
}

func slicesMax(v []float64) float64 {
	m := math.Inf(-1)
	for _, x := range v {
		m = max(m, x)
	}
	return m
}

// TestPipelineOnDevice: the pipeline engine trains the GPT on the
// simulated device (memory Go may not read, kernels queued on a stream,
// the stages' transfers, the tied-weight and data-parallel reductions and
// the agreements ordered after it), with and without randomized kernel
// delays, bit-identical to the CPU backend: every loss, loss scale,
// gradient norm, skipped step and final parameter; and each rank's engine
// state lives in device memory, none in host memory. The first case also
// runs through WithDevice over comm/local ranks (the engine makes the
// device and wraps the comm).
func TestPipelineOnDevice(t *testing.T) {
	const steps = 5
	for i, c := range pipeDevCases() {
		t.Run(c.String(), func(t *testing.T) {
			want, err := pipeDevRun(t, "", c, steps)
			require.NoError(t, err, "cpu")
			requirePipeTrained(t, want)
			if c.prec == "fp16" {
				require.Positive(t, want.skipped, "fp16: no step overflowed at the initial loss scale: %v", want.scales)
			}
			devs := []string{"sim", "sim+delay"}
			if i == 0 {
				devs = append(devs, "sim-option")
			}
			for _, dev := range devs {
				got, err := pipeDevRun(t, dev, c, steps)
				require.NoError(t, err, dev)
				bitEqualRuns(t, &want.result, &got.result)
				require.Len(t, got.norms, len(want.norms), "%s: gradient norms", dev)
				for s := range want.norms {
					require.Equal(t, math.Float64bits(want.norms[s]), math.Float64bits(got.norms[s]), "%s: gradient norm of step %d: want %v got %v", dev, s, want.norms[s], got.norms[s])
				}
				for r, mem := range got.mem {
					require.Equal(t, tensor.Sim(r), mem.Device, "%s rank %d: Memory().Device", dev, r)
					require.Positive(t, mem.DeviceBytes, "%s rank %d: device bytes", dev, r)
					require.Positive(t, mem.OptimizerState, "%s rank %d: optimizer state", dev, r)
					require.Positive(t, mem.ArenaPeak, "%s rank %d: the activations' arena", dev, r)
					if c.offload {
						// the masters and the optimizer state on the host, the step there
						require.GreaterOrEqual(t, mem.HostBytes, mem.OptimizerState+mem.Master, "%s rank %d: host bytes hold the state and the masters", dev, r)
						require.GreaterOrEqual(t, mem.DeviceBytes, mem.ParamBytes(), "%s rank %d: device bytes", dev, r)
						continue
					}
					// the stage's state lived on its device, nothing in host memory
					require.GreaterOrEqual(t, mem.DeviceBytes, mem.ParamBytes()+mem.Grads+mem.OptimizerState, "%s rank %d: device bytes", dev, r)
					require.Zero(t, mem.HostBytes, "%s rank %d: host bytes of engine state", dev, r)
				}
			}
			t.Logf("loss %.4f -> %.4f, %d skipped, bit-identical on %s", want.losses[0], want.losses[steps-1], want.skipped, strings.Join(devs, ", "))
		})
	}
}

// TestPipelineCheckpointOnDevice: a pipeline of 2 stages × 2 data-parallel
// ranks (ZeRO-1, AdamW, a warmup schedule) saved after 2 steps on the
// simulated device with kernel delays and resumed on it, on the CPU
// backend, and saved on the CPU and resumed on the simulated device,
// trains the next 2 steps with the losses of the uninterrupted CPU run and
// ends with its parameters, bit for bit: a checkpoint does not depend on
// where it was trained.
func TestPipelineCheckpointOnDevice(t *testing.T) {
	t.Parallel()
	ref := &pipeCkptRun{pp: 2, dp: 2, zero: 1, from: 0, to: 4}
	require.NoError(t, ref.run(t))
	for _, dev := range [][2]string{{"sim+delay", "sim+delay"}, {"sim+delay", ""}, {"", "sim"}} {
		t.Run(devName(dev[0])+"->"+devName(dev[1]), func(t *testing.T) {
			dir := t.TempDir()
			require.NoError(t, (&pipeCkptRun{pp: 2, dp: 2, zero: 1, dev: dev[0], save: dir, from: 0, to: 2}).run(t), "save on %s", devName(dev[0]))
			res := &pipeCkptRun{pp: 2, dp: 2, zero: 1, dev: dev[1], load: dir, from: 2, to: 4}
			require.NoError(t, res.run(t), "resume on %s", devName(dev[1]))
			for r := range ref.losses {
				want, got := ref.losses[r][2:], res.losses[r]
				require.Len(t, got, len(want), "rank %d: losses", r)
				for i := range want {
					require.Equal(t, math.Float64bits(want[i]), math.Float64bits(got[i]), "rank %d step %d: loss %v, uninterrupted %v", r, 2+i, got[i], want[i])
				}
			}
			require.NotEmpty(t, ref.params)
			require.NoError(t, bitEqual(ref.params, res.params), "parameters after the resumed steps")
		})
	}
}

// pipeTPDevCases are the device tables' TP × PP runs (the last with
// frozen parameters and Megatron's sequence parallelism).
func pipeTPDevCases() []pipeDevCase {
	return []pipeDevCase{
		{pp: 2, dp: 1, gas: 4, sched: "1F1B", virtual: 1, tp: 2},
		{pp: 2, dp: 2, gas: 2, sched: "1F1B", virtual: 1, tp: 2},
		{pp: 2, dp: 1, gas: 2, sched: "Interleaved", virtual: 2, prec: "bf16", ckpt: true, tp: 2},
		{pp: 2, dp: 2, gas: 2, sched: "1F1B", virtual: 1, tp: 2, seq: true, freeze: parFreeze},
	}
}

// TestPipelineTensorParallelOnDevice: TP 2 in each of 2 pipeline stages
// (1F1B, 1 and 2 data-parallel ranks; the interleaved schedule in bf16
// with every block checkpointed) trains on the simulated device, with and
// without randomized kernel delays, and through WithDevice over comm/local
// ranks (the engine wraps the model's TP group for the device),
// bit-identical to the CPU backend: every loss, loss scale, gradient norm
// and final parameter (unsharded over rank 0's TP group).
func TestPipelineTensorParallelOnDevice(t *testing.T) {
	const steps = 4
	for _, c := range pipeTPDevCases() {
		t.Run(c.String(), func(t *testing.T) {
			want, err := pipeDevRun(t, "", c, steps)
			require.NoError(t, err, "cpu")
			requirePipeTrained(t, want)
			requirePipeOnSim(t, c, want, steps)
		})
	}
}

// requirePipeOnSim runs c on the simulated device, with and without
// kernel delays and through WithDevice, and requires every loss, loss
// scale, gradient norm and final parameter of the CPU run want, with the
// engine's state on each rank's device.
func requirePipeOnSim(t *testing.T, c pipeDevCase, want *pipeDevResult, steps int) {
	t.Helper()
	for _, dev := range []string{"sim", "sim+delay", "sim-option"} {
		got, err := pipeDevRun(t, dev, c, steps)
		require.NoError(t, err, dev)
		bitEqualRuns(t, &want.result, &got.result)
		require.Equal(t, want.norms, got.norms, "%s: gradient norms", dev)
		for r, mem := range got.mem {
			require.Equal(t, tensor.Sim(r), mem.Device, "%s rank %d: Memory().Device", dev, r)
			require.Zero(t, mem.HostBytes, "%s rank %d: host bytes of engine state", dev, r)
		}
	}
}

// TestPipelineTensorParallelCheckpointOnDevice: TP 2 × 2 stages saved
// after 2 steps on the simulated device with kernel delays and resumed
// there, saved there and resumed on the CPU backend, and saved on the CPU
// and resumed on the device, trains the next 2 steps with the losses of
// the uninterrupted CPU run and ends with its parameters, bit for bit.
func TestPipelineTensorParallelCheckpointOnDevice(t *testing.T) {
	pipeCheckpointAcrossDevices(t, pipeDevCase{pp: 2, dp: 1, gas: 2, sched: "1F1B", virtual: 1, tp: 2}, nil)
}

// TestPipelineFrozenCheckpointOnDevice: pipelines with frozen parameters
// (parFreeze, the tied wte among them; alone and with TP 2) resume across
// devices as TestPipelineTensorParallelCheckpointOnDevice's, bit for bit.
func TestPipelineFrozenCheckpointOnDevice(t *testing.T) {
	for _, c := range []pipeDevCase{{pp: 2, dp: 2, gas: 2, sched: "1F1B", virtual: 1, freeze: parFreeze}, {pp: 2, dp: 1, gas: 2, sched: "1F1B", virtual: 1, tp: 2, freeze: parFreeze}} {
		t.Run(c.String(), func(t *testing.T) { pipeCheckpointAcrossDevices(t, c, nil) })
	}
}

// pipeCheckpointAcrossDevices saves c after 2 of 4 steps and resumes it,
// sim with delays to itself, sim to the CPU and the CPU to sim, and
// requires the uninterrupted CPU run's last 2 losses and scales and its
// parameters, bit for bit; then more(dev, dir), when given, checks more
// resumes from the same save.
func pipeCheckpointAcrossDevices(t *testing.T, c pipeDevCase, more func(t *testing.T, dev [2]string, dir string, want *pipeDevResult)) {
	t.Helper()
	want, err := pipeDevRun(t, "", c, 4)
	require.NoError(t, err, "uninterrupted")
	for _, dev := range [][2]string{{"sim+delay", "sim+delay"}, {"sim+delay", ""}, {"", "sim"}} {
		t.Run(devName(dev[0])+"->"+devName(dev[1]), func(t *testing.T) {
			dir := t.TempDir()
			_, err := pipeDevSegment(t, dev[0], c, parSeg{to: 2, save: dir})
			require.NoError(t, err, "save on %s", devName(dev[0]))
			got, err := pipeDevSegment(t, dev[1], c, parSeg{from: 2, to: 4, load: dir})
			require.NoError(t, err, "resume on %s", devName(dev[1]))
			bitEqualRuns(t, &pipeDevResultTail(want, 2).result, &got.result)
			if more != nil {
				more(t, dev, dir, want)
			}
		})
	}
}
