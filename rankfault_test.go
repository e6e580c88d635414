package deepgo_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/deepgo-ml/deepgo"
	"github.com/deepgo-ml/deepgo/backend"
	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/comm/local"
	"github.com/deepgo-ml/deepgo/config"
	"github.com/deepgo-ml/deepgo/internal/testmodel"
	"github.com/deepgo-ml/deepgo/model"
	"github.com/deepgo-ml/deepgo/optim"
	"github.com/deepgo-ml/deepgo/sim"
	"github.com/deepgo-ml/deepgo/tensor"
)

// Rank faults inside an engine step: one of three in-process ranks fails at
// a point of a training step and the other two must return, within the
// operation timeout plus one second, an error whose *comm.Error blames
// exactly that rank, at every ZeRO stage. comm/local's own fault tests
// cover the collectives in isolation; these cover the engine's use of them
// (async bucket reductions, stage-3 prefetches, the boundary's agreements),
// where a lost error or an unbounded wait would hang the survivors.

// faultPoint is where in the step the failing rank fails.
type faultPoint int

const (
	inForward  faultPoint = iota // fc2's Forward
	inBackward                   // fc2's Backward (stages 2-3: fc3's bucket reduction in flight)
	inOverflow                   // Step: the overflow check, before the overflow all-reduce
	inNorm                       // Step: the gradient norm, before its all-gather
)

func (p faultPoint) String() string {
	return [...]string{"forward", "backward", "step-overflow", "step-norm"}[p]
}

// faultMode is how the failing rank fails.
type faultMode int

const (
	modePanic faultMode = iota // panics: local.Run aborts the world naming it
	modeError                  // returns an error: the same
	modeHang                   // blocks until its context ends: the others time out
	modeExit                   // runtime.Goexit, no word to anyone, like a killed process
)

func (m faultMode) String() string { return [...]string{"panic", "error", "hang", "exit"}[m] }

var errInjected = errors.New("injected fault")

const (
	faultTimeout = 300 * time.Millisecond // the world's operation timeout
	faultRank    = 1                      // the failing rank, of faultWorld
	faultWorld   = 3
	faultStep    = 1 // stage 3 prefetches from the second step on
)

// injector fails its rank once, at point during step faultStep. Everything
// it touches runs on the rank's goroutine.
type injector struct {
	point faultPoint
	mode  faultMode
	step  int // the rank's current step, set by the training loop
	fired time.Time
}

// at is called at point p on the failing rank with the rank's context.
func (f *injector) at(ctx context.Context, p faultPoint) error {
	if f == nil || p != f.point || f.step != faultStep || !f.fired.IsZero() {
		return nil
	}
	f.fired = time.Now()
	switch f.mode {
	case modePanic:
		panic(fmt.Sprintf("%v at %v", errInjected, p))
	case modeError:
		return fmt.Errorf("%w at %v", errInjected, p)
	case modeHang:
		<-ctx.Done()
		return context.Cause(ctx)
	default:
		runtime.Goexit()
		return nil
	}
}

// faultyModule runs a testmodel layer, failing at inForward/inBackward.
type faultyModule struct {
	*testmodel.Linear
	f *injector
}

func (m faultyModule) Forward(ctx context.Context, in model.Activation) (model.Activation, error) {
	if err := m.f.at(ctx, inForward); err != nil {
		return nil, err
	}
	return m.Linear.Forward(ctx, in)
}

func (m faultyModule) Backward(ctx context.Context, g model.Activation) (model.Activation, error) {
	if err := m.f.at(ctx, inBackward); err != nil {
		return nil, err
	}
	return m.Linear.Backward(ctx, g)
}

// faultyBackend is the rank's backend, failing at inOverflow (NonFinite)
// and inNorm (SumSquares): only the engine's Step calls those two.
type faultyBackend struct {
	backend.Backend
	f   *injector
	ctx context.Context
}

func (b faultyBackend) NonFinite(xs []*tensor.Tensor) (bool, error) {
	if err := b.f.at(b.ctx, inOverflow); err != nil {
		return false, err
	}
	return b.Backend.NonFinite(xs)
}

