package deepgo_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"testing"
	"time"

	"github.com/deepgo-ml/deepgo"
	"github.com/deepgo-ml/deepgo/backend"
	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/comm/local"
	"github.com/deepgo-ml/deepgo/config"
	"github.com/deepgo-ml/deepgo/model"
	"github.com/deepgo-ml/deepgo/monitor"
	"github.com/deepgo-ml/deepgo/rundir"
	"github.com/deepgo-ml/deepgo/tensor"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A model of plain user modules (Linear, GELU) computing with the
// engine's nn kernels on arena buffers, so that it runs on the CPU backend
// and the simulated device alike, and marks its hidden layers as
// checkpoint segments.

type ckBatch struct {
	X    []float32
	Y    []float32
	Rows int
}

func (b ckBatch) BatchSize() int { return b.Rows }

func ckEnv(ctx context.Context) (backend.NN, *tensor.Arena, error) {
	be, _ := backend.FromContext(ctx)
	k, ok := be.(backend.NN)
	a, ok2 := tensor.ArenaFromContext(ctx)
	if !ok || !ok2 {
		return nil, nil, errors.New("ckpt test model: no nn backend or arena in the context")
	}
	return k, a, nil
}

type ckLinear struct {
	name string
	W, B *model.Param
	x    *tensor.Tensor
}

func (l *ckLinear) Name() string           { return l.name }
func (l *ckLinear) Params() []*model.Param { return []*model.Param{l.W, l.B} }

func (l *ckLinear) Forward(ctx context.Context, in model.Activation) (model.Activation, error) {
	k, a, err := ckEnv(ctx)
	if err != nil {
		return nil, err
	}
	switch v := in.(type) {
	case ckBatch:
		h, err := tensor.FromFloat32(v.X, v.Rows, len(v.X)/v.Rows)
		if err != nil {
			return nil, err
		}
		defer h.Free()
		if l.x, err = a.Float32(h.Shape()...); err == nil {
			err = k.Copy(l.x, h)
		}
		if err != nil {
			return nil, err
		}
	case *tensor.Tensor:
		l.x = v
	default:
		return nil, fmt.Errorf("%s: input %T", l.name, in)
	}
	y, err := a.Float32(l.x.Shape()[0], l.W.Shape[0])
	if err == nil {
		err = k.LinearForward(y, l.x, l.W.Data, l.B.Data)
	}
	return y, err
}

func (l *ckLinear) Backward(ctx context.Context, g model.Activation) (model.Activation, error) {
	k, a, err := ckEnv(ctx)
	if err != nil {
		return nil, err
	}
	din, err := a.Float32(l.x.Shape()...)
	if err == nil {
		err = k.LinearBackward(din, l.W.Grad, l.B.Grad, g.(*tensor.Tensor), l.x, l.W.Data)
	}
	return din, err
}

type ckGELU struct {
	name string
	x    *tensor.Tensor
}

func (g *ckGELU) Name() string           { return g.name }
func (g *ckGELU) Params() []*model.Param { return nil }

func (g *ckGELU) Forward(ctx context.Context, in model.Activation) (model.Activation, error) {
	k, a, err := ckEnv(ctx)
	if err != nil {
		return nil, err
	}
	g.x = in.(*tensor.Tensor)
	y, err := a.Float32(g.x.Shape()...)
	if err == nil {
		err = k.GELUForward(y, g.x, g.x.Numel())
	}
	return y, err
}

func (g *ckGELU) Backward(ctx context.Context, gout model.Activation) (model.Activation, error) {
	k, a, err := ckEnv(ctx)
	if err != nil {
		return nil, err
	}
	din, err := a.Float32(g.x.Shape()...)
	if err == nil {
		err = k.GELUBackward(din, g.x, gout.(*tensor.Tensor), g.x.Numel())
	}
	return din, err
}

// ckNet is Linear-GELU pairs then a Linear head, with a mean squared
// error; segments marks each pair as one checkpoint segment.
type ckNet struct {
	mods     []model.Module
	segments bool
}

