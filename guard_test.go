package deepgo_test

import (
	"context"
	"testing"
	"time"

	"github.com/deepgo-ml/deepgo"
	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/config"
	"github.com/deepgo-ml/deepgo/internal/testmodel"
	"github.com/deepgo-ml/deepgo/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// guardEngine is a one-rank engine over the test MLP with its data.
func guardEngine(t *testing.T, stage int, extra string) (*deepgo.Engine, *testmodel.MLP, *testmodel.Dataset) {
	t.Helper()
	cfg, err := config.Parse([]byte(run{stage: stage, world: 1, gas: 1, extra: extra}.config()))
	require.NoError(t, err)
	m := testmodel.NewMLP(1, sizes...)
	e, err := initEngine(context.Background(), cfg, m)
	require.NoError(t, err)
	t.Cleanup(func() { e.Close() })
	return e, m, testmodel.NewDataset(42, 64, sizes[0], sizes[len(sizes)-1])
}

// Every call order other than Forward, Backward, Step per micro-step is
// refused before it changes a number: each of these used to train on
// silently (a second Backward's gradients in one step, a Step that decayed
// the weights without a gradient).
func TestMicroStepOrder(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		name string
		do   func(e *deepgo.Engine, mb model.MicroBatch) error
		want string
	}{
		{"Step alone", func(e *deepgo.Engine, mb model.MicroBatch) error { return e.Step(ctx) }, "had no Forward"},
		{"Forward then Step", func(e *deepgo.Engine, mb model.MicroBatch) error {
			if _, err := e.Forward(ctx, mb); err != nil {
				return err
			}
			return e.Step(ctx)
		}, "a Forward but no Backward"},
		{"Backward then Forward", func(e *deepgo.Engine, mb model.MicroBatch) error {
			if _, err := e.Forward(ctx, mb); err != nil {
				return err
			}
			if err := e.Backward(ctx); err != nil {
				return err
			}
			_, err := e.Forward(ctx, mb)
			return err
		}, "Backward was not followed by Step"},
		{"Backward then TrainBatch", func(e *deepgo.Engine, mb model.MicroBatch) error {
			if _, err := e.Forward(ctx, mb); err != nil {
				return err
			}
			if err := e.Backward(ctx); err != nil {
				return err
			}
			_, err := e.TrainBatch(ctx, []model.MicroBatch{mb})
			return err
		}, "Backward was not followed by Step"},
		{"Backward twice", func(e *deepgo.Engine, mb model.MicroBatch) error {
			if _, err := e.Forward(ctx, mb); err != nil {
				return err
			}
			if err := e.Backward(ctx); err != nil {
				return err
			}
			return e.Backward(ctx)
		}, "this micro-step's Backward already ran: call Step"},
		{"Backward alone", func(e *deepgo.Engine, mb model.MicroBatch) error { return e.Backward(ctx) }, "Backward without a Forward"},
		{"TrainBatch short of micro-batches", func(e *deepgo.Engine, mb model.MicroBatch) error {
			_, err := e.TrainBatch(ctx, nil)
			return err
		}, "TrainBatch: got 0 micro-batches, want gradient_accumulation_steps = 1"},
		{"Backward then EvalBatch", func(e *deepgo.Engine, mb model.MicroBatch) error {
			if _, err := e.Forward(ctx, mb); err != nil {
				return err
			}
			if err := e.Backward(ctx); err != nil {
				return err
			}
			_, err := e.EvalBatch(ctx, []model.MicroBatch{mb})
			return err
		}, "EvalBatch: the last micro-step's Backward was not followed by Step"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e, _, data := guardEngine(t, 2, "")
			before, err := e.Parameters(ctx)
			require.NoError(t, err)
			err = c.do(e, data.Micro(0, globalBatch, 0, globalBatch))
			require.ErrorContains(t, err, c.want)
			after, err := e.Parameters(ctx)
			require.NoError(t, err)
			assert.Equal(t, before, after, "a refused call changed the parameters")
			assert.Zero(t, e.GlobalSteps())
		})
	}
}

