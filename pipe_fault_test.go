package deepgo_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
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
	"github.com/deepgo-ml/deepgo/tensor"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Pipeline faults: a stage that dies in the middle of a batch, a stage that
// is stuck past the deadline, and ranks that disagree on the schedule. The
// other stages must fail within the comm deadline (plus slack) with an
// error naming the stage at fault, instead of hanging. A stage sees only
// its neighbours, which may be waiting on the faulty stage themselves; the
// roll call after a failed transfer names the stages that did not answer,
// so stages that are not the faulty one's neighbours name it too.

// hookGPT is a GPT whose pipeline parts call hook before each module's
// forward: where the tests inject a death or a stall.
type hookGPT struct {
	*nn.GPT
	hook func(module string) error
	// bwd, when set, runs after each module's Backward (its gradients bound).
	bwd func(m model.Module) error
}

func (h hookGPT) NewPart(start, stop int) (model.Part, error) {
	p, err := h.GPT.NewPart(start, stop)
	if err != nil {
		return nil, err
	}
	return hookPart{p, h.hook, h.bwd}, nil
}

type hookPart struct {
	model.Part
	hook func(string) error
	bwd  func(model.Module) error
}

func (p hookPart) Modules() []model.Module {
	var out []model.Module
	for _, m := range p.Part.Modules() {
		out = append(out, hookModule{m, p.hook, p.bwd})
	}
	return out
}

type hookModule struct {
	model.Module
	hook func(string) error
	bwd  func(model.Module) error
}

func (m hookModule) Backward(ctx context.Context, g model.Activation) (model.Activation, error) {
	out, err := m.Module.Backward(ctx, g)
	if err == nil && m.bwd != nil {
		err = m.bwd(m.Module)
	}
	return out, err
}

func (m hookModule) Forward(ctx context.Context, in model.Activation) (model.Activation, error) {
	if err := m.hook(m.Name()); err != nil {
		return nil, err
	}
	return m.Module.Forward(ctx, in)
}

// withPipeGPT is one rank's pipeline engine over a small GPT (2 blocks,
// width 8, vocab 16, T 8) wrapped by wrap, for the length of fn.
func withPipeGPT(ctx context.Context, c comm.Comm, cfgJSON string, wrap func(*nn.GPT) model.Model, fn func(tr deepgo.Trainer) error) error {
	return withPipeGPTOpts(ctx, cfgJSON, wrap, []deepgo.Option{deepgo.WithComm(c)}, fn)
}

// withPipeGPTOpts is withPipeGPT with Initialize's options (worldFor's:
// the rank's comm, maybe its device).
func withPipeGPTOpts(ctx context.Context, cfgJSON string, wrap func(*nn.GPT) model.Model, opts []deepgo.Option, fn func(tr deepgo.Trainer) error) error {
	return withGPTOpts(ctx, cfgJSON, nn.GPTConfig{Layers: 2, Heads: 2, Width: 8, Vocab: 16, SeqLen: 8}, 1, wrap, opts, fn)
}

// asIsGPT hands withGPTOpts's GPT to Initialize unwrapped.
func asIsGPT(g *nn.GPT) model.Model { return g }

// withGPTOpts is withPipeGPTOpts with the GPT gc, initialized from seed.
func withGPTOpts(ctx context.Context, cfgJSON string, gc nn.GPTConfig, seed uint64, wrap func(*nn.GPT) model.Model, opts []deepgo.Option, fn func(tr deepgo.Trainer) error) error {
	cfg, err := config.Parse([]byte(cfgJSON))
	if err != nil {
		return err
	}
	g, err := nn.NewReadyGPT(gc, nil, seed)
	if err != nil {
		return err
	}
	defer g.Free()
	tr, err := deepgo.Initialize(ctx, cfg, wrap(g), opts...)
	if err != nil {
		return err
	}
	defer tr.Close()
	return fn(tr)
}

