package deepgo_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/deepgo-ml/deepgo"
	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/comm/local"
	"github.com/deepgo-ml/deepgo/config"
	"github.com/deepgo-ml/deepgo/internal/testmodel"
	"github.com/deepgo-ml/deepgo/model"
)

// The engine tests run every case on the CPU backend over comm/local. A
// CUDA + NCCL run swaps newWorld (and the backend option) for its own
// factory and reuses the same tables.
var newWorld = func(ctx context.Context, n int, fn func(ctx context.Context, c comm.Comm, opts []deepgo.Option) error) error {
	return local.Run(ctx, n, local.Options{Timeout: 30 * time.Second, Threads: 1}, func(ctx context.Context, c comm.Comm) error {
		return fn(ctx, c, []deepgo.Option{deepgo.WithComm(c)})
	})
}

const (
	globalBatch = 16
	steps       = 20
)

var sizes = []int{8, 16, 16, 4}

// run describes one training run.
type run struct {
	stage, world, gas int
	precision         string // "", "fp16", "bf16"
	extra             string // more top-level JSON members, with a leading comma
	zeroExtra         string // zero_optimization members replacing the stage-3 defaults, with a leading comma
	fp16Extra         string // more fp16 members, with a leading comma
	steps             int
	hook              func(rank int, m *testmodel.MLP, e *deepgo.Engine, step int) // before each step
}

func (r run) String() string {
	p := r.precision
	if p == "" {
		p = "fp32"
	}
	if strings.Contains(r.extra, "grad_accum_dtype") {
		p += "+fp32accum"
	}
	return fmt.Sprintf("stage%d/world%d/gas%d/%s", r.stage, r.world, r.gas, p)
}

func (r run) config() string {
	z3 := r.zeroExtra
	if z3 == "" {
		z3 = `, "stage3_param_persistence_threshold": 20, "stage3_prefetch_bucket_size": 300`
	}
	prec := ""
	switch r.precision {
	case "fp16":
		prec = `, "fp16": {"enabled": true, "initial_scale_power": 8` + r.fp16Extra + `}`
	case "bf16":
		prec = `, "bf16": {"enabled": true}`
	}
	return fmt.Sprintf(`{
		"train_batch_size": %d,
		"gradient_accumulation_steps": %d,
		"gradient_clipping": 1.0,
		"optimizer": {"type": "AdamW", "params": {"lr": 0.002, "weight_decay": 0.01}},
		"zero_optimization": {"stage": %d, "reduce_bucket_size": 100, "overlap_comm": true%s}%s%s
	}`, globalBatch, r.gas, r.stage, z3, prec, r.extra)
}

// result is what a run produced, from rank 0.
type result struct {
	losses  []float64
	params  map[string][]float32
	skipped int
	scales  []float64
	engines []*deepgo.Engine // closed; for counters only
	stats   []string
}

func train(t testing.TB, r run) (*result, error) {
	t.Helper()
	if r.steps == 0 {
		r.steps = steps
	}
	data := testmodel.NewDataset(42, 64, sizes[0], sizes[len(sizes)-1])
	res := &result{engines: make([]*deepgo.Engine, r.world)}
	var mu sync.Mutex
	err := newWorld(context.Background(), r.world, func(ctx context.Context, c comm.Comm, opts []deepgo.Option) error {
		cfg, err := config.Parse([]byte(r.config()))
		if err != nil {
			return err
		}
		m := testmodel.NewMLP(uint64(1+c.Rank()*0), sizes...)
		e, err := initEngine(ctx, cfg, m, opts...)
		if err != nil {
			return err
		}
		defer e.Close()
		mu.Lock()
		res.engines[c.Rank()] = e
		mu.Unlock()
		for s := range r.steps {
			if r.hook != nil {
				r.hook(c.Rank(), m, e, s)
			}
			loss, err := e.TrainBatch(ctx, data.RankBatch(s, globalBatch, r.world, c.Rank(), r.gas))
			if err != nil {
				return err
			}
			if c.Rank() == 0 {
				res.losses = append(res.losses, loss)
				res.scales = append(res.scales, e.LossScale())
			}
		}
		p, err := e.Parameters(ctx)
		if err != nil {
			return err
		}
		if c.Rank() == 0 {
			res.params = p
			res.skipped = e.SkippedSteps()
		}
		return nil
	})
	return res, err
}