// A cancelled context stops every call on a rank of its own before it
// changes anything (on a group the first collective reports it).
func TestCancelledContextOneRank(t *testing.T) {
	for _, stage := range []int{0, 2, 3} {
		e, _, data := guardEngine(t, stage, "")
		before, err := e.Parameters(context.Background())
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_, err = e.TrainBatch(ctx, []model.MicroBatch{data.Micro(0, globalBatch, 0, globalBatch)})
		require.ErrorIs(t, err, context.Canceled, "stage %d", stage)
		require.ErrorIs(t, e.Save(ctx, t.TempDir(), deepgo.SaveOptions{}), context.Canceled)
		_, err = e.Parameters(ctx)
		require.ErrorIs(t, err, context.Canceled)
		_, err = e.EvalBatch(ctx, []model.MicroBatch{data.Micro(0, globalBatch, 0, globalBatch)})
		require.ErrorIs(t, err, context.Canceled)
		after, err := e.Parameters(context.Background())
		require.NoError(t, err)
		assert.Equal(t, before, after, "stage %d: a cancelled TrainBatch stepped", stage)
		assert.Zero(t, e.GlobalSteps())
		// and the engine is still usable: nothing was half done
		_, err = e.TrainBatch(context.Background(), []model.MicroBatch{data.Micro(0, globalBatch, 0, globalBatch)})
		require.NoError(t, err)
	}
}

// On a group, a rank whose context is cancelled still enters its next
// collective, so both ranks stop at once, not after the group's timeout,
// naming the rank; Save, which begins by agreeing, leads with the
// cancellation rather than "could not agree (did every rank take part?)".
func TestCancelledContextGroup(t *testing.T) {
	cfg, err := config.Parse([]byte(run{stage: 2, world: 2, gas: 1}.config()))
	require.NoError(t, err)
	data := testmodel.NewDataset(42, 64, sizes[0], sizes[len(sizes)-1])
	dir := t.TempDir()
	for _, op := range []string{"TrainBatch", "EvalBatch", "Save"} {
		errs := make([]error, 2)
		start := time.Now()
		err = newWorld(context.Background(), 2, func(ctx context.Context, c comm.Comm, opts []deepgo.Option) error {
			m := testmodel.NewMLP(1, sizes...)
			e, err := initEngine(ctx, cfg, m, append(opts, deepgo.WithLog(discard{}))...)
			if err != nil {
				return err
			}
			defer e.Close()
			call := ctx
			if c.Rank() == 1 {
				cctx, cancel := context.WithCancel(ctx)
				cancel()
				call = cctx
			} else {
				// the cancelled rank reaches the collective first: one the
				// others had already completed would not notice
				time.Sleep(50 * time.Millisecond)
			}
			if op == "Save" {
				errs[c.Rank()] = e.Save(call, dir, deepgo.SaveOptions{})
				return nil
			}
			half := globalBatch / 2
			mbs := []model.MicroBatch{data.Micro(0, globalBatch, c.Rank()*half, half)}
			if op == "EvalBatch" {
				_, errs[c.Rank()] = e.EvalBatch(call, mbs)
				return nil
			}
			_, errs[c.Rank()] = e.TrainBatch(call, mbs)
			return nil
		})
		require.NoError(t, err)
		assert.Less(t, time.Since(start), 10*time.Second, "%s: the live rank waited out the timeout", op)
		for r, err := range errs {
			require.ErrorIs(t, err, context.Canceled, "%s: rank %d", op, r)
			assert.ErrorContains(t, err, "rank 1 cancelled its call", "%s: rank %d", op, r)
			if op == "Save" {
				assert.ErrorContains(t, err, "stopped: a rank's call was cancelled or past its deadline", "rank %d", r)
				assert.NotContains(t, err.Error(), "did every rank take part", "rank %d", r)
			}
		}
	}
}

// A failure part way through a micro-step leaves gradients half made: the
// engine says so on every later call instead of training on them.
func TestFailedMicroStepStops(t *testing.T) {
	ctx := context.Background()
	e, _, data := guardEngine(t, 2, "")
	mb := data.Micro(0, globalBatch, 0, globalBatch)
	bad := mb
	bad.Target = mb.Input // 8 wide, where the loss wants 4
	_, err := e.TrainBatch(ctx, []model.MicroBatch{bad})
	require.Error(t, err)
	_, err = e.TrainBatch(ctx, []model.MicroBatch{mb})
	require.ErrorContains(t, err, "Close it and resume from a checkpoint")
	require.ErrorContains(t, e.Save(ctx, t.TempDir(), deepgo.SaveOptions{}), "failed part way")
}

// An evaluation Forward (no Backward) before TrainBatch is replaced by
// TrainBatch's own, as a second Forward replaces the first.
func TestEvalForwardThenTrainBatch(t *testing.T) {
	ctx := context.Background()
	e, _, data := guardEngine(t, 2, "")
	_, err := e.Forward(ctx, data.Micro(1, globalBatch, 0, globalBatch))
	require.NoError(t, err)
	_, err = e.TrainBatch(ctx, []model.MicroBatch{data.Micro(0, globalBatch, 0, globalBatch)})
	require.NoError(t, err)
	assert.Equal(t, 1, e.GlobalSteps())
}

