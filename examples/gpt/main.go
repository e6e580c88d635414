// Command gpt trains a small GPT the way a deepgo user would write it: a
// DeepSpeed config, a model, deepgo.Initialize, and TrainBatch in a loop, on
// two in-process data-parallel ranks with ZeRO stage 2, on the CPU or a
// device. The data is a synthetic Markov corpus whose entropy rate is the
// best loss any model can reach.
//
//	go run ./examples/gpt [-device cpu|sim|cuda]
//
// With -device sim each rank computes on a simulated device (memory Go may
// not read, kernels on a stream) and the losses are the CPU's to the bit;
// with -device cuda (build tag cuda) both ranks share GPU LOCAL_RANK (0 by
// default), their collectives staged through host memory.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"strconv"
	"time"

	"github.com/deepgo-ml/deepgo"
	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/comm/local"
	"github.com/deepgo-ml/deepgo/config"
	"github.com/deepgo-ml/deepgo/data"
	"github.com/deepgo-ml/deepgo/model"
	"github.com/deepgo-ml/deepgo/nn"
	"github.com/deepgo-ml/deepgo/tensor"
)

const dsConfig = `{
  "train_micro_batch_size_per_gpu": 8,
  "gradient_clipping": 1.0,
  "zero_optimization": {"stage": 2},
  "optimizer": {"type": "AdamW", "params": {"lr": 0.01, "weight_decay": 0.0}}
}`

func main() {
	device := flag.String("device", "cpu", "cpu, sim or cuda")
	flag.Parse()
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
		// (local.Options.Threads below), or on the device WithDevice
		// names, and hands it to the modules
		gpt, err := nn.NewReadyGPT(nn.GPTConfig{Layers: 2, Heads: 2, Width: 64, Vocab: vocab, SeqLen: seqLen}, nil, 1)
		if err != nil {
			return err
		}
		defer gpt.Free()
		opts := []deepgo.Option{deepgo.WithComm(c)}
		switch *device {
		case "cpu":
		case "sim":
			opts = append(opts, deepgo.WithDevice(tensor.Sim(c.Rank())))
		case "cuda":
			gpu, _ := strconv.Atoi(os.Getenv("LOCAL_RANK")) // the launcher's GPU for this process
			opts = append(opts, deepgo.WithDevice(tensor.CUDA(gpu)))
		default:
			return fmt.Errorf("-device %q: want cpu, sim or cuda", *device)
		}
		engine, err := deepgo.Initialize(ctx, cfg, gpt, opts...)
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
