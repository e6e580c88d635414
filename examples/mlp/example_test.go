package mlp_test

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"os"

	"github.com/deepgo-ml/deepgo"
	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/comm/local"
	"github.com/deepgo-ml/deepgo/config"
	"github.com/deepgo-ml/deepgo/examples/mlp"
	"github.com/deepgo-ml/deepgo/model"
)

// microBatches is rank r's share of step s: gas micro-batches of rows
// samples of a fixed regression (y = x[:4] - x[4:8]/2), the same on every run.
func microBatches(s, r, gas, rows int) []model.MicroBatch {
	out := make([]model.MicroBatch, gas)
	for j := range out {
		rng := rand.New(rand.NewPCG(uint64(s), uint64(r*gas+j)))
		b := mlp.Batch{X: make([]float32, rows*8), Y: make([]float32, rows*4), Rows: rows}
		for i := range b.X {
			b.X[i] = float32(rng.NormFloat64())
		}
		for i := range b.Y {
			b.Y[i] = b.X[i/4*8+i%4] - b.X[i/4*8+i%4+4]/2
		}
		out[j] = model.MicroBatch{Input: b, Target: b.Y}
	}
	return out
}

// train runs steps [from, to) on two in-process ranks under ZeRO stage,
// loading dir's latest checkpoint first when from > 0 and saving at the
// end; it returns rank 0's first and last loss.
func train(stage, from, to int, dir string) (first, last float64, err error) {
	cfg, err := config.Parse(fmt.Appendf(nil, `{"train_batch_size": 16, "gradient_accumulation_steps": 2,
		"optimizer": {"type": "AdamW", "params": {"lr": 0.01}},
		"scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 5, "warmup_max_lr": 0.01}},
		"zero_optimization": {"stage": %d}}`, stage))
	if err != nil {
		return 0, 0, err
	}
	err = local.Run(context.Background(), 2, local.Options{}, func(ctx context.Context, c comm.Comm) error {
		tr, err := deepgo.Initialize(ctx, cfg, mlp.New(7, 8, 32, 32, 4), deepgo.WithComm(c))
		if err != nil {
			return err
		}
		defer tr.Close()
		if from > 0 {
			res, err := tr.Load(ctx, dir, deepgo.LoadOptions{})
			if err != nil {
				return err
			}
			if c.Rank() == 0 {
				fmt.Printf("ZeRO-%d: loaded %s at step %d\n", stage, res.Tag, tr.GlobalSteps())
			}
		}
		for s := from; s < to; s++ {
			loss, err := tr.TrainBatch(ctx, microBatches(s, c.Rank(), 2, 4))
			if err != nil {
				return err
			}
			if c.Rank() == 0 {
				first, last = cmp.Or(first, loss), loss
			}
		}
		return tr.Save(ctx, dir, deepgo.SaveOptions{Tag: fmt.Sprintf("zero%d-step%d", stage, to)})
	})
	return first, last, err
}

// Train under ZeRO-2 on two ranks, save, and go on under ZeRO-3 from the
// checkpoint (any data-parallel world or stage loads it).
func Example() {
	dir, err := os.MkdirTemp("", "mlp-example")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	first, mid, err := train(2, 0, 40, dir)
	if err != nil {
		fmt.Println(err)
		return
	}
	_, last, err := train(3, 40, 80, dir)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("loss fell under ZeRO-2:", mid < first/4, "and went on falling under ZeRO-3:", last < mid)
	// Output:
	// ZeRO-3: loaded zero2-step40 at step 40
	// loss fell under ZeRO-2: true and went on falling under ZeRO-3: true
}
