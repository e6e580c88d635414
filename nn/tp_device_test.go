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

// A TP 2 or Ulysses SP 2 training step on the simulated device moves no
// activations through host memory: TP's vocabulary-parallel cross-entropy
// and embedding row mask (backend.VocabParallel) and Ulysses's packing
// around its all-to-alls (TransposeBlocks) run as device kernels, and what
// a step copies to the host is per-row scalars (the loss's) and the
// engine's own few, at most 4 floats a token. The first design staged the
// TP logits shard [N, V/2] out and back each step (512 KiB here), and
// Ulysses's q, k, v and attention output at every exchange (64 KiB).
func TestGPTModelParallelStaysOnDevice(t *testing.T) {
	const vocab, ranks = 4096, 2
	mk, err := data.NewMarkov(vocab, 1, 2, 3)
	require.NoError(t, err)
	corpus := &data.Tokens{IDs: mk.Generate(5000, 4), Vocab: vocab}
	for _, tc := range []struct {
		name   string
		key    string
		tokens int // per rank and step
		setup  func(ctx context.Context, c comm.Comm, gc *nn.GPTConfig) (opts []deepgo.Option, shard func(model.TokenBatch) (model.TokenBatch, error), done func(), err error)
	}{
		{"tensor parallelism", "tensor_model_parallel_size", eqB * eqT, func(ctx context.Context, c comm.Comm, gc *nn.GPTConfig) ([]deepgo.Option, func(model.TokenBatch) (model.TokenBatch, error), func(), error) {
			dc, tc, err := deepgo.TensorParallelGroups(ctx, c, ranks)
			if err != nil {
				return nil, nil, nil, err
			}
			gc.TP = nn.TP{Comm: tc}
			whole := func(b model.TokenBatch) (model.TokenBatch, error) { return b, nil }
			return []deepgo.Option{deepgo.WithComm(dc), deepgo.WithTensorParallel(tc)}, whole, func() { dc.Close(); tc.Close() }, nil
		}},
		{"Ulysses", "sequence_parallel_size", eqB * eqT / ranks, func(ctx context.Context, c comm.Comm, gc *nn.GPTConfig) ([]deepgo.Option, func(model.TokenBatch) (model.TokenBatch, error), func(), error) {
			sdc, sc, _, err := deepgo.SequenceParallelGroups(ctx, c, ranks)
			if err != nil {
				return nil, nil, nil, err
			}
			gc.SP = nn.SP{Comm: sc}
			shard := func(b model.TokenBatch) (model.TokenBatch, error) { return b.SequenceShard(sc.Rank(), ranks) }
			return []deepgo.Option{deepgo.WithComm(sdc), deepgo.WithSequenceParallel(sc)}, shard, func() { sdc.Close(); sc.Close() }, nil
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w, err := sim.NewWorldTimeout(ranks, sim.Options{Threads: 1, MaxDelay: -1}, 30*time.Second)
			require.NoError(t, err)
			defer w.Close()
			cfg, err := config.Parse([]byte(fmt.Sprintf(`{"train_micro_batch_size_per_gpu": %d, %q: %d,
				"optimizer": {"type": "AdamW", "params": {"lr": %g}}}`, eqB, tc.key, ranks, eqLR)))
			require.NoError(t, err)
			toHost := make([]int64, ranks)
			var g errgroup.Group
			for r := range ranks {
				g.Go(func() error {
					ctx := context.Background()
					gc := tpGPT(vocab)
					opts, shard, done, err := tc.setup(ctx, w.Comm(r), &gc)
					if err != nil {
						return err
					}
					defer done()
					m, err := nn.NewReadyGPT(gc, nil, eqSeed)
					if err != nil {
						return err
					}
					defer m.Free()
					e, err := deepgo.Initialize(ctx, cfg, m, opts...)
					if err != nil {
						return err
					}
					defer e.Close()
					for step := range 2 { // the second step, after the first's allocations
						b, err := shard(eqBatch(corpus, step, 1, 0))
						if err != nil {
							return err
						}
						before := w.Backend(r).CopyStats().ToHostBytes
						if _, err := e.TrainBatch(ctx, []model.MicroBatch{b.MicroBatch()}); err != nil {
							return err
						}
						toHost[r] = w.Backend(r).CopyStats().ToHostBytes - before
					}
					return nil
				})
			}
			require.NoError(t, g.Wait())
			for r, b := range toHost {
				assert.LessOrEqual(t, b, int64(16*tc.tokens), "rank %d: bytes copied to the host in a step: want at most 4 floats a token", r)
			}
			t.Logf("bytes copied to the host in a step: %v", toHost)
		})
	}
}