func newCkNet(seed uint64, segments bool, sizes ...int) *ckNet {
	rng := rand.New(rand.NewPCG(seed, 3))
	n := &ckNet{segments: segments}
	for i := 1; i < len(sizes); i++ {
		in, out := sizes[i-1], sizes[i]
		w := make([]float32, in*out)
		for j := range w {
			w[j] = float32(rng.NormFloat64() * 0.3)
		}
		b := make([]float32, out)
		for j := range b {
			b[j] = float32(rng.NormFloat64() * 0.1)
		}
		wt, _ := tensor.FromFloat32(w, out, in)
		bt, _ := tensor.FromFloat32(b, out)
		name := fmt.Sprintf("fc%d", i)
		n.mods = append(n.mods, &ckLinear{name: name,
			W: &model.Param{Name: name + ".weight", Shape: []int{out, in}, Data: wt, Donate: true},
			B: &model.Param{Name: name + ".bias", Shape: []int{out}, Data: bt, Donate: true}})
		if i < len(sizes)-1 {
			n.mods = append(n.mods, &ckGELU{name: fmt.Sprintf("act%d", i)})
		}
	}
	return n
}

func (n *ckNet) Modules() []model.Module { return n.mods }

func (n *ckNet) CheckpointSegments() []model.Segment {
	if !n.segments {
		return nil
	}
	var s []model.Segment
	for i := 0; i+2 < len(n.mods); i += 2 {
		s = append(s, model.Segment{First: n.mods[i].Name(), Last: n.mods[i+1].Name()})
	}
	return s
}

func (n *ckNet) Loss(ctx context.Context, out, target model.Activation, scale float64) (float64, model.Activation, error) {
	k, a, err := ckEnv(ctx)
	if err != nil {
		return 0, nil, err
	}
	o := out.(*tensor.Tensor)
	h, err := tensor.Empty(tensor.Float32, o.Shape()...)
	if err != nil {
		return 0, nil, err
	}
	defer h.Free()
	if err := k.Copy(h, o); err != nil {
		return 0, nil, err
	}
	y, _ := h.Float32s()
	t := target.([]float32)
	var loss float64
	for i := range y {
		d := float64(y[i] - t[i])
		loss += d * d / float64(len(y))
		y[i] = float32(2 * d / float64(len(y)) * scale)
	}
	g, err := a.Float32(o.Shape()...)
	if err == nil {
		err = k.Copy(g, h)
	}
	return loss, g, err
}

var ckSizes = []int{6, 16, 16, 16, 3}

func ckData(step, rows int) model.MicroBatch {
	r := rand.New(rand.NewPCG(uint64(step), 11))
	b := ckBatch{Rows: rows, X: make([]float32, rows*ckSizes[0]), Y: make([]float32, rows*ckSizes[len(ckSizes)-1])}
	for i := range b.X {
		b.X[i] = float32(r.NormFloat64())
	}
	for i := range b.Y {
		b.Y[i] = float32(r.NormFloat64())
	}
	return model.MicroBatch{Input: b, Target: b.Y}
}

// ckVariant is one activation_checkpointing setting.
type ckVariant struct {
	name       string
	segments   bool // the model marks segments
	section    string
	tp         int
	dev        string
	stage      int
	steps      int
	wantHost   bool
	partitions int
	extra      string // more top-level config keys, each with a leading comma
}

type ckResult struct {
	losses []float64
	params map[string][]float32
	stats  deepgo.CheckpointStats
	mem    int64 // Memory().DeviceBytes + HostBytes at the end of a forward
}

func (v ckVariant) config() string {
	return fmt.Sprintf(`{"train_micro_batch_size_per_gpu": 8, "gradient_accumulation_steps": 2, "gradient_clipping": 1.0,
		"zero_optimization": {"stage": %d, "reduce_bucket_size": 200, "stage3_param_persistence_threshold": 10},
		"tensor_model_parallel_size": %d,
		"activation_checkpointing": {%s},
		"optimizer": {"type": "AdamW", "params": {"lr": 0.01, "weight_decay": 0.01}}%s}`, v.stage, max(1, v.tp), v.section, v.extra)
}