func (b faultyBackend) SumSquares(xs []*tensor.Tensor, per []float64) (float64, error) {
	if err := b.f.at(b.ctx, inNorm); err != nil {
		return 0, err
	}
	return b.Backend.SumSquares(xs, per)
}

// TestRankFaultInStep: every stage x fault point x way of failing; see the
// top of this file.
func TestRankFaultInStep(t *testing.T) {
	for _, stage := range []int{0, 1, 2, 3} {
		for _, point := range []faultPoint{inForward, inBackward, inOverflow, inNorm} {
			for _, mode := range []faultMode{modePanic, modeError, modeHang, modeExit} {
				t.Run(fmt.Sprintf("stage%d/%v/%v", stage, point, mode), func(t *testing.T) {
					rankFault(t, stage, &injector{point: point, mode: mode}, "")
				})
			}
		}
	}
}

// TestRankFaultOnDevice: on the simulated device (kernels queued on
// streams with random delays, collectives ordered after them) a failing
// rank is named by the others in time as on the CPU, at every point of a
// step, for the sharded stages.
func TestRankFaultOnDevice(t *testing.T) {
	for _, stage := range []int{2, 3} {
		for _, point := range []faultPoint{inForward, inBackward, inOverflow, inNorm} {
			for _, mode := range []faultMode{modeError, modeHang, modeExit} {
				t.Run(fmt.Sprintf("stage%d/%v/%v", stage, point, mode), func(t *testing.T) {
					rankFault(t, stage, &injector{point: point, mode: mode}, "sim")
				})
			}
		}
	}
}

// survivor is what a rank other than faultRank saw.
type survivor struct {
	err   error
	ended time.Time
	steps int
}

func rankFault(t *testing.T, stage int, f *injector, dev string) {
	// fp16, so that Step checks for overflow; 12 samples a step over 3
	// ranks; fc3's 68 elements fill a gradient bucket
	cfg, err := config.Parse(fmt.Appendf(nil, `{
		"train_batch_size": 12,
		"optimizer": {"type": "AdamW", "params": {"lr": 0.002}},
		"fp16": {"enabled": true, "initial_scale_power": 8},
		"zero_optimization": {"stage": %d, "reduce_bucket_size": 68, "overlap_comm": true,
			"stage3_param_persistence_threshold": 0, "stage3_prefetch_bucket_size": 300}
	}`, stage))
	if err != nil {
		t.Fatal(err)
	}
	data := testmodel.NewDataset(42, 64, sizes[0], sizes[len(sizes)-1])
	var (
		mu   sync.Mutex
		surv = map[int]survivor{}
	)
	done := make(chan error, 1)
	go func() {
		done <- local.Run(context.Background(), faultWorld, local.Options{Timeout: faultTimeout, Threads: 1}, func(ctx context.Context, c comm.Comm) error {
			var inj *injector
			if c.Rank() == faultRank {
				inj = f
			}
			m := testmodel.NewMLP(1, sizes...)
			fc2 := faultyModule{m.Layers[1], inj}
			m.Order = func() []model.Module { return []model.Module{m.Layers[0], fc2, m.Layers[2]} }
			cpu := c.(interface{ Backend() backend.Backend }).Backend()
			if dev == "sim" {
				b, err := sim.NewBackend(c.Rank(), sim.Options{Threads: 1, MaxDelay: simDelay})
				if err != nil {
					return err
				}
				defer b.Close()
				cpu, c = b, sim.NewComm(c, b)
			}
			// the optimizer on the plain backend: optim.New wants its kernels
			opt, err := optim.New(cfg.Optimizer.Type, cfg.Optimizer.Params, cpu)
			if err != nil {
				return err
			}
			defer opt.Close()
			e, err := initEngine(ctx, cfg, m, deepgo.WithComm(c), deepgo.WithBackend(faultyBackend{cpu, inj, ctx}), deepgo.WithOptimizer(opt))
			if err != nil {
				return err
			}
			defer e.Close()
			if err := bucketsSplitAtFC2(e, stage); err != nil {
				return err
			}
			for s := range 3 {
				if inj != nil {
					inj.step = s
				}
				if _, err := e.TrainBatch(ctx, data.RankBatch(s, 12, faultWorld, c.Rank(), 1)); err != nil {
					if inj == nil {
						mu.Lock()
						surv[c.Rank()] = survivor{err, time.Now(), s}
						mu.Unlock()
					}
					return err
				}
			}
			if inj == nil {
				mu.Lock()
				surv[c.Rank()] = survivor{nil, time.Now(), 3}
				mu.Unlock()
			}
			return nil
		})
	}()
	var runErr error
	select {
	case runErr = <-done:
	case <-time.After(faultTimeout + 10*time.Second):
		buf := make([]byte, 1<<20)
		t.Fatalf("ranks still running 10 s past the deadline:\n%s", buf[:runtime.Stack(buf, true)])
	}
	if f.fired.IsZero() {
		t.Fatalf("the fault never fired (Run: %v)", runErr)
	}
	if runErr == nil {
		t.Fatal("local.Run returned nil")
	}
	for r := range faultWorld {
		if r == faultRank {
			continue
		}
		s, ok := surv[r]
		if !ok {
			t.Fatalf("rank %d did not report (Run: %v)", r, runErr)
		}
		checkSurvivor(t, r, s, f)
	}
}

