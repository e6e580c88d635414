package deepgo_test

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/deepgo-ml/deepgo"
	"github.com/deepgo-ml/deepgo/checkpoint"
	"github.com/deepgo-ml/deepgo/checkpoint/safetensors"
	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/config"
	"github.com/deepgo-ml/deepgo/internal/testmodel"
	"github.com/deepgo-ml/deepgo/tensor"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// ckptSteps is the length of the checkpoint tests' runs; they save after
// ckptAt steps.
const (
	ckptSteps = 6
	ckptAt    = 3
)

// segment trains one fresh engine per rank of a fresh world: it loads
// load (a save directory) first when set, trains steps [from, to), saves
// to save when set (tag "", client state {"rank": r, "step": to}), and
// returns rank 0's parameters and every rank's loaded client state.
type segment struct {
	r          run
	load, save string
	from, to   int
	async      bool
	check      func(rank int, e *deepgo.Engine) error                      // after load
	prepare    func(ctx context.Context, rank int, e *deepgo.Engine) error // before load
}

func (s segment) train(t testing.TB) (map[string][]float32, []json.RawMessage, error) {
	t.Helper()
	sizes := s.r.layers()
	data := testmodel.NewDataset(42, 64, sizes[0], sizes[len(sizes)-1])
	var params map[string][]float32
	clients := make([]json.RawMessage, s.r.world)
	var mu sync.Mutex
	err := worldFor(s.r.dev)(context.Background(), s.r.world, func(ctx context.Context, c comm.Comm, opts []deepgo.Option) error {
		cfg, err := config.Parse([]byte(s.r.config()))
		if err != nil {
			return err
		}
		e, err := initEngine(ctx, cfg, testmodel.NewMLP(1, sizes...), opts...)
		if err != nil {
			return err
		}
		defer e.Close()
		if s.prepare != nil {
			if err := s.prepare(ctx, c.Rank(), e); err != nil {
				return err
			}
		}
		if s.load != "" {
			res, err := e.Load(ctx, s.load, deepgo.LoadOptions{})
			if err != nil {
				return err
			}
			mu.Lock()
			clients[c.Rank()] = res.ClientState
			mu.Unlock()
			if e.GlobalSteps() != s.from {
				return fmt.Errorf("rank %d: loaded global steps %d, want %d", c.Rank(), e.GlobalSteps(), s.from)
			}
			if s.check != nil {
				if err := s.check(c.Rank(), e); err != nil {
					return err
				}
			}
		}
		for st := s.from; st < s.to; st++ {
			if _, err := e.TrainBatch(ctx, data.RankBatch(st, globalBatch, s.r.world, c.Rank(), s.r.gas)); err != nil {
				return err
			}
		}
		if s.save != "" {
			cl := json.RawMessage(fmt.Sprintf(`{"rank":%d,"step":%d}`, c.Rank(), s.to))
			save := e.Save
			if s.async {
				save = e.SaveAsync
			}
			if err := save(ctx, s.save, deepgo.SaveOptions{ClientState: cl}); err != nil {
				return err
			}
		}
		p, err := e.Parameters(ctx)
		if err != nil {
			return err
		}
		if c.Rank() == 0 {
			params = p
		}
		return nil // Close waits for an async save
	})
	return params, clients, err
}

// bitEqual reports the first parameter element that differs bitwise.
func bitEqual(want, got map[string][]float32) error {
	if len(want) != len(got) {
		return fmt.Errorf("%d parameters, want %d", len(got), len(want))
	}
	for k, a := range want {
		b := got[k]
		if len(a) != len(b) {
			return fmt.Errorf("%s: %d elements, want %d", k, len(b), len(a))
		}
		for i := range a {
			if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
				return fmt.Errorf("%s[%d] = %v, uninterrupted run has %v", k, i, b[i], a[i])
			}
		}
	}
	return nil
}

