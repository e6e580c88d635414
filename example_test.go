package deepgo_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/deepgo-ml/deepgo"
	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/comm/local"
	"github.com/deepgo-ml/deepgo/config"
	"github.com/deepgo-ml/deepgo/data"
	"github.com/deepgo-ml/deepgo/examples/mlp"
	"github.com/deepgo-ml/deepgo/model"
	"github.com/deepgo-ml/deepgo/nn"
)

// regression is rank r's micro-batch j of step s: 4 samples of
// y = x[:4] - x[4:8]/2.
func regression(s, r, j int) model.MicroBatch {
	rng := rand.New(rand.NewPCG(uint64(s), uint64(2*r+j)))
	b := mlp.Batch{X: make([]float32, 32), Y: make([]float32, 16), Rows: 4}
	for i := range b.X {
		b.X[i] = float32(rng.NormFloat64())
	}
	for i := range b.Y {
		b.Y[i] = b.X[i/4*8+i%4] - b.X[i/4*8+i%4+4]/2
	}
	return model.MicroBatch{Input: b, Target: b.Y}
}

// Two data-parallel ranks, as goroutines over comm/local, train a
// user-written MLP (package examples/mlp: any Go type with Modules and
// Loss is a model.Model) with ZeRO stage 2 and two accumulation steps.
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
	err = local.Run(context.Background(), 2, local.Options{}, func(ctx context.Context, c comm.Comm) error {
		trainer, err := deepgo.Initialize(ctx, cfg, mlp.New(1, 8, 32, 4), deepgo.WithComm(c))
		if err != nil {
			return err
		}
		defer trainer.Close()
		var first, last float64
		for step := range 30 {
			// this rank's gradient_accumulation_steps micro-batches
			mbs := []model.MicroBatch{regression(step, c.Rank(), 0), regression(step, c.Rank(), 1)}
			loss, err := trainer.TrainBatch(ctx, mbs)
			if err != nil {
				return err
			}
			if step == 0 {
				first = loss
			}
			last = loss
		}
		if c.Rank() == 0 {
			fmt.Printf("steps %d, loss went down: %v\n", trainer.GlobalSteps(), last < first)
		}
		return nil
	})
	if err != nil {
		fmt.Println(err)
	}
	// Output: steps 30, loss went down: true
}

// A training loop that evaluates on held-out data every 10 steps: EvalBatch
// runs the forward pass only (any number of micro-batches), changes
// nothing the next TrainBatch sees, and returns the mean loss over the
// micro-batches and the ranks, the same on every rank.
func ExampleTrainer_EvalBatch() {
	cfg, err := config.Parse([]byte(`{
		"train_batch_size": 16,
		"gradient_accumulation_steps": 2,
		"optimizer": {"type": "AdamW", "params": {"lr": 0.01}},
		"zero_optimization": {"stage": 3}
	}`))
	if err != nil {
		fmt.Println(err)
		return
	}
	err = local.Run(context.Background(), 2, local.Options{}, func(ctx context.Context, c comm.Comm) error {
		trainer, err := deepgo.Initialize(ctx, cfg, mlp.New(1, 8, 32, 4), deepgo.WithComm(c))
		if err != nil {
			return err
		}
		defer trainer.Close()
		// this rank's share of a fixed held-out set: 3 micro-batches
		held := []model.MicroBatch{regression(1000, c.Rank(), 0), regression(1000, c.Rank(), 1), regression(1001, c.Rank(), 0)}
		var evals []float64
		for step := range 31 {
			if step%10 == 0 {
				loss, err := trainer.EvalBatch(ctx, held)
				if err != nil {
					return err
				}
				evals = append(evals, loss)
			}
			mbs := []model.MicroBatch{regression(step, c.Rank(), 0), regression(step, c.Rank(), 1)}
			if _, err := trainer.TrainBatch(ctx, mbs); err != nil {
				return err
			}
		}
		if c.Rank() == 0 {
			fmt.Printf("evaluations %d, held-out loss went down: %v\n", len(evals), evals[len(evals)-1] < evals[0])
		}
		return nil
	})
	if err != nil {
		fmt.Println(err)
	}
	// Output: evaluations 4, held-out loss went down: true
}

// Save a checkpoint with this rank's own state, then load it into a fresh
// engine: Load says what it loaded and hands the client state back.
func ExampleEngine_Save() {
	dir, err := os.MkdirTemp("", "deepgo-example")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	cfg, err := config.Parse([]byte(`{"train_micro_batch_size_per_gpu": 4,
		"optimizer": {"type": "AdamW", "params": {"lr": 0.01}}, "zero_optimization": {"stage": 1}}`))
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx := context.Background()
	a, err := deepgo.Initialize(ctx, cfg, mlp.New(1, 8, 32, 4))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer a.Close()
	for step := range 3 {
		if _, err := a.TrainBatch(ctx, []model.MicroBatch{regression(step, 0, 0)}); err != nil {
			fmt.Println(err)
			return
		}
	}
	err = a.Save(ctx, dir, deepgo.SaveOptions{ClientState: []byte(`{"epoch": 1}`)})
	if err != nil {
		fmt.Println(err)
		return
	}
	b, err := deepgo.Initialize(ctx, cfg, mlp.New(2, 8, 32, 4)) // other initial weights
	if err != nil {
		fmt.Println(err)
		return
	}
	defer b.Close()
	res, err := b.Load(ctx, dir, deepgo.LoadOptions{})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("loaded %s at step %d, client state %s\n", res.Tag, b.GlobalSteps(), res.ClientState)
	// Output: loaded global_step3 at step 3, client state {"epoch":1}
}