// ckTrain trains ckNet under v and returns rank 0's losses, parameters
// and checkpoint stats.
func ckTrain(t *testing.T, v ckVariant) ckResult {
	t.Helper()
	var res ckResult
	train := func(ctx context.Context, rank int, opts []deepgo.Option) error {
		cfg, err := config.Parse([]byte(v.config()))
		if err != nil {
			return err
		}
		net := newCkNet(5, v.segments, ckSizes...)
		e, err := initEngine(ctx, cfg, net, opts...)
		if err != nil {
			return err
		}
		defer e.Close()
		for s := range v.steps {
			mbs := []model.MicroBatch{ckData(2*s, 8), ckData(2*s+1, 8)}
			loss, err := e.TrainBatch(ctx, mbs)
			if err != nil {
				return err
			}
			if rank == 0 {
				res.losses = append(res.losses, loss)
			}
		}
		if _, err := e.Forward(ctx, ckData(99, 8)); err != nil {
			return err
		}
		m := e.Memory()
		st := e.CheckpointStats()
		if err := e.Backward(ctx); err != nil {
			return err
		}
		p, err := e.Parameters(ctx)
		if err != nil {
			return err
		}
		if rank == 0 {
			res.params, res.stats, res.mem = p, st, m.DeviceBytes+m.HostBytes
		}
		return nil
	}
	var err error
	if v.tp > 1 {
		err = local.Run(context.Background(), v.tp, local.Options{Timeout: 60 * time.Second, Threads: 1}, func(ctx context.Context, c comm.Comm) error {
			dc, tc, err := deepgo.TensorParallelGroups(ctx, c, v.tp)
			if err != nil {
				return err
			}
			return train(ctx, c.Rank(), []deepgo.Option{deepgo.WithComm(dc), deepgo.WithTensorParallel(tc)})
		})
	} else {
		err = worldFor(v.dev)(context.Background(), 1, func(ctx context.Context, c comm.Comm, opts []deepgo.Option) error {
			return train(ctx, c.Rank(), opts)
		})
	}
	require.NoError(t, err, v.name)
	return res
}

// TestActivationCheckpointingEquivalence: a model of plain user modules
// marking checkpoint segments trains to bit-identical losses and
// parameters with every activation_checkpointing variant as without
// checkpointing (fp32; recomputation is deterministic), on the CPU backend
// and the simulated device, at ZeRO stages 0-3; partition_activations at
// tensor-parallel size 2 keeps half the boundary bytes per rank, and
// cpu_checkpointing on the device keeps them all in host memory.
func TestActivationCheckpointingEquivalence(t *testing.T) {
	const steps = 3
	partition := `"partition_activations": true`
	contiguous := `"partition_activations": true, "contiguous_memory_optimization": true, "number_checkpoints": 3`
	cpu := `"partition_activations": true, "cpu_checkpointing": true`
	extras := `"synchronize_checkpoint_boundary": true, "profile": true`
	for _, dev := range []string{"", "sim"} {
		for stage := 0; stage <= 3; stage++ {
			base := ckTrain(t, ckVariant{name: "none", dev: dev, stage: stage, steps: steps})
			ckpt := ckTrain(t, ckVariant{name: "ckpt", segments: true, dev: dev, stage: stage, steps: steps})
			require.Equal(t, 3, ckpt.stats.Segments)
			require.Positive(t, ckpt.stats.SavedBytes)
			variants := []ckVariant{
				{name: "ckpt+sync+profile", section: extras},
				{name: "contiguous", section: contiguous},
				{name: "number_checkpoints 1", section: `"number_checkpoints": 1`},
				{name: "partition tp1", section: partition},
				{name: "cpu", section: cpu, wantHost: dev != ""},
			}
			if dev == "" && stage < 3 {
				variants = append(variants, ckVariant{name: "partition tp2", section: partition, tp: 2, partitions: 2},
					ckVariant{name: "partition tp2 contiguous", section: contiguous, tp: 2, partitions: 2})
			}
			for _, v := range variants {
				v.segments, v.dev, v.stage, v.steps = true, dev, stage, steps
				name := fmt.Sprintf("%s/stage%d/%s", devName(dev), stage, v.name)
				t.Run(name, func(t *testing.T) {
					got := ckTrain(t, v)
					want := base
					if v.tp > 1 {
						want = ckTrain(t, ckVariant{name: "none tp2", tp: 2, stage: stage, steps: steps})
					}
					assert.Equal(t, want.losses, got.losses, "losses")
					assert.Equal(t, want.params, got.params, "parameters")
					switch {
					case v.partitions > 1:
						assert.Equal(t, ckpt.stats.SavedBytes/int64(v.partitions), got.stats.SavedBytes, "saved bytes per rank")
					case v.wantHost:
						assert.Zero(t, got.stats.SavedBytes, "device bytes")
						assert.Equal(t, ckpt.stats.SavedBytes, got.stats.SavedHostBytes, "host bytes")
					case v.name == "number_checkpoints 1":
						assert.Equal(t, 1, got.stats.Segments)
					case v.name == "ckpt+sync+profile":
						require.Len(t, got.stats.Profile, 3)
						var saved int64
						for _, p := range got.stats.Profile {
							assert.Positive(t, p.Forward, p.First)
							saved += p.SavedBytes
						}
						assert.Equal(t, got.stats.SavedBytes, saved)
						assert.Positive(t, got.stats.Recompute)
					}
				})
			}
		}
	}
}