// TestCheckpointBitwiseResume: for stages 0-3 in fp32, bf16 and fp16
// (dynamic loss scale), saving at step 3 and loading into fresh engines of
// a fresh world gives, at step 6, parameters bit-identical to an
// uninterrupted run, and each rank gets its client state back: on the CPU,
// on the simulated device with kernel delays, and from one to the other
// (a checkpoint does not depend on where it was trained).
func TestCheckpointBitwiseResume(t *testing.T) {
	t.Parallel()
	for _, stage := range []int{0, 1, 2, 3} {
		for _, prec := range []string{"", "bf16", "fp16"} {
			devs := [][2]string{{"", ""}, {"sim+delay", "sim+delay"}}
			if stage == 2 && prec == "fp16" || stage == 3 && prec == "" {
				devs = append(devs, [2]string{"sim+delay", ""}, [2]string{"", "sim"})
			}
			for _, dev := range devs {
				r := run{stage: stage, world: 2, gas: 2, precision: prec, steps: ckptSteps}
				name := r.String() + "/" + devName(dev[0]) + "->" + devName(dev[1])
				t.Run(name, func(t *testing.T) {
					t.Parallel()
					ref, err := train(t, r)
					require.NoError(t, err)
					dir := t.TempDir()
					saver, loader := r, r
					saver.dev, loader.dev = dev[0], dev[1]
					_, _, err = (segment{r: saver, save: dir, from: 0, to: ckptAt}).train(t)
					require.NoError(t, err)
					got, clients, err := segment{r: loader, load: dir, from: ckptAt, to: ckptSteps}.train(t)
					require.NoError(t, err)
					require.NoError(t, bitEqual(ref.params, got))
					for rank, c := range clients {
						assert.Equal(t, fmt.Sprintf(`{"rank":%d,"step":%d}`, rank, ckptAt), string(c), "rank %d: client state", rank)
					}
				})
			}
		}
	}
}

// devName names a test device for subtest names.
func devName(dev string) string {
	if dev == "" {
		return "cpu"
	}
	return dev
}

// TestCheckpointAsyncResume: a background save (SaveAsync, waited for by
// Close) resumes bit-identically too, and keep_n_most_recent rotates.
func TestCheckpointAsyncResume(t *testing.T) {
	t.Parallel()
	r := run{stage: 2, world: 2, gas: 1, steps: ckptSteps, extra: `, "checkpoint": {"keep_n_most_recent": 1}`}
	ref, err := train(t, r)
	require.NoError(t, err)
	dir := t.TempDir()
	_, _, err = (segment{r: r, save: dir, from: 0, to: 1, async: true}).train(t)
	require.NoError(t, err)
	_, _, err = (segment{r: r, load: dir, save: dir, from: 1, to: ckptAt, async: true}).train(t)
	require.NoError(t, err)
	all, err := checkpoint.List(nil, dir)
	require.NoError(t, err, "after rotation")
	require.Len(t, all, 1, "after rotation: want only %s", checkpoint.DefaultTag(ckptAt))
	require.Equal(t, checkpoint.DefaultTag(ckptAt), all[0].Tag, "after rotation")
	got, _, err := segment{r: r, load: dir, from: ckptAt, to: ckptSteps}.train(t)
	require.NoError(t, err)
	require.NoError(t, bitEqual(ref.params, got))
}