// relDiff is the largest norm-wise relative error ||got-ref||₂ / ||ref||₂
// over the parameter tensors, and the tensor where it occurs.
func relDiff(ref, got map[string][]float32) (float64, string) {
	worst, where := 0.0, ""
	keys := make([]string, 0, len(ref))
	for k := range ref {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		a, b := ref[k], got[k]
		if len(a) != len(b) {
			return math.Inf(1), k + " (length)"
		}
		var scale, d float64
		for i := range a {
			scale += float64(a[i]) * float64(a[i])
			d += (float64(a[i]) - float64(b[i])) * (float64(a[i]) - float64(b[i]))
		}
		if rd := math.Sqrt(d / max(scale, 1e-300)); rd > worst {
			worst, where = rd, k
		}
	}
	return worst, where
}

func lossDiff(ref, got []float64) float64 {
	worst := 0.0
	for i := range ref {
		worst = max(worst, math.Abs(ref[i]-got[i])/math.Abs(ref[i]))
	}
	return worst
}

var (
	refOnce sync.Once
	ref     *result
	refErr  error
)

func reference(t *testing.T) *result {
	refOnce.Do(func() { ref, refErr = train(t, run{stage: 0, world: 1, gas: 1}) })
	if refErr != nil {
		t.Fatal(refErr)
	}
	return ref
}

// TestEquivalence: every ZeRO stage on 1, 2 and 4 ranks, with 1 and 4
// accumulation steps, matches the single-process non-ZeRO run in fp32 to
// 1e-6 relative: losses of all 20 steps and parameters after them.
func TestEquivalence(t *testing.T) {
	base := reference(t)
	var table strings.Builder
	fmt.Fprintf(&table, "\n%-28s %12s %12s\n", "case", "loss rel", "param rel")
	for _, stage := range []int{0, 1, 2, 3} {
		for _, world := range []int{1, 2, 4} {
			for _, gas := range []int{1, 4} {
				r := run{stage: stage, world: world, gas: gas}
				t.Run(r.String(), func(t *testing.T) {
					got, err := train(t, r)
					if err != nil {
						t.Fatal(err)
					}
					ld := lossDiff(base.losses, got.losses)
					pd, where := relDiff(base.params, got.params)
					fmt.Fprintf(&table, "%-28s %12.2e %12.2e\n", r, ld, pd)
					if ld > 1e-6 {
						t.Errorf("losses differ by %.3g relative (> 1e-6)\nref %v\ngot %v", ld, base.losses, got.losses)
					}
					if pd > 1e-6 {
						t.Errorf("parameters differ by %.3g relative at %s (> 1e-6)", pd, where)
					}
				})
			}
		}
	}
	t.Log(table.String())
}

