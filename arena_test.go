package deepgo_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/deepgo-ml/deepgo"
	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/config"
	"github.com/deepgo-ml/deepgo/internal/testmodel"
	"github.com/deepgo-ml/deepgo/model"
	"github.com/deepgo-ml/deepgo/tensor"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// arenaMLP is testmodel's MLP whose activations, input gradients and loss
// gradient live in the engine's micro-step arena instead of Go memory: the
// shape of a module written against the memory contract.
type arenaMLP struct {
	inner  *testmodel.MLP
	layers []model.Module
	probe  *arenaProbe
}

// arenaProbe records what the modules allocated and the arena they saw.
type arenaProbe struct {
	mu    sync.Mutex
	arena *tensor.Arena
	bufs  []*tensor.Tensor // since the last take
}

func (p *arenaProbe) take() []*tensor.Tensor {
	p.mu.Lock()
	defer p.mu.Unlock()
	b := p.bufs
	p.bufs = nil
	return b
}

// copyToArena returns b in a buffer from ctx's arena.
func (p *arenaProbe) copyToArena(ctx context.Context, b testmodel.Batch) (testmodel.Batch, error) {
	a, ok := tensor.ArenaFromContext(ctx)
	if !ok {
		return b, errors.New("no arena in the module context")
	}
	t, err := a.Float32(b.Rows, b.Cols)
	if err != nil {
		return b, err
	}
	v, _ := t.Float32s()
	copy(v, b.X)
	p.mu.Lock()
	p.arena = a
	p.bufs = append(p.bufs, t)
	p.mu.Unlock()
	return testmodel.Batch{Rows: b.Rows, Cols: b.Cols, X: v}, nil
}

type arenaLayer struct {
	*testmodel.Linear
	probe *arenaProbe
}

func (l arenaLayer) Forward(ctx context.Context, in model.Activation) (model.Activation, error) {
	out, err := l.Linear.Forward(ctx, in)
	if err != nil {
		return nil, err
	}
	return l.probe.copyToArena(ctx, out.(testmodel.Batch))
}

func (l arenaLayer) Backward(ctx context.Context, g model.Activation) (model.Activation, error) {
	gin, err := l.Linear.Backward(ctx, g)
	if err != nil {
		return nil, err
	}
	return l.probe.copyToArena(ctx, gin.(testmodel.Batch))
}

func newArenaMLP(seed uint64, sizes ...int) *arenaMLP {
	m := &arenaMLP{inner: testmodel.NewMLP(seed, sizes...), probe: &arenaProbe{}}
	for _, l := range m.inner.Layers {
		m.layers = append(m.layers, arenaLayer{l, m.probe})
	}
	return m
}

func (m *arenaMLP) Modules() []model.Module { return m.layers }

func (m *arenaMLP) Loss(ctx context.Context, out, target model.Activation, scale float64) (float64, model.Activation, error) {
	loss, g, err := m.inner.Loss(ctx, out, target, scale)
	if err != nil {
		return 0, nil, err
	}
	ga, err := m.probe.copyToArena(ctx, g.(testmodel.Batch))
	return loss, ga, err
}

