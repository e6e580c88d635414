package deepgo_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/deepgo-ml/deepgo"
	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/config"
	"github.com/deepgo-ml/deepgo/data"
	"github.com/deepgo-ml/deepgo/model"
	"github.com/deepgo-ml/deepgo/nn"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The config's comms_logger and flops_profiler run inside the engine as
// DeepSpeed's do: the profile of profile_step's forward is printed once, by
// rank 0, in DeepSpeed's layout, and the comms summary lists the ZeRO-2
// collectives with their counts; on the CPU and on the simulated device.
func TestEngineProfilers(t *testing.T) {
	for _, dev := range []string{"", "sim"} {
		t.Run(devName(dev), func(t *testing.T) { engineProfilers(t, dev) })
	}
}

func engineProfilers(t *testing.T, dev string) {
	const vocab, seqLen, micro = 32, 16, 2
	src, err := data.NewMarkov(vocab, 1, 2, 3)
	require.NoError(t, err)
	corpus := &data.Tokens{IDs: src.Generate(5_000, 4), Vocab: vocab}
	cfgJSON := `{"train_micro_batch_size_per_gpu": 2, "zero_optimization": {"stage": 2, "reduce_bucket_size": 3000},
		"optimizer": {"type": "AdamW", "params": {"lr": 0.01}},
		"flops_profiler": {"enabled": true, "profile_step": 2, "module_depth": -1, "top_modules": 1, "detailed": true},
		"comms_logger": {"enabled": true, "prof_all": true}}`
	var logs [2]bytes.Buffer
	var summary bytes.Buffer
	var mu sync.Mutex
	err = worldFor(dev)(context.Background(), 2, func(ctx context.Context, c comm.Comm, opts []deepgo.Option) error {
		cfg, err := config.Parse([]byte(cfgJSON))
		if err != nil {
			return err
		}
		g, err := nn.NewReadyGPT(nn.GPTConfig{Layers: 2, Heads: 2, Width: 32, Vocab: vocab, SeqLen: seqLen}, nil, 1)
		if err != nil {
			return err
		}
		defer g.Free()
		e, err := initEngine(ctx, cfg, g, append(opts, deepgo.WithLog(&logs[c.Rank()]))...)
		if err != nil {
			return err
		}
		defer e.Close()
		s, err := data.NewDistributedSampler(corpus.NumWindows(seqLen), c.Rank(), c.Size(), 5, true)
		if err != nil {
			return err
		}
		for range 4 {
			mb := corpus.MakeBatch(s.Next(micro), seqLen).MicroBatch()
			if _, err := e.TrainBatch(ctx, []model.MicroBatch{mb}); err != nil {
				return err
			}
		}
		if c.Rank() == 0 {
			if e.FlopsProfile() == nil || e.FlopsProfile().Step != 3 {
				return fmt.Errorf("rank 0: flops profile %v, want step 3's", e.FlopsProfile())
			}
			mu.Lock()
			defer mu.Unlock()
			return e.CommsSummary(&summary)
		}
		if e.FlopsProfile() != nil {
			return fmt.Errorf("rank %d profiled: only rank 0 does", c.Rank())
		}
		return nil
	})
	require.NoError(t, err)
	out := logs[0].String()
	assert.Equal(t, 1, strings.Count(out, "DeepSpeed Flops Profiler"), "one report:\n%s", out)
	// profile_step 2: the step that starts with 2 done, the third, which
	// DeepSpeed's report calls step 3 (it prints once global_steps counts it)
	assert.Contains(t, out, "Profile Summary at step 3:")
	assert.Contains(t, out, "transformer.h.0")
	assert.Empty(t, logs[1].String(), "rank 1 prints nothing")
	t.Logf("rank 0's log:\n%s\ncomms summary:\n%s", out, summary.String())
	sum := summary.String()
	for _, op := range []string{"Comm. Op", "all_gather", "reduce_scatter"} {
		assert.Contains(t, sum, op, "comms summary:\n%s", sum)
	}
}
