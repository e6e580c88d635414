package nn_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/deepgo-ml/deepgo"
	"github.com/deepgo-ml/deepgo/backend"
	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/comm/local"
	"github.com/deepgo-ml/deepgo/config"
	"github.com/deepgo-ml/deepgo/data"
	"github.com/deepgo-ml/deepgo/model"
	"github.com/deepgo-ml/deepgo/nn"
	"github.com/deepgo-ml/deepgo/sim"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"
)

// A TP or Ulysses GPT computing on a device over a group of host memory
// (comm/local ranks, no engine to wrap them) is refused before any layer
// hands the comm a device tensor, naming the device and what to do.
func TestGPTModelParallelHostCommOnDevice(t *testing.T) {
	for _, tc := range []struct {
		what string
		cfg  func(c comm.Comm) nn.GPTConfig
	}{
		{"tensor parallelism", func(c comm.Comm) nn.GPTConfig { g := tpGPT(32); g.TP = nn.TP{Comm: c}; return g }},
		{"sequence parallelism", func(c comm.Comm) nn.GPTConfig { g := tpGPT(32); g.SP = nn.SP{Comm: c}; return g }},
	} {
		t.Run(tc.what, func(t *testing.T) {
			err := local.Run(context.Background(), 2, local.Options{Timeout: 10 * time.Second, Threads: 1}, func(ctx context.Context, c comm.Comm) error {
				be, err := sim.NewBackend(c.Rank(), sim.Options{Threads: 1})
				if err != nil {
					return err
				}
				defer be.Close()
				g, err := nn.NewReadyGPT(tc.cfg(c), be, eqSeed)
				if err != nil {
					return err
				}
				defer g.Free()
				_, err = g.Forward(nil, make([]int32, 8), make([]int32, 8), 2, 4)
				require.ErrorIs(t, err, backend.ErrUnsupported)
				require.ErrorContains(t, err, tc.what+" on sim:")
				require.ErrorContains(t, err, "over a comm of host memory")
				return nil
			})
			require.NoError(t, err)
		})
	}
}

// A TP 2 training step on the simulated device moves no [N, V/2] logits
// shard and no [N, C] embedding rows through host memory: the
// vocabulary-parallel cross-entropy and the embedding's row mask run as
// device kernels (backend.VocabParallel), and what a step copies to the
// host is per-row scalars (the loss's 2N sums) and the engine's own few.
// The first design staged the logits out and back each step: 4N·V/2 bytes
// each way, 512 KiB here against the 1 KiB allowed.
func TestGPTTensorParallelLogitsStayOnDevice(t *testing.T) {
	const vocab, tp = 4096, 2
	const n = eqB * eqT // tokens per step on each rank (no data parallelism)
	mk, err := data.NewMarkov(vocab, 1, 2, 3)
	require.NoError(t, err)
	corpus := &data.Tokens{IDs: mk.Generate(5000, 4), Vocab: vocab}
	w, err := sim.NewWorldTimeout(tp, sim.Options{Threads: 1, MaxDelay: -1}, 30*time.Second)
	require.NoError(t, err)
	defer w.Close()
	cfg, err := config.Parse([]byte(fmt.Sprintf(`{"train_micro_batch_size_per_gpu": %d, "tensor_model_parallel_size": %d,
		"optimizer": {"type": "AdamW", "params": {"lr": %g}}}`, eqB, tp, eqLR)))
	require.NoError(t, err)
	toHost := make([]int64, tp)
	var g errgroup.Group
	for r := range tp {
		g.Go(func() error {
			ctx := context.Background()
			dc, tc, err := deepgo.TensorParallelGroups(ctx, w.Comm(r), tp)
			if err != nil {
				return err
			}
			defer dc.Close()
			defer tc.Close()
			gc := tpGPT(vocab)
			gc.TP = nn.TP{Comm: tc}
			m, err := nn.NewReadyGPT(gc, nil, eqSeed)
			if err != nil {
				return err
			}
			defer m.Free()
			e, err := deepgo.Initialize(ctx, cfg, m, deepgo.WithComm(dc), deepgo.WithTensorParallel(tc))
			if err != nil {
				return err
			}
			defer e.Close()
			for step := range 2 { // the second step, after the first's allocations
				before := w.Backend(r).CopyStats().ToHostBytes
				if _, err := e.TrainBatch(ctx, []model.MicroBatch{eqBatch(corpus, step, 1, 0).MicroBatch()}); err != nil {
					return err
				}
				toHost[r] = w.Backend(r).CopyStats().ToHostBytes - before
			}
			return nil
		})
	}
	require.NoError(t, g.Wait())
	shard := int64(n * vocab / tp * 4)
	for r, b := range toHost {
		assert.LessOrEqual(t, b, int64(16*n), "rank %d: bytes copied to the host in a step: want at most 4 floats a token (a logits shard is %d bytes)", r, shard)
	}
	t.Logf("bytes copied to the host in a step: %v (a logits shard: %d)", toHost, shard)
}