// TestCheckpointReshard: checkpoints of 4 ranks load into 1 and 2 ranks,
// and of 2 ranks into 4, for stages 0-3 (the gathered format too), and the
// continued training matches the uninterrupted run at the new world size
// to the equivalence tolerance (1e-6 relative), on the CPU and on the
// simulated device.
func TestCheckpointReshard(t *testing.T) {
	t.Parallel()
	for _, stage := range []int{0, 1, 2, 3} {
		for _, w := range [][2]int{{4, 1}, {4, 2}, {2, 4}} {
			for _, dev := range []string{"", "sim+delay"} {
				t.Run(fmt.Sprintf("stage%d/%dto%d/%s", stage, w[0], w[1], devName(dev)), func(t *testing.T) {
					t.Parallel()
					extra := ""
					if stage == 1 {
						extra = `, "checkpoint": {"zero_checkpoint": false}` // gathered on rank 0
					}
					from := run{stage: stage, world: w[0], gas: 1, steps: ckptSteps, extra: extra, dev: dev}
					to := run{stage: stage, world: w[1], gas: 1, steps: ckptSteps, dev: dev}
					ref, err := train(t, to)
					require.NoError(t, err)
					dir := t.TempDir()
					_, _, err = (segment{r: from, save: dir, from: 0, to: ckptAt}).train(t)
					require.NoError(t, err)
					got, clients, err := segment{r: to, load: dir, from: ckptAt, to: ckptSteps}.train(t)
					require.NoError(t, err)
					pd, where := relDiff(ref.params, got)
					assert.LessOrEqual(t, pd, 1e-6, "parameters differ, relative, at %s", where)
					for rank, c := range clients {
						src := rank
						if rank >= w[0] {
							src = 0
						}
						assert.Equal(t, fmt.Sprintf(`{"rank":%d,"step":%d}`, src, ckptAt), string(c), "rank %d: client state", rank)
					}
				})
			}
		}
	}
}

// TestCheckpointStageChange: a stage-2 checkpoint loads into stage 3 (a
// different unit layout) and continues as the stage-3 run does.
func TestCheckpointStageChange(t *testing.T) {
	t.Parallel()
	from := run{stage: 2, world: 2, gas: 1, steps: ckptSteps}
	to := run{stage: 3, world: 2, gas: 1, steps: ckptSteps}
	ref, err := train(t, to)
	require.NoError(t, err)
	dir := t.TempDir()
	_, _, err = (segment{r: from, save: dir, from: 0, to: ckptAt}).train(t)
	require.NoError(t, err)
	got, _, err := segment{r: to, load: dir, from: ckptAt, to: ckptSteps}.train(t)
	require.NoError(t, err)
	pd, where := relDiff(ref.params, got)
	assert.LessOrEqual(t, pd, 1e-6, "parameters differ, relative, at %s", where)
}

// TestCheckpointCorruptLoad: a load from a checkpoint with one damaged
// data file fails on every rank, names the file, and leaves every engine
// unchanged (parameters, counters, and the training that follows).
func TestCheckpointCorruptLoad(t *testing.T) {
	t.Parallel()
	r := run{stage: 2, world: 2, gas: 1, precision: "bf16", steps: ckptSteps}
	ref, err := train(t, r) // uninterrupted
	require.NoError(t, err)
	dir := t.TempDir()
	_, _, err = (segment{r: r, save: dir, from: 0, to: 1}).train(t)
	require.NoError(t, err)
	files, _ := filepath.Glob(filepath.Join(dir, checkpoint.DefaultTag(1), "zero_pp_rank_1_*optim*.safetensors"))
	require.Len(t, files, 1, "rank 1's optimizer file")
	bad := files[0]
	b, err := os.ReadFile(bad)
	require.NoError(t, err)
	b[len(b)-3] ^= 0x10
	require.NoError(t, os.WriteFile(bad, b, 0o644))

	data := testmodel.NewDataset(42, 64, sizes[0], sizes[len(sizes)-1])
	var mu sync.Mutex
	var final map[string][]float32
	err = newWorld(context.Background(), r.world, func(ctx context.Context, c comm.Comm, opts []deepgo.Option) error {
		cfg, err := config.Parse([]byte(r.config()))
		if err != nil {
			return err
		}
		e, err := initEngine(ctx, cfg, testmodel.NewMLP(1, sizes...), opts...)
		if err != nil {
			return err
		}
		defer e.Close()
		for st := range ckptAt {
			if _, err := e.TrainBatch(ctx, data.RankBatch(st, globalBatch, r.world, c.Rank(), r.gas)); err != nil {
				return err
			}
		}
		before, err := e.Parameters(ctx)
		if err != nil {
			return err
		}
		_, lerr := e.Load(ctx, dir, deepgo.LoadOptions{})
		if lerr == nil {
			return fmt.Errorf("rank %d: Load of a damaged checkpoint succeeded", c.Rank())
		}
		if !strings.Contains(lerr.Error(), bad) {
			return fmt.Errorf("rank %d: error does not name %s: %v", c.Rank(), bad, lerr)
		}
		if c.Rank() == 1 && !errors.Is(lerr, checkpoint.ErrCorrupt) {
			return fmt.Errorf("rank 1: error does not wrap ErrCorrupt: %v", lerr)
		}
		after, err := e.Parameters(ctx)
		if err != nil {
			return err
		}
		if err := bitEqual(before, after); err != nil {
			return fmt.Errorf("rank %d: a failed load changed the parameters: %v", c.Rank(), err)
		}
		if e.GlobalSteps() != ckptAt || e.MicroSteps() != ckptAt {
			return fmt.Errorf("rank %d: a failed load changed the counters: %d, %d", c.Rank(), e.GlobalSteps(), e.MicroSteps())
		}
		for st := ckptAt; st < ckptSteps; st++ {
			if _, err := e.TrainBatch(ctx, data.RankBatch(st, globalBatch, r.world, c.Rank(), r.gas)); err != nil {
				return err
			}
		}
		p, err := e.Parameters(ctx)
		if c.Rank() == 0 {
			mu.Lock()
			final = p
			mu.Unlock()
		}
		return err
	})
	require.NoError(t, err)
	require.NoError(t, bitEqual(ref.params, final), "training after a failed load")
}