// A checkpointed segment whose output is not a tensor is refused, naming
// the module.
func TestActivationCheckpointingRefusesOpaqueOutput(t *testing.T) {
	cfg, err := config.Parse([]byte(ckVariant{}.config()))
	require.NoError(t, err)
	net := newCkNet(5, true, ckSizes...)
	net.mods[1] = opaqueOut{net.mods[1]}
	e, err := initEngine(context.Background(), cfg, net)
	require.NoError(t, err)
	defer e.Close()
	_, err = e.Forward(context.Background(), ckData(0, 8))
	require.ErrorContains(t, err, `module "act1" returns deepgo_test.wrapped: not supported`)
}

type wrapped struct{ t *tensor.Tensor }

type opaqueOut struct{ model.Module }

func (o opaqueOut) Forward(ctx context.Context, in model.Activation) (model.Activation, error) {
	out, err := o.Module.Forward(ctx, in)
	if err != nil {
		return nil, err
	}
	return wrapped{out.(*tensor.Tensor)}, nil
}

// With profile, the monitor records each step's recompute time and kept
// bytes (here cpu_checkpointing's, in host memory, on the simulated device).
func TestActivationCheckpointingMonitor(t *testing.T) {
	out := t.TempDir()
	v := ckVariant{name: "profile", segments: true, dev: "sim", steps: 3,
		section: `"partition_activations": true, "cpu_checkpointing": true, "profile": true`,
		extra:   fmt.Sprintf(`, "csv_monitor": {"enabled": true, "output_path": %q, "job_name": "job"}`, out)}
	got := ckTrain(t, v)
	run, err := rundir.Read(filepath.Join(out, "job"))
	require.NoError(t, err)
	host := run.Series[monitor.TagCkptHost]
	require.NotNil(t, host)
	assert.Equal(t, []float64{1024, 1024, 1024}, host.Values)
	assert.Equal(t, int64(1024), got.stats.SavedHostBytes)
	saved := run.Series[monitor.TagCkptSaved]
	require.NotNil(t, saved)
	assert.Equal(t, []float64{0, 0, 0}, saved.Values)
	rec := run.Series[monitor.TagCkptRecompute]
	require.NotNil(t, rec)
	for _, ms := range rec.Values {
		assert.Positive(t, ms)
	}
}