// runPipeRanks runs one goroutine per rank of a pp-stage pipeline (no
// local.Run: a rank that returns early aborts nothing, like a process
// that vanished) and returns each rank's error and when it returned.
func runPipeRanks(t *testing.T, pp int, timeout time.Duration, rank func(ctx context.Context, c comm.Comm) error) ([]error, []time.Time) {
	t.Helper()
	w, err := local.NewWorld(pp, local.Options{Timeout: timeout, Threads: 1})
	require.NoError(t, err)
	defer w.Close()
	errs := make([]error, pp)
	took := make([]time.Time, pp)
	var wg sync.WaitGroup
	for r := range pp {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = rank(context.Background(), w.Comm(r))
			took[r] = time.Now()
		}()
	}
	wg.Wait()
	return errs, took
}

func TestPipelineFaults(t *testing.T) {
	const timeout = 500 * time.Millisecond
	mk, err := data.NewMarkov(16, 1, 2, 3)
	require.NoError(t, err)
	corpus := &data.Tokens{IDs: mk.Generate(4000, 4), Vocab: 16}
	const cfgFmt = `{"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": %d,
		"pipeline_model_parallel_size": %d, "pipeline": {"partition": "uniform"},
		"optimizer": {"type": "SGD", "params": {"lr": 0.1}}}`
	// dies makes the faulty stage fail its n-th module forward; stalls makes
	// it sleep there past the deadline. Both record when (faultAt).
	var faultAt time.Time
	dies := func(n int) func(bool, *int) func(string) error {
		return func(faulty bool, seen *int) func(string) error {
			return func(string) error {
				if *seen++; faulty && *seen == n {
					faultAt = time.Now()
					return fmt.Errorf("the stage dies")
				}
				return nil
			}
		}
	}
	stalls := func(n int) func(bool, *int) func(string) error {
		return func(faulty bool, seen *int) func(string) error {
			return func(string) error {
				if *seen++; faulty && *seen == n {
					faultAt = time.Now()
					time.Sleep(4 * timeout)
				}
				return nil
			}
		}
	}
	four := func(bool) int { return 4 }
	cases := []struct {
		name       string
		pp, faulty int // the stage at fault
		micro      func(faulty bool) int
		hook       func(faulty bool, seen *int) func(string) error
		want       string // in every other stage's error
	}{
		{"dead middle stage", 3, 1, four, dies(3), "stages not answering: 1"},
		{"dead last stage", 4, 3, four, dies(2), "stages not answering: 3"},
		{"stuck middle stage", 3, 1, four, stalls(2), "stages not answering: 1"},
		{"stuck first stage", 4, 0, four, stalls(3), "stages not answering: 0"},
		// Initialize's config agreement names the key before the
		// schedules could disagree
		{"configs disagree", 3, 2, func(faulty bool) int {
			if faulty {
				return 8
			}
			return 4
		}, dies(-1), "rank 2 and rank 0 differ in gradient_accumulation_steps (8 vs 4)"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			faultAt = time.Time{}
			start := time.Now()
			errs, took := runPipeRanks(t, tc.pp, timeout, func(ctx context.Context, c comm.Comm) error {
				faulty := c.Rank() == tc.faulty
				seen := 0
				wrap := func(g *nn.GPT) model.Model { return hookGPT{g, tc.hook(faulty, &seen), nil} }
				return withPipeGPT(ctx, c, fmt.Sprintf(cfgFmt, tc.micro(faulty), tc.pp), wrap, func(tr deepgo.Trainer) error {
					for step := range 2 {
						mbs := make([]model.MicroBatch, tc.micro(faulty))
						for i := range mbs {
							mbs[i] = corpus.MakeBatch([]int{2 * (step*8 + i), 2*(step*8+i) + 1}, 8).MicroBatch()
						}
						if _, err := tr.TrainBatch(ctx, mbs); err != nil {
							return err
						}
					}
					return nil
				})
			})
			if faultAt.IsZero() {
				faultAt = start // the schedules disagree from the start
			}
			for s, err := range errs {
				after := took[s].Sub(faultAt)
				t.Logf("stage %d %v after the fault: %v", s, after.Round(time.Millisecond), err)
				if s == tc.faulty && tc.name != "schedules disagree" {
					continue
				}
				require.Error(t, err, "stage %d", s)
				assert.Contains(t, err.Error(), tc.want, "stage %d's error does not name the stage at fault", s)
				// the transfer's deadline, then the roll call's quarter of it,
				// and slack for a loaded machine
				assert.Less(t, after, 2*timeout, "stage %d failed %v after the fault: past the deadline", s, after)
			}
		})
	}
}