// TestMixedPrecision: fp16 (dynamic loss scale) and bf16 (fp32 master
// weights) track the fp32 run within about one unit roundoff of the
// format, norm-wise: the fp32 master accumulates updates computed from
// weights and gradients rounded to 2^-11 (fp16) or 2^-8 (bf16) relative,
// so after 20 steps the master differs from the fp32 run by errors of that
// order (measured: fp16 ~7e-5, bf16 ~4e-3). Tolerances: fp16 5e-4 (one
// fp16 roundoff), bf16 1e-2 (2.5 bf16 roundoffs).
func TestMixedPrecision(t *testing.T) {
	base := reference(t)
	tol := map[string][2]float64{ // loss, params
		"fp16": {5e-4, 5e-4},
		"bf16": {1e-2, 1e-2},
	}
	var table strings.Builder
	fmt.Fprintf(&table, "\n%-28s %12s %12s %8s\n", "case", "loss rel", "param rel", "skipped")
	for _, prec := range []string{"fp16", "bf16"} {
		for _, stage := range []int{0, 1, 2, 3} {
			for _, world := range []int{1, 2} {
				r := run{stage: stage, world: world, gas: 1, precision: prec}
				if stage == 2 && world == 2 {
					r.gas = 4
				}
				if prec == "bf16" && world == 2 && stage > 0 {
					// fp32 gradient accumulation and communication
					r.extra = `, "data_types": {"grad_accum_dtype": "fp32"}, "communication_data_type": "fp32"`
				}
				t.Run(r.String(), func(t *testing.T) {
					got, err := train(t, r)
					if err != nil {
						t.Fatal(err)
					}
					ld := lossDiff(base.losses, got.losses)
					pd, where := relDiff(base.params, got.params)
					fmt.Fprintf(&table, "%-28s %12.2e %12.2e %8d\n", r, ld, pd, got.skipped)
					if ld > tol[prec][0] || pd > tol[prec][1] {
						t.Errorf("loss rel %.3g, param rel %.3g at %s: tolerance %v", ld, pd, where, tol[prec])
					}
				})
			}
		}
	}
	t.Log(table.String())
}

// TestAccumulationEquivalence: gradient_accumulation_steps 1 and 4 with the
// same global batch give the same result, per stage, on 2 ranks.
func TestAccumulationEquivalence(t *testing.T) {
	for _, stage := range []int{0, 1, 2, 3} {
		a, err := train(t, run{stage: stage, world: 2, gas: 1})
		if err != nil {
			t.Fatal(err)
		}
		b, err := train(t, run{stage: stage, world: 2, gas: 4})
		if err != nil {
			t.Fatal(err)
		}
		if ld := lossDiff(a.losses, b.losses); ld > 1e-6 {
			t.Errorf("stage %d: losses differ by %.3g", stage, ld)
		}
		if pd, where := relDiff(a.params, b.params); pd > 1e-6 {
			t.Errorf("stage %d: params differ by %.3g at %s", stage, pd, where)
		}
	}
}

// TestOrderMismatch: under stage 3, a rank that runs the modules in a
// different order makes every rank fail at once with an error naming the
// modules, instead of hanging.
func TestOrderMismatch(t *testing.T) {
	start := time.Now()
	data := testmodel.NewDataset(42, 64, sizes[0], sizes[len(sizes)-1])
	var mu sync.Mutex
	var errs []error
	_ = newWorld(context.Background(), 2, func(ctx context.Context, c comm.Comm, opts []deepgo.Option) error {
		cfg, err := config.Parse([]byte(run{stage: 3, world: 2, gas: 1}.config()))
		if err != nil {
			return err
		}
		m := testmodel.NewMLP(1, sizes...)
		e, err := deepgo.Initialize(ctx, cfg, m, opts...)
		if err != nil {
			return err
		}
		defer e.Close()
		if c.Rank() == 1 {
			m.Order = func() []model.Module { return []model.Module{m.Layers[0], m.Layers[2], m.Layers[1]} }
		}
		_, err = e.TrainBatch(ctx, data.RankBatch(0, globalBatch, 2, c.Rank(), 1))
		mu.Lock()
		errs = append(errs, err)
		mu.Unlock()
		return err
	})
	if time.Since(start) > 10*time.Second {
		t.Errorf("took %v: must fail fast", time.Since(start))
	}
	var found bool
	for _, err := range errs {
		var oe *deepgo.OrderError
		if errors.As(err, &oe) {
			found = true
			if oe.Want != `"fc2"` || oe.Got != `"fc3"` || oe.Position != 1 {
				t.Errorf("OrderError = %+v, want fc2 vs fc3 at position 1", oe)
			}
			t.Logf("error: %v", err)
		}
	}
	if !found {
		t.Fatalf("no OrderError among %v", errs)
	}
}
