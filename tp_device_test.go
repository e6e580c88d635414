package deepgo_test

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/deepgo-ml/deepgo"
	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/config"
	"github.com/deepgo-ml/deepgo/data"
	"github.com/deepgo-ml/deepgo/model"
	"github.com/deepgo-ml/deepgo/nn"
	"github.com/deepgo-ml/deepgo/tensor"
	"github.com/deepgo-ml/deepgo/zero"
	"github.com/stretchr/testify/require"
)

// parDevCase is one model-parallel run of the device tables: Megatron TP
// over tp ranks (Megatron's sequence parallelism when seq) or Ulysses SP
// over sp ranks, times dp data-parallel ranks at ZeRO stage, with the
// engine's activation checkpointing when ckpt, in precision prec ("",
// "bf16"), and zextra (more zero_optimization keys, each after a comma),
// with the parameters frozen whose names match freeze ("": none).
type parDevCase struct {
	tp, sp, dp, stage    int
	seq, ckpt            bool
	prec, zextra, freeze string
}

func (c parDevCase) String() string {
	s := fmt.Sprintf("tp%d-sp%d-dp%d-zero%d", c.tp, c.sp, c.dp, c.stage)
	if c.seq {
		s += "-megatronsp"
	}
	if c.ckpt {
		s += "-ckpt"
	}
	if c.prec != "" {
		s += "-" + c.prec
	}
	if c.freeze != "" {
		s += "-frozen"
	}
	return s
}

func (c parDevCase) config() string {
	prec := ""
	if c.prec == "bf16" {
		prec = `"bf16": {"enabled": true},`
	}
	return fmt.Sprintf(`{"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1, "gradient_clipping": 1.0,
		"zero_optimization": {"stage": %d, "reduce_bucket_size": 500%s}, %s
		"tensor_model_parallel_size": %d, "megatron_sequence_parallel": %v, "sequence_parallel_size": %d,
		"optimizer": {"type": "AdamW", "params": {"lr": 0.01, "weight_decay": 0.01}}}`, c.stage, c.zextra, prec, max(1, c.tp), c.seq, max(1, c.sp))
}

// parDevRun trains a GPT (2 blocks, 4 heads, width 16, 16 tokens) with c
// for steps batches on the ranks of dev (worldFor) and returns rank 0's
// losses and its parameters (unsharded over its TP group).
func parDevRun(t *testing.T, dev string, c parDevCase, steps int) (*result, error) {
	t.Helper()
	return parDevSegment(t, dev, c, parSeg{to: steps})
}

// parSeg is a stretch of a parDevRun: it loads from load (unless ""),
// trains on the batches of steps [from, to) and then saves to save
// (unless ""). With twin set it saves at step mid instead (after the
// batches before mid): Save to save, then SaveAsync to twin, which is
// written while the steps from mid train, and waited for (WaitSave) at
// the end. after, when set, runs on every rank at the end, before the
// parameters are gathered; before, on every rank before each step's
// TrainBatch, with the step's micro-batches (this rank's).
type parSeg struct {
	from, to   int
	load, save string
	twin       string
	mid        int
	after      func(ctx context.Context, rank int, tr deepgo.Trainer) error
	before     func(ctx context.Context, rank, step int, tr deepgo.Trainer, mbs []model.MicroBatch) error
}

// saveAt makes the segment's saves due before the batch of step (step
// to: after the last).
func (s parSeg) saveAt(ctx context.Context, tr deepgo.Trainer, step int) error {
	at := s.to
	if s.twin != "" {
		at = s.mid
	}
	if s.save == "" || step != at {
		return nil
	}
	if err := tr.Save(ctx, s.save, deepgo.SaveOptions{}); err != nil {
		return err
	}
	if s.twin == "" {
		return nil
	}
	return tr.SaveAsync(ctx, s.twin, deepgo.SaveOptions{})
}

// end is what the segment does after its last batch: the saves due then,
// the wait for a background save, and after.
func (s parSeg) end(ctx context.Context, rank int, tr deepgo.Trainer) error {
	if err := s.saveAt(ctx, tr, s.to); err != nil {
		return err
	}
	if err := tr.WaitSave(); err != nil {
		return err
	}
	if s.after != nil {
		return s.after(ctx, rank, tr)
	}
	return nil
}