// An fp16 overflow on one rank of one stage skips the step on every rank
// of every stage: the stages agree on it before any of them steps.
func TestPipelineOverflowAgreed(t *testing.T) {
	const pp, dp = 2, 2
	mk, err := data.NewMarkov(16, 1, 2, 3)
	require.NoError(t, err)
	corpus := &data.Tokens{IDs: mk.Generate(4000, 4), Vocab: 16}
	cfgJSON := `{"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 2,
		"pipeline_model_parallel_size": 2, "zero_optimization": {"stage": 1},
		"fp16": {"enabled": true, "initial_scale_power": 8, "hysteresis": 1},
		"optimizer": {"type": "AdamW", "params": {"lr": 0.01}}}`
	type outcome struct {
		skipped, steps int
		scale          float64
	}
	got := make([]outcome, pp*dp)
	err = local.Run(context.Background(), pp*dp, local.Options{Timeout: 10 * time.Second, Threads: 1}, func(ctx context.Context, c comm.Comm) error {
		step := 0
		poison := poisonFirstStep(c, &step)
		wrap := func(g *nn.GPT) model.Model { return hookGPT{g, func(string) error { return nil }, poison} }
		return withPipeGPT(ctx, c, cfgJSON, wrap, func(tr deepgo.Trainer) error {
			pe := tr.(*deepgo.PipeEngine)
			for ; step < 2; step++ {
				mbs := make([]model.MicroBatch, 2)
				for i := range mbs {
					k := 4*step + 2*i
					mbs[i] = corpus.MakeBatch([]int{k, k + 1}, 8).MicroBatch()
				}
				if _, err := tr.TrainBatch(ctx, mbs); err != nil {
					return err
				}
				if step == 0 {
					got[c.Rank()] = outcome{pe.SkippedSteps(), pe.GlobalSteps(), pe.LossScale()}
				}
			}
			return nil
		})
	})
	require.NoError(t, err)
	for r, o := range got {
		assert.Equal(t, outcome{1, 1, 128}, o, "rank %d (stage %d) after the overflowing step: skipped, steps, loss scale", r, r/dp)
	}
}

// poisonFirstStep is a hookGPT backward hook that makes the fp16 gradient
// of ln_f overflow in step 0 (*step) on rank 3 alone (with 2 data ranks:
// stage 1, data rank 1).
func poisonFirstStep(c comm.Comm, step *int) func(m model.Module) error {
	return func(m model.Module) error {
		if c.Rank() != 3 || *step != 0 || m.Name() != "transformer.ln_f" {
			return nil
		}
		g := m.Params()[0].Grad
		if g.Device().IsCPU() {
			v, err := g.Uint16s()
			if err != nil {
				return err
			}
			v[0] = 0x7c00 // +Inf in float16
			return nil
		}
		// on a device: copied in, in order with the backward's kernels,
		// by the rank's backend (sim.Comm's)
		bc, ok := c.(interface{ Backend() backend.Backend })
		if !ok {
			return fmt.Errorf("gradient %v on a device, and comm %T has no backend to write it", g, c)
		}
		inf, err := tensor.Empty(tensor.Float16, 1)
		if err != nil {
			return err
		}
		defer inf.Free()
		v, _ := inf.Uint16s()
		v[0] = 0x7c00
		dst, err := g.Slice(0, 1)
		if err != nil {
			return err
		}
		return bc.Backend().Copy(dst, inf)
	}
}