// The data path of a language model: a text file becomes tokens
// (data.ReadText: bytes, vocabulary 256; data.ReadArrow and ReadParquet
// read token columns), a DistributedSampler gives each rank its windows,
// MakeBatch turns them into a model.TokenBatch, and MicroBatch hands it
// to the engine with its targets. The GPT computes on the engine's backend.
func Example_textData() {
	dir, err := os.MkdirTemp("", "deepgo-text")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "corpus.txt")
	text := strings.Repeat("the quick brown fox jumps over the lazy dog. ", 200)
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		fmt.Println(err)
		return
	}
	corpus, err := data.ReadText(path)
	if err != nil {
		fmt.Println(err)
		return
	}
	cfg, err := config.Parse([]byte(`{"train_micro_batch_size_per_gpu": 4, "zero_optimization": {"stage": 2},
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
		sampler, err := data.NewDistributedSampler(corpus.NumWindows(T), c.Rank(), c.Size(), 1, true)
		if err != nil {
			return err
		}
		var first, last float64
		for step := range 60 {
			batch := corpus.MakeBatch(sampler.Next(4), T) // this rank's 4 windows
			loss, err := trainer.TrainBatch(ctx, []model.MicroBatch{batch.MicroBatch()})
			if err != nil {
				return err
			}
			if step == 0 {
				first = loss
			}
			last = loss
		}
		if c.Rank() == 0 {
			fmt.Printf("first loss near ln 256: %v, halved in 60 steps: %v\n", math.Abs(first-math.Log(256)) < 0.5, last < first/2)
		}
		return nil
	})
	if err != nil {
		fmt.Println(err)
	}
	// Output: first loss near ln 256: true, halved in 60 steps: true
}

// After training, SaveModel writes the weights for inference as one
// safetensors file (DeepSpeed's save_16bit_model): the whole model, in the
// dtype it computes in (here bf16), whatever ZeRO stage, pipeline or tensor
// parallelism trained it.
func ExampleTrainer_SaveModel() {
	dir, err := os.MkdirTemp("", "deepgo-example")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	cfg, err := config.Parse([]byte(`{"train_micro_batch_size_per_gpu": 4, "bf16": {"enabled": true},
		"optimizer": {"type": "AdamW", "params": {"lr": 0.01}},
		"zero_optimization": {"stage": 3, "stage3_gather_16bit_weights_on_model_save": true}}`))
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx := context.Background()
	tr, err := deepgo.Initialize(ctx, cfg, mlp.New(1, 8, 32, 4))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer tr.Close()
	for step := range 3 {
		if _, err := tr.TrainBatch(ctx, []model.MicroBatch{regression(step, 0, 0)}); err != nil {
			fmt.Println(err)
			return
		}
	}
	if err := tr.SaveModel(ctx, filepath.Join(dir, "export"), deepgo.SaveModelOptions{}); err != nil {
		fmt.Println(err)
		return
	}
	st, err := os.Stat(filepath.Join(dir, "export", deepgo.DefaultModelFile))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(deepgo.DefaultModelFile, st.Size() > 2*(8*32+32+32*4+4))
	// Output: model.safetensors true
}

// Fine-tuning with frozen parameters: a GPT whose embeddings and first
// block are frozen (model.Param.Frozen, PyTorch's requires_grad=False)
// trains the rest. The frozen values never change; they have no
// gradient, fp32 master or optimizer state (Memory().Frozen counts them,
// in the working dtype, whole on every data-parallel rank).
func ExampleInitialize_frozen() {
	cfg, err := config.Parse([]byte(`{
		"train_micro_batch_size_per_gpu": 2,
		"optimizer": {"type": "AdamW", "params": {"lr": 0.01, "weight_decay": 0.1}},
		"zero_optimization": {"stage": 2}
	}`))
	if err != nil {
		fmt.Println(err)
		return
	}
	g, err := nn.NewReadyGPT(nn.GPTConfig{Layers: 2, Heads: 2, Width: 16, Vocab: 32, SeqLen: 8}, nil, 1)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer g.Free()
	frozen := 0
	for _, p := range g.Params() {
		if strings.Contains(p.Name, ".wte.") || strings.Contains(p.Name, ".wpe.") || strings.HasPrefix(p.Name, "transformer.h.0.") {
			p.Frozen = true
			frozen++
		}
	}
	wte, _ := g.Embed.Tok.Data.Float32s()
	before := slices.Clone(wte)
	trainer, err := deepgo.Initialize(context.Background(), cfg, g)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer trainer.Close()
	rng := rand.New(rand.NewPCG(1, 2))
	for range 5 {
		b := model.TokenBatch{B: 2, T: 8, Inputs: make([]int32, 16), Targets: make([]int32, 16)}
		for i := range b.Inputs {
			b.Inputs[i], b.Targets[i] = int32(rng.IntN(32)), int32(rng.IntN(32))
		}
		if _, err := trainer.TrainBatch(context.Background(), []model.MicroBatch{b.MicroBatch()}); err != nil {
			fmt.Println(err)
			return
		}
	}
	params, err := trainer.Parameters(context.Background())
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("frozen parameters:", frozen)
	fmt.Println("wte unchanged:", slices.Equal(before, params["transformer.wte.weight"]))
	fmt.Println("ln_f trained:", params["transformer.ln_f.weight"][0] != 1)
	// Output:
	// frozen parameters: 14
	// wte unchanged: true
	// ln_f trained: true
}