// Where a key cannot act (no TP group, the CPU backend, cpu_checkpointing
// without partitioning, a model without segments), the engine says so in
// its Notes.
func TestActivationCheckpointingNotes(t *testing.T) {
	for _, c := range []struct {
		section string
		segs    bool
		want    []string
	}{
		{`"partition_activations": true, "cpu_checkpointing": true, "synchronize_checkpoint_boundary": true`, true,
			[]string{"partition_activations: no tensor-parallel group", "cpu_checkpointing: the CPU backend", "synchronize_checkpoint_boundary: CPU kernels"}},
		{`"cpu_checkpointing": true`, true, []string{"cpu_checkpointing has no effect without partition_activations"}},
		{`"number_checkpoints": 2`, false, []string{"declares no checkpoint segments (model.Checkpointed), so nothing is recomputed"}},
	} {
		v := ckVariant{section: c.section}
		cfg, err := config.Parse([]byte(v.config()))
		require.NoError(t, err)
		e, err := initEngine(context.Background(), cfg, newCkNet(5, c.segs, ckSizes...))
		require.NoError(t, err)
		notes := fmt.Sprint(e.Notes())
		require.NoError(t, e.Close())
		for _, w := range c.want {
			assert.Contains(t, notes, w, c.section)
		}
	}
}

// badSegments is ckNet with the segments a test gives.
type badSegments struct {
	*ckNet
	segs []model.Segment
}

func (b badSegments) CheckpointSegments() []model.Segment { return b.segs }

// Segments that do not map onto the forward's modules are refused, naming
// the segment and what is wrong.
func TestActivationCheckpointingBadSegments(t *testing.T) {
	for _, c := range []struct {
		name string
		segs []model.Segment
		want string
	}{
		{"unknown module", []model.Segment{{First: "fc1", Last: "nope"}}, `checkpoint segment 0 ("fc1" to "nope"): a module it names is not in this forward's modules`},
		{"reversed", []model.Segment{{First: "act1", Last: "fc1"}}, `checkpoint segment 0 ("act1" to "fc1"): its last module runs before its first`},
		{"overlap", []model.Segment{{First: "fc1", Last: "fc2"}, {First: "fc2", Last: "act2"}}, `checkpoint segment 1 ("fc2" to "act2") overlaps or precedes the segment before it`},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := config.Parse([]byte(ckVariant{}.config()))
			require.NoError(t, err)
			e, err := initEngine(context.Background(), cfg, badSegments{newCkNet(5, true, ckSizes...), c.segs})
			require.NoError(t, err)
			defer e.Close()
			_, err = e.Forward(context.Background(), ckData(0, 8))
			require.ErrorContains(t, err, c.want)
		})
	}
}

// contiguous_memory_optimization sizes its buffer at the forward's first
// boundary; a later boundary of another size is refused.
func TestActivationCheckpointingContiguousSizes(t *testing.T) {
	cfg, err := config.Parse([]byte(ckVariant{section: `"partition_activations": true, "contiguous_memory_optimization": true, "number_checkpoints": 3`}.config()))
	require.NoError(t, err)
	e, err := initEngine(context.Background(), cfg, newCkNet(5, true, 6, 4, 16, 16, 3))
	require.NoError(t, err)
	defer e.Close()
	_, err = e.Forward(context.Background(), ckData(0, 8))
	require.ErrorContains(t, err, "activation_checkpointing.contiguous_memory_optimization: a boundary of 128 float32 elements does not fit")
}

// Under bf16 the recomputed forward runs on the same half weights, so
// checkpointing still changes no bits.
func TestActivationCheckpointingBF16(t *testing.T) {
	for _, dev := range []string{"", "sim"} {
		for _, stage := range []int{0, 3} {
			bf16 := `, "bf16": {"enabled": true}`
			base := ckTrain(t, ckVariant{name: "bf16 none", dev: dev, stage: stage, steps: 3, extra: bf16})
			got := ckTrain(t, ckVariant{name: "bf16 ckpt", segments: true, dev: dev, stage: stage, steps: 3, extra: bf16,
				section: `"partition_activations": true, "cpu_checkpointing": true`})
			assert.Equal(t, base.losses, got.losses, "%s stage %d", devName(dev), stage)
			assert.Equal(t, base.params, got.params, "%s stage %d", devName(dev), stage)
		}
	}
}