// The pipeline engine runs whole batches: the per-micro-batch calls say
// so, naming them.
func TestPipelineEngineNotSupported(t *testing.T) {
	// ZeRO-2/3 with stages (here from pipeline.stages, which the config's
	// own check, keyed on pipeline_model_parallel_size, does not see)
	cfg, err := config.Parse([]byte(`{"train_micro_batch_size_per_gpu": 1, "pipeline": {"stages": 2},
		"zero_optimization": {"stage": 2}, "optimizer": {"type": "SGD", "params": {"lr": 0.1}}}`))
	require.NoError(t, err)
	g, err := nn.NewReadyGPT(nn.GPTConfig{Layers: 2, Heads: 2, Width: 8, Vocab: 16, SeqLen: 8}, nil, 1)
	require.NoError(t, err)
	defer g.Free()
	_, err = deepgo.Initialize(context.Background(), cfg, g)
	require.ErrorContains(t, err, "zero_optimization.stage 2 with 2 pipeline stages: allowed 0 or 1")
	err = local.Run(context.Background(), 2, local.Options{Timeout: 10 * time.Second, Threads: 1}, func(ctx context.Context, c comm.Comm) error {
		cfgJSON := `{"train_micro_batch_size_per_gpu": 1, "pipeline_model_parallel_size": 2,
			"optimizer": {"type": "SGD", "params": {"lr": 0.1}}}`
		asIs := func(g *nn.GPT) model.Model { return g }
		return withPipeGPT(ctx, c, cfgJSON, asIs, func(tr deepgo.Trainer) error {
			_, ferr := tr.Forward(ctx, model.MicroBatch{})
			for name, err := range map[string]error{"Forward": ferr, "Backward": tr.Backward(ctx), "Step": tr.Step(ctx)} {
				assert.ErrorContains(t, err, name+": not supported", "%s", name)
			}
			return nil
		})
	})
	require.NoError(t, err)
	// after Close every call says so (it used to dereference freed state)
	err = local.Run(context.Background(), 2, local.Options{Timeout: 10 * time.Second, Threads: 1}, func(ctx context.Context, c comm.Comm) error {
		cfgJSON := `{"train_micro_batch_size_per_gpu": 1, "pipeline_model_parallel_size": 2,
			"optimizer": {"type": "SGD", "params": {"lr": 0.1}}}`
		asIs := func(g *nn.GPT) model.Model { return g }
		return withPipeGPT(ctx, c, cfgJSON, asIs, func(tr deepgo.Trainer) error {
			require.NoError(t, tr.Close())
			require.NoError(t, tr.Close(), "Close twice")
			_, terr := tr.TrainBatch(ctx, []model.MicroBatch{{}})
			_, eerr := tr.EvalBatch(ctx, []model.MicroBatch{{}})
			_, perr := tr.Parameters(ctx)
			for name, err := range map[string]error{"TrainBatch": terr, "EvalBatch": eerr, "Parameters": perr, "Save": tr.Save(ctx, t.TempDir(), deepgo.SaveOptions{})} {
				assert.ErrorContains(t, err, name+": the Trainer is closed", "%s", name)
			}
			assert.NotPanics(t, func() { _, _ = tr.Memory(), tr.Timers() })
			assert.NotPanics(t, func() { assert.Equal(t, 0.1, tr.LR(), "LR after Close") })
			return nil
		})
	})
	require.NoError(t, err)
}