// A TrainBatch that fails on a later micro-batch has accumulated the
// earlier ones' gradients: the engine says so from then on.
func TestTrainBatchFailsMidAccumulation(t *testing.T) {
	ctx := context.Background()
	cfg, err := config.Parse([]byte(run{stage: 2, world: 1, gas: 2}.config()))
	require.NoError(t, err)
	e, err := initEngine(ctx, cfg, testmodel.NewMLP(1, sizes...))
	require.NoError(t, err)
	defer e.Close()
	data := testmodel.NewDataset(42, 64, sizes[0], sizes[len(sizes)-1])
	good := data.Micro(0, globalBatch, 0, globalBatch/2)
	bad := data.Micro(0, globalBatch, globalBatch/2, globalBatch/4) // Forward refuses its size before it starts
	_, err = e.TrainBatch(ctx, []model.MicroBatch{good, bad})
	require.Error(t, err)
	_, err = e.TrainBatch(ctx, []model.MicroBatch{good, good})
	require.ErrorContains(t, err, "Close it and resume from a checkpoint")
	assert.NotPanics(t, func() { _ = e.Stage3Stats() })
}

// After Close every call says so; nothing panics, and Close is idempotent.
func TestUseAfterClose(t *testing.T) {
	ctx := context.Background()
	e, _, data := guardEngine(t, 2, "")
	require.NoError(t, e.Close())
	require.NoError(t, e.Close())
	_, err := e.TrainBatch(ctx, []model.MicroBatch{data.Micro(0, globalBatch, 0, globalBatch)})
	require.ErrorContains(t, err, "closed")
	_, err = e.EvalBatch(ctx, []model.MicroBatch{data.Micro(0, globalBatch, 0, globalBatch)})
	require.ErrorContains(t, err, "EvalBatch: the Trainer is closed")
	_, err = e.Parameters(ctx)
	require.ErrorContains(t, err, "closed")
	require.ErrorContains(t, e.Step(ctx), "closed")
	assert.NotPanics(t, func() { _ = e.Memory(); _ = e.Timers(); _ = e.Stage3Stats() })
	assert.NotPanics(t, func() { assert.Positive(t, e.LR(), "LR after Close (no scheduler)") })
}

// One model object given to two ranks would have both write its Params.
func TestSharedModelRefused(t *testing.T) {
	cfg, err := config.Parse([]byte(run{stage: 2, world: 1, gas: 1}.config()))
	require.NoError(t, err)
	m := testmodel.NewMLP(1, sizes...)
	ctx := context.Background()
	first, err := deepgo.Initialize(ctx, cfg, m)
	require.NoError(t, err)
	_, err = deepgo.Initialize(ctx, cfg, m)
	require.ErrorContains(t, err, "already trained by another open Trainer (rank 0)")
	require.NoError(t, first.Close())
}

func TestParamShapeMismatch(t *testing.T) {
	cfg, err := config.Parse([]byte(run{stage: 0, world: 1, gas: 1}.config()))
	require.NoError(t, err)
	m := testmodel.NewMLP(1, sizes...)
	w := m.Layers[0].Params()[0] // fc1's weight, 16x8
	require.Equal(t, 2, len(w.Shape))
	w.Shape = []int{w.Shape[1], w.Shape[0]}
	_, err = deepgo.Initialize(context.Background(), cfg, m)
	require.ErrorContains(t, err, "but Shape says")
	m.FreeUndonated()
}

// The config's warnings reach the trainer through Notes.
func TestConfigWarningsInNotes(t *testing.T) {
	cfg, err := config.Parse([]byte(`{"train_batch_size": 16, "optimizer": {"type": "SGD", "params": {"lr": 0.1}},
		"zero_optimization": {"stage": 2, "paro_strategy": "NIG"}}`))
	require.NoError(t, err)
	m := testmodel.NewMLP(1, sizes...)
	e, err := deepgo.Initialize(context.Background(), cfg, m, deepgo.WithLog(discard{}))
	require.NoError(t, err)
	defer e.Close()
	assert.Contains(t, e.Notes(), `config warning: zero_optimization.paro_strategy: unknown key, ignored (DeepSpeed rejects it (extra keys are not permitted in this section))`)
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }
