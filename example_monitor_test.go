package deepgo_test

import (
	"context"
	"fmt"
	"os"

	"github.com/deepgo-ml/deepgo"
	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/comm/local"
	"github.com/deepgo-ml/deepgo/config"
	"github.com/deepgo-ml/deepgo/examples/mlp"
	"github.com/deepgo-ml/deepgo/model"
	"github.com/deepgo-ml/deepgo/rundir"
)

// csv_monitor writes DeepSpeed's files, an EvalBatch's loss included
// (Train/Samples/eval_loss), and the engine's deepgo_run.json; package
// rundir reads the directory back keyed on optimizer steps (an evaluation
// before training at step 0).
func ExampleTrainer_Monitor() {
	out, err := os.MkdirTemp("", "deepgo-example")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(out)
	cfg, err := config.Parse(fmt.Appendf(nil, `{
		"train_micro_batch_size_per_gpu": 4,
		"gradient_accumulation_steps": 2,
		"optimizer": {"type": "AdamW", "params": {"lr": 0.01}},
		"csv_monitor": {"enabled": true, "output_path": %q, "job_name": "run1"}
	}`, out))
	if err != nil {
		fmt.Println(err)
		return
	}
	var dirs []string
	err = local.Run(context.Background(), 2, local.Options{}, func(ctx context.Context, c comm.Comm) error {
		trainer, err := deepgo.Initialize(ctx, cfg, mlp.New(1, 8, 32, 4), deepgo.WithComm(c))
		if err != nil {
			return err
		}
		defer trainer.Close()
		held := []model.MicroBatch{regression(1000, c.Rank(), 0)}
		for step := range 4 {
			if step%2 == 0 {
				if _, err := trainer.EvalBatch(ctx, held); err != nil {
					return err
				}
			}
			mbs := []model.MicroBatch{regression(step, c.Rank(), 0), regression(step, c.Rank(), 1)}
			if _, err := trainer.TrainBatch(ctx, mbs); err != nil {
				return err
			}
		}
		if c.Rank() == 0 {
			dirs = trainer.Monitor().RunDirs()
		}
		return nil
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	run, err := rundir.Read(dirs[0]) // after Close: the files are flushed
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("train_batch_size", run.Info.TrainBatchSize, "steps", run.Info.Steps)
	fmt.Println("train_loss at steps", run.Get(rundir.TagLoss).Steps)
	fmt.Println("eval_loss at steps", run.Get(rundir.TagEvalLoss).Steps)
	// Output:
	// train_batch_size 16 steps 4
	// train_loss at steps [1 2 3 4]
	// eval_loss at steps [0 2]
}