// TestPipelineFailedBatchRefusesMore: a TrainBatch that fails after its
// first instruction (here a stage's forward errs once, in the middle of the
// batch) leaves half-accumulated gradients; every later call on every stage
// but Close is refused at once, naming the failure, where a retry would
// have added the next batch's gradients to them. An EvalBatch failing so
// (it may leave a transfer half done, which the next batch would receive)
// does the same. A batch or evaluation refused before it began (the
// schedules disagree, a wrong size) marks nothing: the next one trains.
func TestPipelineFailedBatchRefusesMore(t *testing.T) {
	const timeout = 500 * time.Millisecond
	mk, err := data.NewMarkov(16, 1, 2, 3)
	require.NoError(t, err)
	corpus := &data.Tokens{IDs: mk.Generate(4000, 4), Vocab: 16}
	const cfg = `{"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 4,
		"pipeline_model_parallel_size": 2, "pipeline": {"partition": "uniform"},
		"optimizer": {"type": "SGD", "params": {"lr": 0.1}}}`
	batch := func(n int) []model.MicroBatch {
		mbs := make([]model.MicroBatch, n)
		for i := range mbs {
			mbs[i] = corpus.MakeBatch([]int{2 * i, 2*i + 1}, 8).MicroBatch()
		}
		return mbs
	}
	for _, tc := range []struct {
		name       string
		first      func(stage int) []model.MicroBatch // the batch that fails
		failsOnce  bool                               // stage 1's third module forward errs, once
		thenRefuse bool
		wantErr    string // in the first batch's error, when set
		eval       bool   // the first batch is an EvalBatch
	}{
		{name: "a stage fails mid-batch", first: func(int) []model.MicroBatch { return batch(4) }, failsOnce: true, thenRefuse: true},
		{name: "schedules disagree", first: func(stage int) []model.MicroBatch { return batch(4 + 4*stage) }},
		{name: "every stage short of micro-batches", first: func(int) []model.MicroBatch { return batch(3) },
			wantErr: "was handed 3 micro-batches, gradient_accumulation_steps is 4"},
		{name: "a stage's micro-batch has the wrong size", first: func(stage int) []model.MicroBatch {
			mbs := batch(4)
			if stage == 1 {
				mbs[2] = corpus.MakeBatch([]int{0, 1, 2}, 8).MicroBatch()
			}
			return mbs
		}},
		{name: "a stage fails mid-evaluation", first: func(int) []model.MicroBatch { return batch(3) }, failsOnce: true, thenRefuse: true, eval: true},
		{name: "evaluation: schedules disagree", first: func(stage int) []model.MicroBatch { return batch(2 + stage) }, eval: true,
			wantErr: "were handed different numbers of micro-batches"},
		{name: "evaluation: a stage's micro-batch has the wrong size", first: func(stage int) []model.MicroBatch {
			mbs := batch(2)
			if stage == 1 {
				mbs[1] = corpus.MakeBatch([]int{0, 1, 2}, 8).MicroBatch()
			}
			return mbs
		}, eval: true, wantErr: "train_micro_batch_size_per_gpu"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			errs, _ := runPipeRanks(t, 2, timeout, func(ctx context.Context, c comm.Comm) error {
				seen := 0
				hook := func(string) error {
					if seen++; tc.failsOnce && c.Rank() == 1 && seen == 3 {
						return fmt.Errorf("a transient fault")
					}
					return nil
				}
				wrap := func(g *nn.GPT) model.Model { return hookGPT{g, hook, nil} }
				return withPipeGPT(ctx, c, cfg, wrap, func(tr deepgo.Trainer) error {
					start := time.Now()
					first := tr.TrainBatch
					if tc.eval {
						first = tr.EvalBatch
					}
					if _, err := first(ctx, tc.first(c.Rank())); err == nil {
						return fmt.Errorf("stage %d: the first batch did not fail", c.Rank())
					} else if tc.wantErr != "" && !strings.Contains(err.Error(), tc.wantErr) {
						return fmt.Errorf("stage %d: the first batch: want an error saying %q, got %v", c.Rank(), tc.wantErr, err)
					} else if d := time.Since(start); !tc.thenRefuse && d > timeout/2 {
						return fmt.Errorf("stage %d: a batch refused before it began failed after %v: %v", c.Rank(), d, err)
					}
					start = time.Now()
					_, err := tr.TrainBatch(ctx, batch(4))
					if !tc.thenRefuse {
						return err
					}
					if err == nil || !strings.Contains(err.Error(), "an earlier call failed part way through a batch") {
						return fmt.Errorf("stage %d: the next TrainBatch: want it refused, got %v", c.Rank(), err)
					}
					if d := time.Since(start); d > timeout/2 {
						return fmt.Errorf("stage %d: refused after %v: it waited on a transfer first", c.Rank(), d)
					}
					_, perr := tr.Parameters(ctx)
					serr := tr.Save(ctx, t.TempDir(), deepgo.SaveOptions{})
					_, lerr := tr.Load(ctx, t.TempDir(), deepgo.LoadOptions{})
					_, eerr := tr.EvalBatch(ctx, batch(2))
					for _, e := range []error{perr, serr, lerr, eerr} {
						if e == nil || !strings.Contains(e.Error(), "an earlier call failed part way through a batch") {
							return fmt.Errorf("stage %d: want Parameters, Save, Load and EvalBatch refused, got %v, %v, %v, %v", c.Rank(), perr, serr, lerr, eerr)
						}
					}
					return nil
				})
			})
			for s, err := range errs {
				require.NoError(t, err, "stage %d", s)
			}
		})
	}
}
