package deepgo_test

import (
	"context"
	"fmt"
	"strings"

	"github.com/deepgo-ml/deepgo"
	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/comm/local"
	"github.com/deepgo-ml/deepgo/config"
	"github.com/deepgo-ml/deepgo/data"
	"github.com/deepgo-ml/deepgo/model"
	"github.com/deepgo-ml/deepgo/nn"
	"github.com/deepgo-ml/deepgo/tensor"
)

// nextTokenAccuracy counts the rows of logits [B·T, V] whose largest
// logit is at the target token.
func nextTokenAccuracy(logits *tensor.Tensor, targets []int32) (hits int, err error) {
	v, err := logits.Float32s()
	if err != nil {
		return 0, err
	}
	vocab := logits.Shape()[logits.Dim()-1]
	for row, want := range targets {
		best := 0
		for j, x := range v[row*vocab : (row+1)*vocab] {
			if x > v[row*vocab+best] {
				best = j
			}
		}
		if int32(best) == want {
			hits++
		}
	}
	return hits, nil
}

// A trainer computes the next-token accuracy of a GPT, which the loss
// alone does not tell: Evaluate with Outputs returns each micro-batch's
// logits (the GPT's last module's output) in host memory the caller owns
// and frees, and PerMicroBatch each micro-batch's loss beside the mean.
// (Under tensor parallelism each rank would get its vocabulary slice of
// the logits, with pipeline stages only the last stage any.)
func ExampleTrainer_Evaluate() {
	corpus := &data.Tokens{Vocab: 256}
	for _, b := range []byte(strings.Repeat("the quick brown fox jumps over the lazy dog. ", 200)) {
		corpus.IDs = append(corpus.IDs, int32(b))
	}
	cfg, err := config.Parse([]byte(`{"train_micro_batch_size_per_gpu": 4, "zero_optimization": {"stage": 3},
		"optimizer": {"type": "AdamW", "params": {"lr": 0.01}}}`))
	if err != nil {
		fmt.Println(err)
		return
	}
	const T = 32
	err = local.Run(context.Background(), 2, local.Options{}, func(ctx context.Context, c comm.Comm) error {
		gpt, err := nn.NewReadyGPT(nn.GPTConfig{Layers: 1, Heads: 2, Width: 32, Vocab: corpus.Vocab, SeqLen: T}, nil, 1)
		if err != nil {
			return err
		}
		defer gpt.Free()
		trainer, err := deepgo.Initialize(ctx, cfg, gpt, deepgo.WithComm(c))
		if err != nil {
			return err
		}
		defer trainer.Close()
		// this rank's held-out windows: 2 micro-batches of 4
		var held []model.TokenBatch
		for i := range 2 {
			k := 250 + (c.Rank()*2+i)*4
			held = append(held, corpus.MakeBatch([]int{k, k + 1, k + 2, k + 3}, T))
		}
		accuracy := func() (float64, []float64, error) {
			mbs := []model.MicroBatch{held[0].MicroBatch(), held[1].MicroBatch()}
			res, err := trainer.Evaluate(ctx, mbs, deepgo.EvalOptions{Outputs: true, PerMicroBatch: true})
			if err != nil {
				return 0, nil, err
			}
			defer res.Free()
			var hits, n int
			for i, logits := range res.Outputs {
				h, err := nextTokenAccuracy(logits, held[i].Targets)
				if err != nil {
					return 0, nil, err
				}
				hits, n = hits+h, n+len(held[i].Targets)
			}
			return float64(hits) / float64(n), res.Losses, nil
		}
		before, _, err := accuracy()
		if err != nil {
			return err
		}
		for step := range 60 {
			k := (step*2 + c.Rank()) * 4 % 240
			batch := corpus.MakeBatch([]int{k, k + 1, k + 2, k + 3}, T)
			if _, err := trainer.TrainBatch(ctx, []model.MicroBatch{batch.MicroBatch()}); err != nil {
				return err
			}
		}
		after, losses, err := accuracy()
		if err != nil {
			return err
		}
		if c.Rank() == 0 {
			fmt.Printf("accuracy before training below 10%%: %v, after above 50%%: %v, losses per micro-batch: %d\n", before < 0.1, after > 0.5, len(losses))
		}
		return nil
	})
	if err != nil {
		fmt.Println(err)
	}
	// Output: accuracy before training below 10%: true, after above 50%: true, losses per micro-batch: 2
}