// TestCheckpointLoadMismatch: a checkpoint of another model is refused
// before anything changes, naming the parameter.
func TestCheckpointLoadMismatch(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	r := run{stage: 1, world: 1, gas: 1}
	_, _, err := (segment{r: r, save: dir, from: 0, to: 1}).train(t)
	require.NoError(t, err)
	cfg, err := config.Parse([]byte(r.config()))
	require.NoError(t, err)
	e, err := initEngine(context.Background(), cfg, testmodel.NewMLP(1, 8, 16, 5))
	require.NoError(t, err)
	defer e.Close()
	_, err = e.Load(context.Background(), dir, deepgo.LoadOptions{})
	require.ErrorContains(t, err, `"fc2.weight"`, "Load into another model")
	require.Zero(t, e.GlobalSteps(), "counters changed")
}

// TestCheckpointConsolidate: the consolidated float32 weights of an
// engine checkpoint (what `deepgo ckpt consolidate` writes) equal
// Engine.Parameters at the save, read back by Go and, when python3 has
// safetensors and numpy, by checkpoint/testdata/check_consolidated.py.
func TestCheckpointConsolidate(t *testing.T) {
	t.Parallel()
	for _, r := range []run{{stage: 3, world: 4, gas: 1, precision: "bf16"}, {stage: 0, world: 2, gas: 1}} {
		t.Run(r.String(), func(t *testing.T) {
			dir := t.TempDir()
			want, _, err := segment{r: r, save: dir, from: 0, to: 2}.train(t)
			require.NoError(t, err)
			ck, err := checkpoint.Open(nil, dir, "")
			require.NoError(t, err)
			defer ck.Close()
			require.NoError(t, ck.Verify(context.Background()))
			out := filepath.Join(t.TempDir(), "model.safetensors")
			require.NoError(t, ck.Consolidate(context.Background(), nil, out))
			exp := map[string]any{}
			for _, p := range ck.Manifest.Params {
				got, err := ck.ReadTensor(context.Background(), p.Source)
				require.NoError(t, err)
				v, _ := got.Float32s()
				vals := slices.Clone(v[p.Offset : p.Offset+p.Numel()])
				got.Free()
				require.NoError(t, bitEqual(map[string][]float32{p.Name: want[p.Name]}, map[string][]float32{p.Name: vals}))
				exp[p.Name] = map[string]any{"shape": p.Shape, "values": want[p.Name]}
			}
			require.Len(t, exp, len(want), "parameters in the checkpoint vs the engine's")
			got, shapes := readConsolidated(t, out)
			require.NoError(t, bitEqual(want, got), "consolidated file against Engine.Parameters")
			for _, p := range ck.Manifest.Params {
				require.True(t, slices.Equal(shapes[p.Name], p.Shape), "consolidated %s has shape %v, want %v", p.Name, shapes[p.Name], p.Shape)
			}
			t.Run("python", func(t *testing.T) {
				if err := exec.Command("python3", "-c", "import safetensors, numpy").Run(); err != nil {
					t.Skip("python3 with safetensors and numpy not available: pip install safetensors numpy")
				}
				expPath := filepath.Join(t.TempDir(), "expected.json")
				b, _ := json.Marshal(exp)
				require.NoError(t, os.WriteFile(expPath, b, 0o644))
				py, err := exec.Command("python3", "checkpoint/testdata/check_consolidated.py", out, expPath).CombinedOutput()
				require.NoError(t, err, "python check\n%s", py)
				t.Logf("python: %s", py)
			})
		})
	}
}

