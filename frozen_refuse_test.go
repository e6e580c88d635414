package deepgo_test

import (
	"context"
	"regexp"
	"testing"
	"time"

	"github.com/deepgo-ml/deepgo"
	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/comm/local"
	"github.com/deepgo-ml/deepgo/config"
	"github.com/deepgo-ml/deepgo/nn"
	"github.com/stretchr/testify/require"
)

// TestFrozenPipelineStageRefused: a pipeline whose partition leaves a
// virtual stage only frozen parameters (its optimizer would have nothing
// to train) is refused at Initialize on every rank, naming the stage,
// before the stages' collectives could wait for one another.
func TestFrozenPipelineStageRefused(t *testing.T) {
	freeze := regexp.MustCompile(`wte|wpe|h\.0\.`) // stage 0: the embedding and block 0
	err := local.Run(context.Background(), 2, local.Options{Timeout: 30 * time.Second, Threads: 1}, func(ctx context.Context, c comm.Comm) error {
		cfg, err := config.Parse([]byte(`{"train_micro_batch_size_per_gpu": 1, "pipeline_model_parallel_size": 2,
			"pipeline": {"partition": "uniform"}, "optimizer": {"type": "SGD", "params": {"lr": 0.1}}}`))
		if err != nil {
			return err
		}
		g, err := nn.NewReadyGPT(nn.GPTConfig{Layers: 2, Heads: 2, Width: 8, Vocab: 16, SeqLen: 8}, nil, 1)
		if err != nil {
			return err
		}
		defer g.Free()
		for _, p := range g.Params() {
			p.Frozen = freeze.MatchString(p.Name)
		}
		tr, err := deepgo.Initialize(ctx, cfg, g, deepgo.WithComm(c))
		if err == nil {
			tr.Close()
		}
		return err
	})
	require.ErrorContains(t, err, "not supported: every parameter of pipeline virtual stage 0 is frozen")
}
