package deepgo_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/deepgo-ml/deepgo"
	"github.com/deepgo-ml/deepgo/config"
	"github.com/deepgo-ml/deepgo/nn"
	"github.com/stretchr/testify/require"
)

// TestFrozenParallelRefused: frozen parameters with pipeline stages
// are refused at Initialize with an error
// naming the parameter and the layout key, before any collective.
func TestFrozenParallelRefused(t *testing.T) {
	for _, tc := range []struct{ key, want string }{
		{`"pipeline_model_parallel_size": 2`, "not supported: frozen parameter transformer.wpe.weight with pipeline stages (pipeline_model_parallel_size 2)"},
	} {
		t.Run(tc.key, func(t *testing.T) {
			cfg, err := config.Parse([]byte(fmt.Sprintf(`{"train_micro_batch_size_per_gpu": 1, %s,
				"optimizer": {"type": "SGD", "params": {"lr": 0.1}}}`, tc.key)))
			require.NoError(t, err)
			g, err := nn.NewReadyGPT(nn.GPTConfig{Layers: 2, Heads: 2, Width: 8, Vocab: 16, SeqLen: 8}, nil, 1)
			require.NoError(t, err)
			defer g.Free()
			g.Embed.Pos.Frozen = true
			_, err = deepgo.Initialize(context.Background(), cfg, g)
			require.ErrorContains(t, err, tc.want)
		})
	}
}