// readConsolidated reads a consolidated safetensors file back: the values
// and shapes of its tensors, which must all be float32.
func readConsolidated(t *testing.T, path string) (map[string][]float32, map[string][]int) {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	st, err := f.Stat()
	require.NoError(t, err)
	h, err := safetensors.ReadHeader(f, st.Size())
	require.NoError(t, err)
	vals, shapes := map[string][]float32{}, map[string][]int{}
	for _, ti := range h.Tensors {
		require.Equal(t, tensor.Float32, ti.DType, "consolidated %s", ti.Name)
		v := make([]float32, ti.Numel())
		data := io.NewSectionReader(f, h.DataOffset+ti.Begin, ti.End-ti.Begin)
		require.NoError(t, binary.Read(data, binary.LittleEndian, v), "consolidated %s", ti.Name)
		vals[ti.Name], shapes[ti.Name] = v, ti.Shape
	}
	return vals, shapes
}

// TestCheckpointMidAccumulation: Save and Load refuse to run in the middle
// of a gradient accumulation.
func TestCheckpointMidAccumulation(t *testing.T) {
	t.Parallel()
	r := run{stage: 2, world: 1, gas: 2}
	cfg, err := config.Parse([]byte(r.config()))
	require.NoError(t, err)
	ctx := context.Background()
	e, err := initEngine(ctx, cfg, testmodel.NewMLP(1, sizes...))
	require.NoError(t, err)
	defer e.Close()
	data := testmodel.NewDataset(42, 64, sizes[0], sizes[len(sizes)-1])
	mb := data.RankBatch(0, globalBatch, 1, 0, 2)[0]
	_, err = e.Forward(ctx, mb)
	require.NoError(t, err)
	require.NoError(t, e.Backward(ctx))
	require.NoError(t, e.Step(ctx))
	dir := t.TempDir()
	require.ErrorContains(t, e.Save(ctx, dir, deepgo.SaveOptions{}), "between optimizer steps", "Save mid-accumulation")
	require.ErrorContains(t, e.Save(ctx, dir, deepgo.SaveOptions{}), "1 of the 2 micro-steps of this optimizer step are done; 1 more")
	_, err = e.Load(ctx, dir, deepgo.LoadOptions{})
	require.ErrorContains(t, err, "between optimizer steps", "Load mid-accumulation")
	_, err = e.Forward(ctx, mb)
	require.NoError(t, err)
	require.ErrorContains(t, e.Save(ctx, dir, deepgo.SaveOptions{}), "a Forward is waiting for its Backward and Step")
	require.NoError(t, e.Backward(ctx))
	require.ErrorContains(t, e.Save(ctx, dir, deepgo.SaveOptions{}), "a Backward is waiting for its Step")
	require.NoError(t, e.Step(ctx))
	require.NoError(t, e.Save(ctx, dir, deepgo.SaveOptions{}), "at the boundary")
}