// parDevSegment is parDevRun over the steps of seg.
func parDevSegment(t *testing.T, dev string, c parDevCase, seg parSeg) (*result, error) {
	t.Helper()
	const vocab, seqLen, micro = 32, 16, 2
	src, err := data.NewMarkov(vocab, 1, 2, 3)
	require.NoError(t, err)
	corpus := &data.Tokens{IDs: src.Generate(20_000, 4), Vocab: vocab}
	tp, sp := max(1, c.tp), max(1, c.sp)
	res := &result{}
	var mu sync.Mutex
	err = worldFor(dev)(context.Background(), tp*sp*c.dp, func(ctx context.Context, cm comm.Comm, opts []deepgo.Option) error {
		cfg, err := config.Parse([]byte(c.config()))
		if err != nil {
			return err
		}
		gc := nn.GPTConfig{Layers: 2, Heads: 4, Width: 16, Vocab: vocab, SeqLen: seqLen}
		gc.Checkpointing.Enabled = c.ckpt
		// opts[0] is WithComm(cm): the groups' options follow it and win
		dataRank, shard := cm.Rank(), func(b model.TokenBatch) (model.TokenBatch, error) { return b, nil }
		switch {
		case tp > 1 && sp > 1:
			gs, err := deepgo.TensorSequenceParallelGroups(ctx, cm, tp, sp)
			if err != nil {
				return err
			}
			for _, g := range []comm.Comm{gs.SeqData, gs.Tensor, gs.Seq} {
				defer g.Close()
			}
			gc.TP, gc.SP = nn.TP{Comm: gs.Tensor}, nn.SP{Comm: gs.Seq}
			opts = append(opts, gs.Options()...)
			dataRank = gs.DataRank
			shard = func(b model.TokenBatch) (model.TokenBatch, error) { return b.SequenceShard(gs.Seq.Rank(), sp) }
		case tp > 1:
			dc, tc, err := deepgo.TensorParallelGroups(ctx, cm, tp)
			if err != nil {
				return err
			}
			defer dc.Close()
			defer tc.Close()
			gc.TP = nn.TP{Comm: tc, SequenceParallel: c.seq}
			opts = append(opts, deepgo.WithComm(dc), deepgo.WithTensorParallel(tc))
			dataRank = dc.Rank()
		case sp > 1:
			sdc, sc, d, err := deepgo.SequenceParallelGroups(ctx, cm, sp)
			if err != nil {
				return err
			}
			defer sdc.Close()
			defer sc.Close()
			gc.SP = nn.SP{Comm: sc}
			opts = append(opts, deepgo.WithComm(sdc), deepgo.WithSequenceParallel(sc))
			dataRank = d
			shard = func(b model.TokenBatch) (model.TokenBatch, error) { return b.SequenceShard(sc.Rank(), sp) }
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
		tr, err := deepgo.Initialize(ctx, cfg, g, opts...)
		if err != nil {
			return err
		}
		defer tr.Close()
		if seg.load != "" {
			if _, err := tr.Load(ctx, seg.load, deepgo.LoadOptions{}); err != nil {
				return err
			}
		}
		for step := seg.from; step < seg.to; step++ {
			if err := seg.saveAt(ctx, tr, step); err != nil {
				return err
			}
			k := (step*c.dp + dataRank) * micro
			b, err := shard(corpus.MakeBatch([]int{k, k + 1}, seqLen))
			if err != nil {
				return err
			}
			mbs := []model.MicroBatch{b.MicroBatch()}
			if seg.before != nil {
				if err := seg.before(ctx, cm.Rank(), step, tr, mbs); err != nil {
					return err
				}
			}
			loss, err := tr.TrainBatch(ctx, mbs)
			if err != nil {
				return err
			}
			if cm.Rank() == 0 {
				res.losses = append(res.losses, loss)
			}
		}
		// the run computed where dev says, not on a CPU fallback
		wantDev := tensor.CPU
		switch dev {
		case "":
		case "cuda":
			wantDev = tensor.CUDA(0)
		default:
			wantDev = tensor.Sim(cm.Rank())
		}
		// (offload keeps state in host memory on purpose)
		if m := tr.(interface{ Memory() zero.Memory }).Memory(); m.Device != wantDev || dev != "" && c.zextra == "" && m.HostBytes != 0 {
			return fmt.Errorf("rank %d: Memory() on %v with %d host bytes, want all on %v", cm.Rank(), m.Device, m.HostBytes, wantDev)
		} else if strings.Contains(c.zextra, `"offload_optimizer": {"device": "nvme"`) && m.OptimizerStateOnDisk == 0 {
			return fmt.Errorf("rank %d: offload_optimizer nvme, but no optimizer state on disk", cm.Rank())
		}
		if err := seg.end(ctx, cm.Rank(), tr); err != nil {
			return err
		}
		local, err := tr.Parameters(ctx)
		if err != nil {
			return err
		}
		full, err := g.Unshard(ctx, local)
		if err != nil {
			return err
		}
		if cm.Rank() == 0 {
			mu.Lock()
			res.params = full
			mu.Unlock()
		}
		return nil
	})
	return res, err
}

// parDevCases: TP 2 alone and × DP 2 at ZeRO 1-3 (with engine
// checkpointing, and in bf16), Megatron's sequence parallelism at TP 2
// alone and × DP 2, Ulysses SP 2 alone and × DP 2, and Ulysses SP 2
// inside TP 2 alone, × DP 2 at ZeRO 3 with engine checkpointing, and in
// bf16; with frozen parameters (parFreeze) TP 2 × DP 2 at ZeRO 2 with
// Megatron's sequence parallelism, at ZeRO 3, and in bf16, Ulysses SP 2 ×
// DP 2 at ZeRO 2, and TP 2 × SP 2 in bf16.
func parDevCases() []parDevCase {
	return []parDevCase{
		{tp: 2, dp: 1},
		{tp: 2, dp: 2, stage: 1},
		{tp: 2, dp: 2, stage: 3, ckpt: true},
		{tp: 2, dp: 1, stage: 2, prec: "bf16"},
		{tp: 2, dp: 1, seq: true},
		{tp: 2, dp: 2, stage: 2, seq: true, ckpt: true},
		{sp: 2, dp: 1},
		{sp: 2, dp: 2, stage: 1},
		{tp: 2, sp: 2, dp: 1},
		{tp: 2, sp: 2, dp: 2, stage: 3, ckpt: true},
		{tp: 2, sp: 2, dp: 1, stage: 2, prec: "bf16"},
		{tp: 2, dp: 2, stage: 2, seq: true, freeze: parFreeze},
		{tp: 2, dp: 2, stage: 3, freeze: parFreeze},
		{tp: 2, dp: 1, stage: 1, prec: "bf16", freeze: parFreeze},
		{sp: 2, dp: 2, stage: 2, freeze: parFreeze},
		{tp: 2, sp: 2, dp: 1, stage: 1, prec: "bf16", freeze: parFreeze},
	}
}

// parFreeze freezes the tied wte (vocabulary-parallel under TP), a
// column-parallel and a row-parallel weight, and replicated LayerNorm
// parameters.
const parFreeze = `wte|h\.0\.attn\.c_attn\.weight|h\.1\.mlp\.c_proj\.weight|h\.0\.ln_1\.bias|ln_f\.weight`

// TestModelParallelOnDevice: Megatron TP (with and without Megatron's
// sequence parallelism) and Ulysses SP (alone and inside TP) train the
// GPT through the engine on the simulated device (activations Go cannot
// read, so the layers' host loops run on staged copies; the model's
// groups ordered after each rank's stream), with and without randomized
// kernel delays, and through
// WithDevice over comm/local ranks (the engine wraps the model's groups),
// bit-identical to the same run on the CPU backend: every loss and every
// final parameter.
func TestModelParallelOnDevice(t *testing.T) {
	const steps = 4
	for i, c := range parDevCases() {
		t.Run(c.String(), func(t *testing.T) {
			want, err := parDevRun(t, "", c, steps)
			require.NoError(t, err, "cpu")
			require.Less(t, want.losses[steps-1], want.losses[0], "the loss falls: %v", want.losses)
			require.Greater(t, len(want.params), 10, "the gathered parameters")
			devs := []string{"sim", "sim+delay"}
			if i%2 == 0 || c.sp > 1 || c.seq {
				devs = append(devs, "sim-option")
			}
			for _, dev := range devs {
				got, err := parDevRun(t, dev, c, steps)
				require.NoError(t, err, dev)
				bitEqualRuns(t, want, got)
			}
		})
	}
}

// TestModelParallelCheckpointOnDevice: a TP 2 × DP 2 run (ZeRO 1, and
// with Megatron's sequence parallelism), a Ulysses SP 2 run and a TP 2 ×
// SP 2 run saved (and with frozen parameters TP 2 × DP 2 at ZeRO 2 with
// Megatron's sequence parallelism and Ulysses SP 2)
// after 2 steps on the simulated device with kernel delays and resumed
// there, saved there and resumed on the CPU backend, and saved on the CPU
// and resumed on the device, train the next 2 steps with the losses of
// the uninterrupted CPU run and end with its parameters, bit for bit.
func TestModelParallelCheckpointOnDevice(t *testing.T) {
	for _, c := range []parDevCase{{tp: 2, dp: 2, stage: 1}, {tp: 2, dp: 1, seq: true}, {sp: 2, dp: 1}, {tp: 2, sp: 2, dp: 1, stage: 1}, {tp: 2, dp: 2, stage: 2, seq: true, freeze: parFreeze}, {sp: 2, dp: 1, freeze: parFreeze}} {
		t.Run(c.String(), func(t *testing.T) {
			want, err := parDevRun(t, "", c, 4)
			require.NoError(t, err, "uninterrupted")
			for _, dev := range [][2]string{{"sim+delay", "sim+delay"}, {"sim+delay", ""}, {"", "sim"}} {
				dir := t.TempDir()
				_, err := parDevSegment(t, dev[0], c, parSeg{to: 2, save: dir})
				require.NoError(t, err, "save on %s", devName(dev[0]))
				got, err := parDevSegment(t, dev[1], c, parSeg{from: 2, to: 4, load: dir})
				require.NoError(t, err, "resume on %s", devName(dev[1]))
				bitEqualRuns(t, &result{losses: want.losses[2:], params: want.params}, got)
			}
		})
	}
}

// TestModelParallelNVMeOffload: NVMe offload of the optimizer state, and
// of stage 3's parameters spilling past max_in_cpu, under TP 2 (× DP 2)
// and TP 2 × Ulysses SP 2 (× DP 2): the model-parallel ranks of a
// data-parallel rank each swap through a folder of their own (the TP
// ranks once both took the data-parallel rank's and the second failed on
// the first's lock), on the CPU and on the simulated device, bit-identical
// to the run without offload.
func TestModelParallelNVMeOffload(t *testing.T) {
	const both = `, "offload_optimizer": {"device": "nvme", "nvme_path": "%s"}, "offload_param": {"device": "nvme", "nvme_path": "%s", "max_in_cpu": 1}`
	for _, c := range []parDevCase{
		{tp: 2, dp: 2, stage: 2, zextra: `, "offload_optimizer": {"device": "nvme", "nvme_path": "%s"}`},
		{tp: 2, dp: 1, stage: 3, zextra: both},
		{tp: 2, sp: 2, dp: 1, stage: 3, zextra: both},
		{tp: 2, sp: 2, dp: 2, stage: 2, zextra: `, "offload_optimizer": {"device": "nvme", "nvme_path": "%s"}`},
	} {
		t.Run(c.String(), func(t *testing.T) {
			plain := c
			plain.zextra = ""
			want, err := parDevRun(t, "", plain, 3)
			require.NoError(t, err, "without offload")
			for _, dev := range []string{"", "sim"} {
				off := c
				dir := t.TempDir()
				off.zextra = strings.ReplaceAll(c.zextra, "%s", dir)
				got, err := parDevRun(t, dev, off, 3)
				require.NoError(t, err, "NVMe offload on %s", devName(dev))
				bitEqualRuns(t, want, got)
			}
		})
	}
}