// checkSurvivor: an error blaming exactly faultRank, in time; an abort (the
// failing rank panicked or returned an error) is seen at once, not after
// a timeout.
func checkSurvivor(t *testing.T, r int, s survivor, f *injector) {
	t.Helper()
	var ce *comm.Error
	elapsed := s.ended.Sub(f.fired)
	switch {
	case s.err == nil:
		t.Fatalf("rank %d: trained all %d steps without an error", r, s.steps)
	case s.steps != faultStep:
		t.Fatalf("rank %d: failed at step %d, the fault was at step %d: %v", r, s.steps, faultStep, s.err)
	case !errors.As(s.err, &ce):
		t.Fatalf("rank %d: %v: no *comm.Error in the chain", r, s.err)
	case !slices.Equal(ce.Ranks, []int{faultRank}):
		t.Fatalf("rank %d: %v: blames ranks %v, want [%d]", r, s.err, ce.Ranks, faultRank)
	case !strings.Contains(s.err.Error(), fmt.Sprintf("ranks [%d]", faultRank)):
		t.Fatalf("rank %d: %v: message does not name rank %d", r, s.err, faultRank)
	case elapsed > faultTimeout+time.Second:
		t.Fatalf("rank %d: returned %v after the fault, want <= %v: %v", r, elapsed, faultTimeout+time.Second, s.err)
	case (f.mode == modePanic || f.mode == modeError) && (!errors.Is(s.err, comm.ErrAborted) || elapsed >= faultTimeout):
		t.Fatalf("rank %d: %v after %v: want the abort at once, before the %v timeout", r, s.err, elapsed, faultTimeout)
	}
	t.Logf("rank %d after %v: %v", r, elapsed.Round(time.Millisecond), firstLine(s.err))
}

func firstLine(err error) string {
	s, _, _ := strings.Cut(err.Error(), "\n")
	return s
}

// bucketsSplitAtFC2 checks the precondition of the inBackward cases at
// stages 2-3: fc3's gradients are in a unit of their own, so its reduction
// is issued (overlap_comm) before fc2's Backward runs.
func bucketsSplitAtFC2(e *deepgo.Engine, stage int) error {
	if stage < 2 {
		return nil
	}
	lay := e.ZeRO().Layout()
	for _, u := range lay.UnitsOf(2) {
		if slices.Contains(lay.UnitsOf(1), u) {
			return fmt.Errorf("fc2 and fc3 share unit %d: fc3's reduction would not be in flight during fc2's backward", u)
		}
	}
	return nil
}
