// Command gpt trains a small GPT the way a deepgo user would write it: a
// DeepSpeed config, a model, deepgo.Initialize, and TrainBatch in a loop, on
// two in-process data-parallel ranks with ZeRO stage 2 on the CPU. The data
// is a synthetic Markov corpus whose entropy rate is the best loss any model
// can reach.
//
//	go run ./examples/gpt
package main

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/deepgo-ml/deepgo"
	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/comm/local"
	"github.com/deepgo-ml/deepgo/config"
	"github.com/deepgo-ml/deepgo/data"
	"github.com/deepgo-ml/deepgo/model"
	"github.com/deepgo-ml/deepgo/nn"
)

const dsConfig = `{
  "train_micro_batch_size_per_gpu": 8,
  "gradient_clipping": 1.0,
  "zero_optimization": {"stage": 2},
  "optimizer": {"type": "AdamW", "params": {"lr": 0.01, "weight_decay": 0.0}}
}`

func main() {
	const vocab, seqLen, batch, steps = 32, 32, 8, 400
	source, err := data.NewMarkov(vocab, 1, 2, 3)
	if err != nil {
		log.Fatal(err)
	}
	corpus := &data.Tokens{IDs: source.Generate(300_000, 4), Vocab: vocab}

	train := func(ctx context.Context, c comm.Comm) error {
		cfg, err := config.Parse([]byte(dsConfig))
		if err != nil {
			return err
		}
		// no backend of its own: the engine computes on the rank's pool
		// (local.Options.Threads below) and hands it to the modules
		gpt, err := nn.NewReadyGPT(nn.GPTConfig{Layers: 2, Heads: 2, Width: 64, Vocab: vocab, SeqLen: seqLen}, nil, 1)
		if err != nil {
			return err
		}
		defer gpt.Free()
		engine, err := deepgo.Initialize(ctx, cfg, gpt, deepgo.WithComm(c))
		if err != nil {
			return err
		}
		defer engine.Close()
		sampler, err := data.NewDistributedSampler(corpus.NumWindows(seqLen), c.Rank(), c.Size(), 5, true)
		if err != nil {
			return err
		}
		for step := 1; step <= steps; step++ {
			b := corpus.MakeBatch(sampler.Next(batch), seqLen)
			loss, err := engine.TrainBatch(ctx, []model.MicroBatch{b.MicroBatch()})
			if err != nil {
				return err
			}
			if c.Rank() == 0 && step%100 == 0 {
				fmt.Printf("step %d loss %.4f (floor %.4f)\n", step, loss, source.EntropyRate())
			}
		}
		return nil
	}
	if err := local.Run(context.Background(), 2, local.Options{Timeout: time.Minute, Threads: 1}, train); err != nil {
		log.Fatal(err)
	}
}
