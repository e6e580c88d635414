package deepgo_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/deepgo-ml/deepgo"
	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/comm/local"
	"github.com/deepgo-ml/deepgo/config"
	"github.com/deepgo-ml/deepgo/data"
	"github.com/deepgo-ml/deepgo/model"
	"github.com/deepgo-ml/deepgo/nn"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// ckGPTTrain trains a 3-block GPT under v (v.segments: its blocks
// checkpointed through the engine) and returns rank 0's losses, its
// parameters (unsharded under TP) and checkpoint stats of one more
// forward.
func ckGPTTrain(t *testing.T, v ckVariant, corpus *data.Tokens) ckResult {
	t.Helper()
	const seqLen = 16
	var res ckResult
	train := func(ctx context.Context, rank int, tp nn.TP, opts []deepgo.Option) error {
		cfg, err := config.Parse([]byte(v.config()))
		if err != nil {
			return err
		}
		g, err := nn.NewReadyGPT(nn.GPTConfig{Layers: 3, Heads: 2, Width: 32, Vocab: corpus.Vocab, SeqLen: seqLen, TP: tp,
			Checkpointing: nn.Checkpointing{Enabled: v.segments}}, nil, 1)
		if err != nil {
			return err
		}
		defer g.Free()
		e, err := initEngine(ctx, cfg, g, opts...)
		if err != nil {
			return err
		}
		defer e.Close()
		batch := func(i int) model.MicroBatch {
			ids := make([]int, 8)
			for j := range ids {
				ids[j] = (i*8 + j) * 7 % corpus.NumWindows(seqLen)
			}
			return corpus.MakeBatch(ids, seqLen).MicroBatch()
		}
		for s := range v.steps {
			loss, err := e.TrainBatch(ctx, []model.MicroBatch{batch(2 * s), batch(2*s + 1)})
			if err != nil {
				return err
			}
			if rank == 0 {
				res.losses = append(res.losses, loss)
			}
		}
		if _, err := e.Forward(ctx, batch(99)); err != nil {
			return err
		}
		m, st := e.Memory(), e.CheckpointStats()
		if err := e.Backward(ctx); err != nil {
			return err
		}
		p, err := e.Parameters(ctx)
		if err == nil && tp.Comm != nil {
			p, err = g.Unshard(ctx, p)
		}
		if err != nil {
			return err
		}
		if rank == 0 {
			res.params, res.stats, res.mem = p, st, m.DeviceBytes+m.HostBytes
		}
		return nil
	}
	var err error
	if v.tp > 1 {
		err = local.Run(context.Background(), v.tp, local.Options{Timeout: 60 * time.Second, Threads: 1}, func(ctx context.Context, c comm.Comm) error {
			dc, tc, err := deepgo.TensorParallelGroups(ctx, c, v.tp)
			if err != nil {
				return err
			}
			return train(ctx, c.Rank(), nn.TP{Comm: tc}, []deepgo.Option{deepgo.WithComm(dc), deepgo.WithTensorParallel(tc)})
		})
	} else {
		err = worldFor(v.dev)(context.Background(), 1, func(ctx context.Context, c comm.Comm, opts []deepgo.Option) error {
			return train(ctx, c.Rank(), nn.TP{}, opts)
		})
	}
	require.NoError(t, err, v.name)
	return res
}

// TestGPTActivationCheckpointing: the GPT, its blocks checkpointed by the
// engine (no private recompute path), trains to bit-identical losses and
// parameters with every variant as without checkpointing, on the CPU
// backend and the simulated device, ZeRO 0-3 (TP 2 on the CPU backend,
// as tensor parallelism allows); partition_activations at TP 2
// halves the saved bytes per rank, cpu_checkpointing on the device moves
// them all to host memory.
func TestGPTActivationCheckpointing(t *testing.T) {
	const steps = 3
	src, err := data.NewMarkov(32, 1, 2, 3)
	require.NoError(t, err)
	corpus := &data.Tokens{IDs: src.Generate(20_000, 4), Vocab: 32}
	partition := `"partition_activations": true`
	contiguous := `"partition_activations": true, "contiguous_memory_optimization": true, "number_checkpoints": 2`
	cpu := `"partition_activations": true, "cpu_checkpointing": true`
	for _, dev := range []string{"", "sim"} {
		for stage := 0; stage <= 3; stage++ {
			base := ckGPTTrain(t, ckVariant{name: "none", dev: dev, stage: stage, steps: steps}, corpus)
			ckpt := ckGPTTrain(t, ckVariant{name: "ckpt", segments: true, dev: dev, stage: stage, steps: steps}, corpus)
			require.Equal(t, 3, ckpt.stats.Segments)
			// blocks 1 and 2 keep their inputs (block 0's is the model's
			// embedding output): 8 x 16 tokens x 32 float32 each
			require.Equal(t, int64(2*8*16*32*4), ckpt.stats.SavedBytes)
			assert.Equal(t, base.losses, ckpt.losses, "%s stage %d ckpt losses", devName(dev), stage)
			assert.Equal(t, base.params, ckpt.params, "%s stage %d ckpt parameters", devName(dev), stage)
			variants := []ckVariant{{name: "contiguous", section: contiguous}, {name: "cpu", section: cpu, wantHost: dev != ""},
				{name: "sync+profile", section: `"synchronize_checkpoint_boundary": true, "profile": true`}}
			if dev == "" {
				variants = append(variants, ckVariant{name: "partition tp2", section: partition, tp: 2, partitions: 2})
			}
			for _, v := range variants {
				v.segments, v.dev, v.stage, v.steps = true, dev, stage, steps
				t.Run(fmt.Sprintf("%s/stage%d/%s", devName(dev), stage, v.name), func(t *testing.T) {
					got := ckGPTTrain(t, v, corpus)
					want := base
					if v.tp > 1 {
						want = ckGPTTrain(t, ckVariant{name: "none tp2", tp: 2, stage: stage, steps: steps}, corpus)
					}
					assert.Equal(t, want.losses, got.losses, "losses")
					assert.Equal(t, want.params, got.params, "parameters")
					switch {
					case v.partitions > 1:
						assert.Equal(t, ckpt.stats.SavedBytes/int64(v.partitions), got.stats.SavedBytes, "saved bytes per rank")
					case v.wantHost:
						assert.Zero(t, got.stats.SavedBytes)
						assert.Equal(t, ckpt.stats.SavedBytes, got.stats.SavedHostBytes)
					}
				})
			}
		}
	}
}