// TestArenaPerMicroStep: modules and the loss allocate every activation
// and gradient from the engine's arena; Memory shows them live after
// Forward, 0 after every Backward (every buffer freed, none leaked over 8
// steps), the peak equal to one micro-step's allocations; training gives
// the same bits as the Go-memory MLP; and allocating from the arena
// between micro-steps fails.
func TestArenaPerMicroStep(t *testing.T) {
	for _, r := range []run{{stage: 0, world: 1, gas: 1, steps: 8}, {stage: 3, world: 2, gas: 2, steps: 8}} {
		t.Run(r.String(), func(t *testing.T) {
			want, err := train(t, r)
			require.NoError(t, err)
			rows := globalBatch / (r.world * r.gas)
			var fwd, bwd int64 // bytes one micro-step allocates
			for i := 1; i < len(sizes); i++ {
				fwd += int64(rows * sizes[i] * 4)
				bwd += int64(rows * sizes[i-1] * 4)
			}
			fwd += int64(rows * sizes[len(sizes)-1] * 4) // the loss gradient
			data := testmodel.NewDataset(42, 64, sizes[0], sizes[len(sizes)-1])
			var got map[string][]float32
			err = newWorld(context.Background(), r.world, func(ctx context.Context, c comm.Comm, opts []deepgo.Option) error {
				cfg, err := config.Parse([]byte(r.config()))
				if err != nil {
					return err
				}
				m := newArenaMLP(1, sizes...)
				e, err := initEngine(ctx, cfg, m, opts...)
				if err != nil {
					return err
				}
				defer e.Close()
				for s := range r.steps {
					for j, mb := range data.RankBatch(s, globalBatch, r.world, c.Rank(), r.gas) {
						if _, err := e.Forward(ctx, mb); err != nil {
							return err
						}
						if n := e.Memory().Arena; n != fwd {
							return fmt.Errorf("step %d.%d: %d arena bytes after Forward, want %d", s, j, n, fwd)
						}
						if err := e.Backward(ctx); err != nil {
							return err
						}
						if n := e.Memory().Arena; n != 0 {
							return fmt.Errorf("step %d.%d: %d arena bytes after Backward, want 0", s, j, n)
						}
						for _, b := range m.probe.take() {
							if !b.Storage().Freed() {
								return fmt.Errorf("step %d.%d: arena buffer %v not freed after Backward", s, j, b)
							}
						}
						if err := e.Step(ctx); err != nil {
							return err
						}
					}
				}
				if pk := e.Memory().ArenaPeak; pk != fwd+bwd {
					return fmt.Errorf("arena peak %d bytes, want one micro-step's %d", pk, fwd+bwd)
				}
				if _, err := m.probe.arena.Float32(4); !errors.Is(err, tensor.ErrArenaClosed) {
					return fmt.Errorf("allocating between micro-steps: %v, want ErrArenaClosed", err)
				}
				p, err := e.Parameters(ctx)
				if c.Rank() == 0 {
					got = p
				}
				return err
			})
			require.NoError(t, err)
			d, where := relDiff(want.params, got)
			assert.Zero(t, d, "parameters differ from the Go-memory MLP's at %s", where)
		})
	}
}

// TestArenaForwardWithoutBackward: a second Forward frees what the first
// left in the arena (an evaluation Forward leaks nothing), and Close frees
// what a last Forward left.
func TestArenaForwardWithoutBackward(t *testing.T) {
	cfg, err := config.Parse([]byte(run{stage: 2, world: 1, gas: 1}.config()))
	require.NoError(t, err)
	ctx := context.Background()
	m := newArenaMLP(1, sizes...)
	e, err := initEngine(ctx, cfg, m)
	require.NoError(t, err)
	data := testmodel.NewDataset(42, 64, sizes[0], sizes[len(sizes)-1])
	mb := data.Micro(0, globalBatch, 0, globalBatch)
	_, err = e.Forward(ctx, mb)
	require.NoError(t, err)
	first := m.probe.take()
	one := e.Memory().Arena
	_, err = e.Forward(ctx, mb)
	require.NoError(t, err)
	for _, b := range first {
		assert.True(t, b.Storage().Freed(), "%v of the first Forward still live after the second", b)
	}
	assert.Equal(t, one, e.Memory().Arena, "arena bytes after two Forwards, want one Forward's")
	require.NoError(t, e.Backward(ctx))
	_, err = e.Forward(ctx, mb)
	require.ErrorContains(t, err, "Backward was not followed by Step", "a second micro-step before Step would count its gradients twice")
	require.NoError(t, e.Step(ctx))
	_, err = e.Forward(ctx, mb)
	require.NoError(t, err)
	last := m.probe.take()
	require.NoError(t, e.Close())
	for _, b := range last {
		assert.True(t, b.Storage().Freed(), "%v still live after Close", b)

	}
}
