package deepgo_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/deepgo-ml/deepgo"
	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/comm/staged"
	"github.com/deepgo-ml/deepgo/config"
	"github.com/deepgo-ml/deepgo/internal/testmodel"
	"github.com/deepgo-ml/deepgo/model"
	"github.com/deepgo-ml/deepgo/nn"
	"github.com/deepgo-ml/deepgo/sim"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// stagingSim is the simulated device with CUDA's way of moving its memory
// over a host comm: WrapComm stages it through host buffers (comm/staged),
// and counts the Releases of what it made.
type stagingSim struct {
	*sim.Backend
	released *atomic.Int32
}

func (b stagingSim) WrapComm(c comm.Comm) (comm.Comm, error) {
	return releaseSpy{staged.New(c, b.Backend), b.released}, nil
}

type releaseSpy struct {
	*staged.Comm
	released *atomic.Int32
}

func (s releaseSpy) Release() error { s.released.Add(1); return s.Comm.Release() }

// TestEngineReleasesItsCommWrapper: an engine whose backend had to wrap
// the trainer's host comm (as CUDA stages through host buffers) releases
// the wrapper's buffers at Close and leaves the trainer's comm open: the
// data-parallel engine and the pipeline engine.
func TestEngineReleasesItsCommWrapper(t *testing.T) {
	for _, c := range []struct{ name, cfg string }{
		{"data-parallel", run{stage: 2, world: 2, gas: 1}.config()},
		{"pipeline", pipeDevCase{pp: 2, dp: 1, gas: 2, sched: "1F1B", virtual: 1}.config()},
	} {
		t.Run(c.name, func(t *testing.T) {
			var released atomic.Int32
			err := newWorld(context.Background(), 2, func(ctx context.Context, cm comm.Comm, opts []deepgo.Option) error {
				cfg, err := config.Parse([]byte(c.cfg))
				if err != nil {
					return err
				}
				sb, err := sim.NewBackend(cm.Rank(), sim.Options{Threads: 1, MaxDelay: -1})
				if err != nil {
					return err
				}
				defer sb.Close()
				var m model.Model
				if c.name == "pipeline" {
					g, err := nn.NewReadyGPT(nn.GPTConfig{Layers: 2, Heads: 2, Width: 32, Vocab: 32, SeqLen: 16}, nil, 1)
					if err != nil {
						return err
					}
					defer g.Free()
					m = g
				} else {
					m = testmodel.NewMLP(1, sizes...) // its donated values are the engine's to free
				}
				tr, err := deepgo.Initialize(ctx, cfg, m, append(opts, deepgo.WithBackend(stagingSim{sb, &released}))...)
				if err != nil {
					return err
				}
				if err := tr.Close(); err != nil {
					return err
				}
				return cm.Barrier(ctx) // the trainer's comm is still open
			})
			require.NoError(t, err)
			assert.Equal(t, int32(2), released.Load(), "one Release per rank")
		})
	}
}
