package nn_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/deepgo-ml/deepgo"
	"github.com/deepgo-ml/deepgo/backend"
	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/comm/local"
	"github.com/deepgo-ml/deepgo/config"
	"github.com/deepgo-ml/deepgo/data"
	"github.com/deepgo-ml/deepgo/nn"
)

// TestGPTEngineZeRO2 trains a small GPT with the engine, ZeRO stage 2 over
// two in-process ranks, on a synthetic order-1 Markov corpus, and requires
// the loss to come within 10% of the source's entropy floor.
func TestGPTEngineZeRO2(t *testing.T) {
	if testing.Short() {
		t.Skip("training run")
	}
	const V, T, B, steps = 16, 16, 8, 300
	m, err := data.NewMarkov(V, 1, 2, 3)
	if err != nil {
		t.Fatal(err)
	}
	floor := m.EntropyRate()
	corpus := &data.Tokens{IDs: m.Generate(200000, 4), Vocab: V}
	cfgJSON := `{"train_micro_batch_size_per_gpu": 8, "gradient_accumulation_steps": 1,
		"gradient_clipping": 1.0, "zero_optimization": {"stage": 2},
		"optimizer": {"type": "AdamW", "params": {"lr": 0.01, "weight_decay": 0.0}}}`
	losses := make([]float64, 2)
	err = local.Run(context.Background(), 2, local.Options{Timeout: 60 * time.Second, Threads: 1}, func(ctx context.Context, c comm.Comm) error {
		cfg, err := config.Parse([]byte(cfgJSON))
		if err != nil {
			return err
		}
		be, err := backend.NewCPU(1)
		if err != nil {
			return err
		}
		defer be.Close()
		g, err := nn.NewReadyGPT(nn.GPTConfig{Layers: 1, Heads: 2, Width: 32, Vocab: V, SeqLen: T}, be.Ctx(), 1)
		if err != nil {
			return err
		}
		defer g.Free()
		e, err := deepgo.Initialize(ctx, cfg, g, deepgo.WithComm(c), deepgo.WithBackend(be))
		if err != nil {
			return err
		}
		defer e.Close()
		s, err := data.NewDistributedSampler(corpus.NumWindows(T), c.Rank(), c.Size(), 5, true)
		if err != nil {
			return err
		}
		var avg float64
		for step := 0; step < steps; step++ {
			b := corpus.MakeBatch(s.Next(B), T)
			nb := nn.Batch{Inputs: b.Inputs, Targets: b.Targets, B: B, T: T}
			loss, err := e.TrainBatch(ctx, []deepgo.MicroBatch{{Input: nb, Target: nb}})
			if err != nil {
				return err
			}
			if step >= steps-50 {
				avg += loss / 50
			}
		}
		losses[c.Rank()] = avg
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("final loss (mean of last 50 steps) %.4f, entropy floor %.4f nats", losses[0], floor)
	if losses[0] != losses[1] {
		t.Errorf("ranks disagree on the loss: %v", losses)
	}
	if losses[0] > 1.1*floor {
		t.Errorf("loss %.4f not within 10%% of the floor %.4f", losses[0], floor)
	}
}

// The layers compute in float32: an engine that binds float16 weights gets
// an error naming the parameter, not a read past the end of its buffer.
func TestGPTRefusesHalfPrecision(t *testing.T) {
	for _, prec := range []string{`"fp16": {"enabled": true}`, `"bf16": {"enabled": true}`} {
		cfg, err := config.Parse([]byte(`{"train_micro_batch_size_per_gpu": 2, ` + prec + `,
			"optimizer": {"type": "AdamW", "params": {"lr": 0.01}}}`))
		if err != nil {
			t.Fatal(err)
		}
		be, err := backend.NewCPU(1)
		if err != nil {
			t.Fatal(err)
		}
		g, err := nn.NewReadyGPT(nn.GPTConfig{Layers: 1, Heads: 2, Width: 16, Vocab: 16, SeqLen: 4}, be.Ctx(), 1)
		if err != nil {
			t.Fatal(err)
		}
		e, err := deepgo.Initialize(context.Background(), cfg, g, deepgo.WithBackend(be))
		if err != nil {
			t.Fatal(err)
		}
		ids := []int32{1, 2, 3, 4, 5, 6, 7, 8}
		b := nn.Batch{Inputs: ids, Targets: ids, B: 2, T: 4}
		_, err = e.TrainBatch(context.Background(), []deepgo.MicroBatch{{Input: b, Target: b}})
		if err == nil || !strings.Contains(err.Error(), "not supported") || !strings.Contains(err.Error(), "transformer.wte") {
			t.Errorf("%s: TrainBatch = %v, want a not-supported error naming transformer.wte", prec, err)
		}
		e.Close()
		g.Free()
		be.Close()
	}
}