// TestCheckpointPrecisionChangeNotes: a checkpoint saved in fp16 loads into
// a bf16 engine, and the Load says what it did not restore as saved (the
// dynamic loss scaler) and that the precision changed; a load into the
// precision it was saved in has no notes.
func TestCheckpointPrecisionChangeNotes(t *testing.T) {
	ctx := context.Background()
	data := testmodel.NewDataset(42, 64, sizes[0], sizes[len(sizes)-1])
	engine := func(prec string) *deepgo.Engine {
		cfg, err := config.Parse([]byte(run{stage: 1, world: 1, gas: 1, precision: prec}.config()))
		require.NoError(t, err)
		e, err := initEngine(ctx, cfg, testmodel.NewMLP(1, sizes...), deepgo.WithLog(discard{}))
		require.NoError(t, err)
		t.Cleanup(func() { e.Close() })
		return e
	}
	dir := t.TempDir()
	src := engine("fp16")
	for st := 0; st < 2; st++ {
		_, err := src.TrainBatch(ctx, data.RankBatch(st, globalBatch, 1, 0, 1))
		require.NoError(t, err)
	}
	require.NoError(t, src.Save(ctx, dir, deepgo.SaveOptions{}))

	res, err := engine("fp16").Load(ctx, dir, deepgo.LoadOptions{})
	require.NoError(t, err)
	assert.Empty(t, res.Notes, "same precision")

	res, err = engine("bf16").Load(ctx, dir, deepgo.LoadOptions{})
	require.NoError(t, err)
	require.Len(t, res.Notes, 2, "%q", res.Notes)
	assert.Contains(t, res.Notes[0], "the checkpoint's dynamic loss scaler (scale ")
	assert.Contains(t, res.Notes[0], "was not restored: this engine's is static (scale 1)")
	assert.Contains(t, res.Notes[1], "saved training in float16, loaded into an engine training in bfloat16: the working parameters are re-cast")
}

// TestCheckpointOptimizerAndScheduleChangeNotes: a checkpoint saved with
// AdamW and a WarmupLR schedule loads into a Lamb engine (whose moments
// have the same names) and into an engine without a scheduler; the Load
// says whose moments were loaded and that the schedule was not restored.
// The same config has no notes.
func TestCheckpointOptimizerAndScheduleChangeNotes(t *testing.T) {
	ctx := context.Background()
	data := testmodel.NewDataset(42, 64, sizes[0], sizes[len(sizes)-1])
	engine := func(opt, sched string) *deepgo.Engine {
		doc := strings.Replace(run{stage: 1, world: 1, gas: 1}.config(), `"optimizer": {"type": "AdamW", "params": {"lr": 0.002, "weight_decay": 0.01}}`,
			`"optimizer": {"type": "`+opt+`", "params": {"lr": 0.002}}`+sched, 1)
		cfg, err := config.Parse([]byte(doc))
		require.NoError(t, err)
		e, err := initEngine(ctx, cfg, testmodel.NewMLP(1, sizes...), deepgo.WithLog(discard{}))
		require.NoError(t, err)
		t.Cleanup(func() { e.Close() })
		return e
	}
	const warmup = `, "scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 10}}`
	dir := t.TempDir()
	src := engine("AdamW", warmup)
	for st := 0; st < 2; st++ {
		_, err := src.TrainBatch(ctx, data.RankBatch(st, globalBatch, 1, 0, 1))
		require.NoError(t, err)
	}
	require.NoError(t, src.Save(ctx, dir, deepgo.SaveOptions{}))

	res, err := engine("AdamW", warmup).Load(ctx, dir, deepgo.LoadOptions{})
	require.NoError(t, err)
	assert.Empty(t, res.Notes, "same config")

	res, err = engine("Lamb", warmup).Load(ctx, dir, deepgo.LoadOptions{})
	require.NoError(t, err)
	if assert.Len(t, res.Notes, 1, "%q", res.Notes) {
		assert.Contains(t, res.Notes[0], "saved by adam, loaded into this engine's lamb")
	}

	res, err = engine("AdamW", "").Load(ctx, dir, deepgo.LoadOptions{})
	require.NoError(t, err)
	if assert.Len(t, res.Notes, 1, "%q", res.Notes) {
		assert.Contains(t, res.Notes[0], "the checkpoint's lr schedule WarmupLR (at iteration 1) was not restored: this config has no scheduler")
	}
}
