package deepgo_test

import (
	"context"
	"testing"

	"github.com/deepgo-ml/deepgo"
	"github.com/deepgo-ml/deepgo/config"
	"github.com/deepgo-ml/deepgo/internal/testmodel"
	"github.com/deepgo-ml/deepgo/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// What Trainer.LR documents: WarmupLR reads its minimum before the first
// step and for the first two steps, WarmupCosineLR 0 then its minimum; no
// schedule reads lr.
func TestLRBeforeFirstStep(t *testing.T) {
	cases := []struct {
		sched string
		want  []float64 // LR before steps 1, 2, 3
	}{
		{``, []float64{0.01, 0.01, 0.01}},
		{`, "scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 4, "warmup_max_lr": 0.01, "warmup_type": "linear"}}`, []float64{0, 0, 0.0025}},
		{`, "scheduler": {"type": "WarmupLR", "params": {"warmup_min_lr": 0.001, "warmup_num_steps": 4, "warmup_max_lr": 0.01, "warmup_type": "linear"}}`, []float64{0.001, 0.001, 0.00325}},
		// 0 for the first step, then warmup_min_ratio × lr, then the linear warmup
		{`, "scheduler": {"type": "WarmupCosineLR", "params": {"total_num_steps": 10, "warmup_min_ratio": 0.5, "warmup_num_steps": 4, "warmup_type": "linear"}}`, []float64{0, 0.005, 0.00625}},
	}
	for _, c := range cases {
		cfg, err := config.Parse([]byte(`{"train_micro_batch_size_per_gpu": 2, "optimizer": {"type": "SGD", "params": {"lr": 0.01}}` + c.sched + `}`))
		require.NoError(t, err)
		tr, err := deepgo.Initialize(context.Background(), cfg, testmodel.NewMLP(1, 4, 3))
		require.NoError(t, err)
		data := testmodel.NewDataset(1, 8, 4, 3)
		for s, want := range c.want {
			assert.InDelta(t, want, tr.LR(), 1e-15, "%s: LR before step %d", c.sched, s+1)
			_, err := tr.TrainBatch(context.Background(), []model.MicroBatch{data.Micro(s, 2, 0, 2)})
			require.NoError(t, err)

		}
		tr.Close()
	}
}
