package deepgo_test

import (
	"context"
	"fmt"

	"github.com/deepgo-ml/deepgo"
	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/comm/local"
	"github.com/deepgo-ml/deepgo/config"
	"github.com/deepgo-ml/deepgo/internal/testmodel"
)

// Two data-parallel ranks, as goroutines over comm/local, train a small
// MLP (see mlp_test.go: any Go type with Modules and Loss is a Model) with
// ZeRO stage 2 and two accumulation steps.
func ExampleInitialize() {
	cfg, err := config.Parse([]byte(`{
		"train_batch_size": 16,
		"gradient_accumulation_steps": 2,
		"optimizer": {"type": "AdamW", "params": {"lr": 0.01}},
		"zero_optimization": {"stage": 2, "overlap_comm": true}
	}`))
	if err != nil {
		fmt.Println(err)
		return
	}
	data := testmodel.NewDataset(42, 64, 8, 4)
	err = local.Run(context.Background(), 2, local.Options{}, func(ctx context.Context, c comm.Comm) error {
		eng, err := deepgo.Initialize(ctx, cfg, testmodel.NewMLP(1, 8, 16, 4), deepgo.WithComm(c))
		if err != nil {
			return err
		}
		defer eng.Close()
		var first, last float64
		for step := range 10 {
			// this rank's gradient_accumulation_steps micro-batches
			loss, err := eng.TrainBatch(ctx, data.RankBatch(step, 16, c.Size(), c.Rank(), eng.BatchSizes().GradAccum))
			if err != nil {
				return err
			}
			if step == 0 {
				first = loss
			}
			last = loss
		}
		if c.Rank() == 0 {
			fmt.Printf("steps %d, loss went down: %v\n", eng.GlobalSteps(), last < first)
		}
		return nil
	})
	if err != nil {
		fmt.Println(err)
	}
	// Output: steps 10, loss went down: true
}
