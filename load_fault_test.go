package deepgo_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/deepgo-ml/deepgo"
	"github.com/deepgo-ml/deepgo/backend"
	"github.com/deepgo-ml/deepgo/checkpoint"
	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/comm/local"
	"github.com/deepgo-ml/deepgo/config"
	"github.com/deepgo-ml/deepgo/data"
	"github.com/deepgo-ml/deepgo/internal/faultbe"
	"github.com/deepgo-ml/deepgo/internal/testmodel"
	"github.com/deepgo-ml/deepgo/model"
	"github.com/deepgo-ml/deepgo/nn"
	"github.com/deepgo-ml/deepgo/tensor"
	"github.com/stretchr/testify/require"
)

// A Load that fails after it began installing a checkpoint leaves the
// engine holding parts of two states; these tests check that the engine
// then refuses to train until a Load succeeds, and that one that does
// makes it train exactly as an engine that loaded that checkpoint alone.

// The refusal every call but Load and Close gets after a Load failed part
// way, and the start of that Load's own error.
const (
	wantHalfLoaded = "an earlier Load failed part way"
	wantUsableBy   = "a Load that succeeds makes it usable again"
	wantPartWay    = "failed part way through restoring " // + the tag
)

// gatherFaultComm fails, while armed, every all-gather of floating-point
// tensors: the re-gather of the parameters in Load's restore, not the
// int64 agreements before it (which a world of one skips anyway).
type gatherFaultComm struct {
	comm.Comm
	armed *atomic.Bool
}

func (c gatherFaultComm) AllGather(ctx context.Context, dst, src *tensor.Tensor) error {
	if c.armed.Load() && dst.DType() != tensor.Int64 {
		return fmt.Errorf("%w: all-gather of %v", errInjected, dst.DType())
	}
	return c.Comm.AllGather(ctx, dst, src)
}

// Backend keeps the rank's CPU pool, as the plain comm/local rank gives it.
func (c gatherFaultComm) Backend() backend.Backend {
	return c.Comm.(interface{ Backend() backend.Backend }).Backend()
}

// alterLastElement changes the last element of tag's last parameter in
// dir (resealed, so every file verifies) and returns the parameter's name.
func alterLastElement(t *testing.T, dir, tag string) string {
	t.Helper()
	ck, err := checkpoint.Open(nil, dir, tag)
	require.NoError(t, err)
	p := ck.Manifest.Params[len(ck.Manifest.Params)-1]
	g, ok := ck.Lookup(p.Source)
	require.True(t, ok)
	last := p.Offset + p.Numel() - 1
	var piece checkpoint.Piece
	for _, pc := range g.Pieces {
		if last >= pc.Offset && last < pc.Offset+pc.Length {
			piece = pc
		}
	}
	ck.Close()
	require.NotEmpty(t, piece.File, "no piece of %s holds %s's last element", p.Source, p.Name)
	alterTensor(t, dir, tag, piece.File, piece.Tensor, last-piece.Offset, 0.5)
	return p.Name
}

// partWayRank is what one rank saw in TestLoadFailsPartWay.
type partWayRank struct {
	loadErr           error            // the Load of the bad checkpoint
	loadTook          time.Duration    // and how long it took
	refused           map[string]error // the calls after it
	partial           error            // a ModuleOnly Load after it
	steps             int              // GlobalSteps after the good Load
	refLosses, losses []float64
	refParams, params map[string][]float32
}

// TestLoadFailsPartWay: a Load that fails after it began installing the
// checkpoint (global_step4: the ranks' replicas found to differ, after
// everything was installed; the re-gather of the parameters failing
// inside the restore, after the optimizer state and masters were
// overwritten but before the counters, loss scaler and schedule) says so,
// and every later call but Load and Close is refused, a partial Load
// included; a Load of global_step2 that succeeds then makes the engine
// train with losses and parameters bit-identical to an engine that loaded
// global_step2 alone.
func TestLoadFailsPartWay(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		r    run
		// fault: faultGather, the comm fails float all-gathers during the
		// bad Load; faultCopy, rank 1's backend fails its copies then (the
		// others must learn it at once, not wait in the re-gather);
		// otherwise rank 1 loads global_step4 from a copy with one
		// parameter's element altered
		fault faultKind
		want  string // in the bad Load's error
	}{
		{name: "replicas differ", r: run{stage: 0, world: 2, gas: 1, precision: "bf16"}, want: "rank(s) 1"},
		{name: "stage 2 re-gather fails", r: run{stage: 2, world: 1, gas: 2, precision: "fp16"}, fault: faultGather, want: "zero: restore: gathering bucket"},
		{name: "stage 3 re-gather fails", r: run{stage: 3, world: 1, gas: 1,
			zeroExtra: `, "stage3_param_persistence_threshold": 100, "stage3_prefetch_bucket_size": 300`}, fault: faultGather, want: "gathering persistent module"},
		{name: "stage 2 restore fails on one rank", r: run{stage: 2, world: 2, gas: 1}, fault: faultCopy, want: "zero: restore"},
	}
	for _, tc := range cases {
		devs := []string{""}
		if tc.fault == noFault { // the comm seam does not reach a device engine's gathers
			devs = append(devs, "sim") // the good Load's copies into device memory
		}
		for _, dev := range devs {
			t.Run(tc.name+"/"+devName(dev), func(t *testing.T) {
				t.Parallel()
				partWay(t, tc.r, tc.fault, tc.want, dev)
			})
		}
	}
}

// faultKind is how TestLoadFailsPartWay's bad Load fails.
type faultKind int

const (
	noFault     faultKind = iota // rank 1's replicas differ
	faultGather                  // every float all-gather fails
	faultCopy                    // rank 1's backend copies fail
)

// partWay is one case of TestLoadFailsPartWay on dev ("" the CPU, "sim").
func partWay(t *testing.T, r run, fault faultKind, want, dev string) {
	dir := t.TempDir()
	_, _, err := (segment{r: r, save: dir, from: 0, to: 2}).train(t)
	require.NoError(t, err)
	_, _, err = (segment{r: r, load: dir, save: dir, from: 2, to: 4}).train(t)
	require.NoError(t, err)
	good, bad := checkpoint.DefaultTag(2), checkpoint.DefaultTag(4)
	badDir := map[int]string{}
	if fault == noFault {
		local := t.TempDir() // rank 1's node-local copy
		require.NoError(t, os.CopyFS(local, os.DirFS(dir)))
		name := alterLastElement(t, local, bad)
		badDir[1] = local
		want = fmt.Sprintf("%q differs from rank 0's on rank(s) 1", name)
	}
	never := filepath.Join(t.TempDir(), "never") // where refused saves would go

	sizes := r.layers()
	set := testmodel.NewDataset(42, 64, sizes[0], sizes[len(sizes)-1])
	seen := make([]partWayRank, r.world)
	err = local.Run(context.Background(), r.world, local.Options{Timeout: 30 * time.Second, Threads: 1}, func(ctx context.Context, c comm.Comm) error {
		var armed atomic.Bool
		cc := c
		if fault == faultGather {
			cc = gatherFaultComm{c, &armed}
		}
		open := func() (*deepgo.Engine, error) {
			cfg, err := config.Parse([]byte(r.config()))
			if err != nil {
				return nil, err
			}
			opts := []deepgo.Option{deepgo.WithComm(cc)}
			if fault == faultCopy && c.Rank() == 1 {
				opts = append(opts, deepgo.WithBackend(faultbe.CopyFault{Pooled: faultbe.Of(c), Armed: &armed, Err: errInjected}))
			}
			if dev == "sim" {
				opts = append(opts, deepgo.WithDevice(tensor.Sim(c.Rank())))
			}
			return initEngine(ctx, cfg, testmodel.NewMLP(1, sizes...), opts...)
		}
		batch := func(st int) []model.MicroBatch { return set.RankBatch(st, globalBatch, r.world, c.Rank(), r.gas) }
		// train runs steps 2 and 3 on an engine that loaded global_step2
		train := func(e *deepgo.Engine) ([]float64, map[string][]float32, error) {
			var losses []float64
			for st := 2; st < 4; st++ {
				l, err := e.TrainBatch(ctx, batch(st))
				if err != nil {
					return nil, nil, err
				}
				losses = append(losses, l)
			}
			p, err := e.Parameters(ctx)
			return losses, p, err
		}
		me := &seen[c.Rank()]

		// the reference: a fresh engine loads global_step2 alone
		ref, err := open()
		if err != nil {
			return err
		}
		defer ref.Close()
		if _, err := ref.Load(ctx, dir, deepgo.LoadOptions{Tag: good}); err != nil {
			return err
		}
		if me.refLosses, me.refParams, err = train(ref); err != nil {
			return err
		}

		e, err := open()
		if err != nil {
			return err
		}
		defer e.Close()
		if _, err := e.TrainBatch(ctx, batch(0)); err != nil { // a state of its own first
			return err
		}
		from := dir
		if d, ok := badDir[c.Rank()]; ok {
			from = d
		}
		armed.Store(fault != noFault)
		start := time.Now()
		_, me.loadErr = e.Load(ctx, from, deepgo.LoadOptions{Tag: bad})
		me.loadTook = time.Since(start)
		armed.Store(false)
		if me.loadErr == nil {
			return fmt.Errorf("rank %d: Load of %s succeeded", c.Rank(), bad)
		}
		me.refused = map[string]error{}
		_, me.refused["TrainBatch"] = e.TrainBatch(ctx, batch(2))
		_, me.refused["Forward"] = e.Forward(ctx, batch(2)[0])
		me.refused["Backward"] = e.Backward(ctx)
		me.refused["Step"] = e.Step(ctx)
		me.refused["Save"] = e.Save(ctx, never, deepgo.SaveOptions{})
		me.refused["SaveAsync"] = e.SaveAsync(ctx, never, deepgo.SaveOptions{})
		_, me.refused["Parameters"] = e.Parameters(ctx)
		_, me.partial = e.Load(ctx, dir, deepgo.LoadOptions{Tag: good, ModuleOnly: true})

		if _, err := e.Load(ctx, dir, deepgo.LoadOptions{Tag: good}); err != nil {
			return fmt.Errorf("rank %d: Load of %s after the failed one: %w", c.Rank(), good, err)
		}
		me.steps = e.GlobalSteps()
		me.losses, me.params, err = train(e)
		return err
	})
	require.NoError(t, err)
	for rank, s := range seen {
		require.ErrorContains(t, s.loadErr, wantPartWay+bad, "rank %d", rank)
		require.ErrorContains(t, s.loadErr, want, "rank %d", rank)
		switch {
		case fault == faultCopy && rank != 1: // told by the agreement, not the fault itself
			require.ErrorContains(t, s.loadErr, "failed on rank 1", "rank %d", rank)
			require.Less(t, s.loadTook, 10*time.Second, "rank %d waited for rank 1 (timeout 30 s)", rank)
		case fault != noFault:
			require.ErrorIs(t, s.loadErr, errInjected, "rank %d", rank)
		default:
			var rm *checkpoint.ReplicaMismatchError
			require.ErrorAs(t, s.loadErr, &rm, "rank %d", rank)
		}
		t.Logf("rank %d: %v", rank, s.loadErr)
		for op, err := range s.refused {
			require.ErrorContains(t, err, "deepgo: "+op+": "+wantHalfLoaded, "rank %d", rank)
			require.ErrorContains(t, err, wantUsableBy, "rank %d", rank)
			require.ErrorContains(t, err, wantPartWay+bad, "rank %d: %s names the failed Load", rank, op)
		}
		require.ErrorContains(t, s.partial, "ModuleOnly: refused: "+wantHalfLoaded, "rank %d", rank)
		require.Equal(t, 2, s.steps, "rank %d: global steps after loading %s", rank, good)
		require.Len(t, s.losses, len(s.refLosses))
		for i := range s.refLosses {
			require.Equal(t, math.Float64bits(s.refLosses[i]), math.Float64bits(s.losses[i]),
				"rank %d step %d: loss %v, an engine that loaded %s alone has %v", rank, 2+i, s.losses[i], good, s.refLosses[i])
		}
		require.NoError(t, bitEqual(s.refParams, s.params), "rank %d: parameters", rank)
	}
	_, err = os.Stat(never)
	require.True(t, errors.Is(err, os.ErrNotExist), "a refused Save wrote %s", never)
}

// TestLoadFailsBeforeChanging: a Load that fails before it changes the
// engine (a damaged data file, a tag that is not there, another model's
// checkpoint) leaves it as it was: it is not marked, and it trains on to
// losses and parameters bit-identical to an engine never asked to load.
func TestLoadFailsBeforeChanging(t *testing.T) {
	t.Parallel()
	r := run{stage: 2, world: 1, gas: 2, precision: "bf16", steps: 4}
	ref, err := train(t, r) // uninterrupted
	require.NoError(t, err)
	cases := []struct {
		name string
		// ckpt makes the checkpoint to load into dir and returns its tag
		ckpt func(t *testing.T, dir string) string
		want string
	}{
		{"damaged data file", func(t *testing.T, dir string) string {
			_, _, err := (segment{r: r, save: dir, from: 0, to: 1}).train(t)
			require.NoError(t, err)
			tag := checkpoint.DefaultTag(1)
			files, _ := filepath.Glob(filepath.Join(dir, tag, "*optim*.safetensors"))
			require.NotEmpty(t, files)
			b, err := os.ReadFile(files[0])
			require.NoError(t, err)
			b[len(b)-3] ^= 0x10
			require.NoError(t, os.WriteFile(files[0], b, 0o644))
			return tag
		}, "checksum"},
		{"no such tag", func(t *testing.T, dir string) string {
			_, _, err := (segment{r: r, save: dir, from: 0, to: 1}).train(t)
			require.NoError(t, err)
			return "global_step99"
		}, "global_step99"},
		{"another model", func(t *testing.T, dir string) string {
			other := r
			other.sizes = []int{8, 12, 4}
			_, _, err := (segment{r: other, save: dir, from: 0, to: 1}).train(t)
			require.NoError(t, err)
			return checkpoint.DefaultTag(1)
		}, "in the checkpoint"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			tag := tc.ckpt(t, dir)
			ctx := context.Background()
			cfg, err := config.Parse([]byte(r.config()))
			require.NoError(t, err)
			w, err := local.NewWorld(1, local.Options{Timeout: 30 * time.Second, Threads: 1}) // as train's
			require.NoError(t, err)
			defer w.Close()
			e, err := initEngine(ctx, cfg, testmodel.NewMLP(1, sizes...), deepgo.WithComm(w.Comm(0)))
			require.NoError(t, err)
			defer e.Close()
			set := testmodel.NewDataset(42, 64, sizes[0], sizes[len(sizes)-1])
			var losses []float64
			for st := range r.steps {
				if st == 2 {
					_, err := e.Load(ctx, dir, deepgo.LoadOptions{Tag: tag})
					require.ErrorContains(t, err, tc.want)
					require.NotContains(t, err.Error(), "part way")
					t.Logf("%v", err)
				}
				l, err := e.TrainBatch(ctx, set.RankBatch(st, globalBatch, 1, 0, r.gas))
				require.NoError(t, err, "step %d, after a Load that failed before changing the engine", st)
				losses = append(losses, l)
			}
			for i := range losses {
				require.Equal(t, math.Float64bits(ref.losses[i]), math.Float64bits(losses[i]), "step %d: loss %v, uninterrupted %v", i, losses[i], ref.losses[i])
			}
			p, err := e.Parameters(ctx)
			require.NoError(t, err)
			require.NoError(t, bitEqual(ref.params, p))
		})
	}
}

// TestPipelineLoadFailsPartWay: the pipeline engine's Load of a checkpoint
// whose tied copies differ (global_step4, every file verifying) fails part
// way, after installing it; TrainBatch, Save, Parameters, TiedCopies and a
// ModuleOnly Load are then refused, and a (NonStrict, nothing missing)
// Load of global_step2 that succeeds makes the pipeline train the next two
// steps with losses and parameters bit-identical to the uninterrupted run
// that saved it. A Load refused before anything changes (a tag that is not
// there) marks nothing.
func TestPipelineLoadFailsPartWay(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ref := &pipeCkptRun{pp: 2, dp: 2, zero: 1, save: dir, from: 0, to: 4} // saves global_step2
	require.NoError(t, ref.run(t))
	require.NoError(t, (&pipeCkptRun{pp: 2, dp: 2, zero: 1, load: dir, save: dir, from: 2, to: 4}).run(t)) // global_step4
	good, bad := checkpoint.DefaultTag(2), checkpoint.DefaultTag(4)
	ck, err := checkpoint.Open(nil, dir, bad)
	require.NoError(t, err)
	var copyName string
	for _, n := range ck.Names() {
		if strings.HasPrefix(n, "fp32/") && strings.Contains(n, "@") {
			copyName = n
		}
	}
	require.NotEmpty(t, copyName, "the head's copy of the tied weight")
	g, _ := ck.Lookup(copyName)
	piece := g.Pieces[len(g.Pieces)-1]
	ck.Close()
	alterTensor(t, dir, bad, piece.File, piece.Tensor, 0, 0.25)

	mk, err := data.NewMarkov(16, 1, 2, 3)
	require.NoError(t, err)
	corpus := &data.Tokens{IDs: mk.Generate(4000, 4), Vocab: 16}
	const pp, dp = 2, 2
	cfg := (&pipeCkptRun{pp: pp, dp: dp, zero: 1}).config()
	never := filepath.Join(t.TempDir(), "never")
	type rankSeen struct {
		early, loadErr, partial error
		refused                 map[string]error
		steps                   int
		losses                  []float64
		params                  map[string][]float32
	}
	seen := make([]rankSeen, pp*dp)
	asIs := func(g *nn.GPT) model.Model { return g }
	var mu sync.Mutex
	err = local.Run(context.Background(), pp*dp, local.Options{Timeout: 20 * time.Second, Threads: 1}, func(ctx context.Context, c comm.Comm) error {
		return withPipeGPT(ctx, c, cfg, asIs, func(tr deepgo.Trainer) error {
			me := rankSeen{refused: map[string]error{}}
			defer func() {
				mu.Lock()
				seen[c.Rank()] = me
				mu.Unlock()
			}()
			batch := func(step int) []model.MicroBatch {
				d := c.Rank() % dp
				mbs := make([]model.MicroBatch, 4)
				for i := range mbs {
					k := ((step*dp+d)*4 + i) * 2
					mbs[i] = corpus.MakeBatch([]int{k, k + 1}, 8).MicroBatch()
				}
				return mbs
			}
			_, me.early = tr.Load(ctx, dir, deepgo.LoadOptions{Tag: "global_step99"})
			if _, err := tr.Parameters(ctx); err != nil {
				return fmt.Errorf("rank %d: Parameters after a Load refused before it changed anything: %w", c.Rank(), err)
			}
			if _, me.loadErr = tr.Load(ctx, dir, deepgo.LoadOptions{Tag: bad}); me.loadErr == nil {
				return fmt.Errorf("rank %d: Load of %s succeeded", c.Rank(), bad)
			}
			_, me.refused["TrainBatch"] = tr.TrainBatch(ctx, batch(2))
			me.refused["Save"] = tr.Save(ctx, never, deepgo.SaveOptions{})
			me.refused["SaveAsync"] = tr.SaveAsync(ctx, never, deepgo.SaveOptions{})
			_, me.refused["Parameters"] = tr.Parameters(ctx)
			_, me.refused["TiedCopies"] = tr.(*deepgo.PipeEngine).TiedCopies(ctx)
			_, me.partial = tr.Load(ctx, dir, deepgo.LoadOptions{Tag: good, ModuleOnly: true})
			if _, err := tr.Load(ctx, dir, deepgo.LoadOptions{Tag: good, NonStrict: true}); err != nil {
				return fmt.Errorf("rank %d: Load of %s after the failed one: %w", c.Rank(), good, err)
			}
			me.steps = tr.GlobalSteps()
			for st := 2; st < 4; st++ {
				l, err := tr.TrainBatch(ctx, batch(st))
				if err != nil {
					return err
				}
				me.losses = append(me.losses, l)
			}
			var err error
			me.params, err = tr.Parameters(ctx)
			return err
		})
	})
	require.NoError(t, err)
	for rank, s := range seen {
		require.ErrorContains(t, s.early, "global_step99", "rank %d", rank)
		require.NotContains(t, s.early.Error(), "part way", "rank %d", rank)
		require.ErrorContains(t, s.loadErr, wantPartWay+bad, "rank %d", rank)
		require.ErrorContains(t, s.loadErr, "tied weight", "rank %d", rank)
		for op, err := range s.refused {
			require.ErrorContains(t, err, "deepgo: "+op+": "+wantHalfLoaded, "rank %d", rank)
			require.ErrorContains(t, err, wantUsableBy, "rank %d", rank)
		}
		require.ErrorContains(t, s.partial, "ModuleOnly: refused: "+wantHalfLoaded, "rank %d", rank)
		require.Equal(t, 2, s.steps, "rank %d", rank)
		want := ref.losses[rank][2:4]
		require.Len(t, s.losses, len(want))
		for i := range want {
			require.Equal(t, math.Float64bits(want[i]), math.Float64bits(s.losses[i]), "rank %d step %d: loss %v, uninterrupted %v", rank, 2+i, s.losses[i], want[i])
		}
	}
	require.NoError(t, bitEqual(ref.params, seen[0].params), "rank 0's parameters")
	_, err = os.Stat(never)
	require.True(t, errors.Is(err, os.ErrNotExist), "a refused Save wrote %s", never)
}

// TestLoadWhileHalfLoaded: while an engine is marked by a Load that failed
// part way (here the re-gather of the parameters), a Load that would keep
// part of its state as it is (ModuleOnly, SkipOptimizerStates,
// SkipLRSchedulerStates, NonStrict with parameters the checkpoint lacks)
// is refused and leaves the mark; one that installs a whole checkpoint
// (NonStrict with none missing included) clears it.
func TestLoadWhileHalfLoaded(t *testing.T) {
	t.Parallel()
	r := run{stage: 2, world: 1, gas: 1, sizes: []int{8, 16, 16, 4, 4}}
	full, fewer := t.TempDir(), t.TempDir()
	_, _, err := (segment{r: r, save: full, from: 0, to: 1}).train(t)
	require.NoError(t, err)
	less := r
	less.sizes = []int{8, 16, 16, 4} // no fc4
	_, _, err = (segment{r: less, save: fewer, from: 0, to: 1}).train(t)
	require.NoError(t, err)
	tag := checkpoint.DefaultTag(1)
	cases := []struct {
		name string
		dir  string
		opts deepgo.LoadOptions
		want string // "": the Load succeeds and clears the mark
	}{
		{"ModuleOnly", full, deepgo.LoadOptions{ModuleOnly: true}, "deepgo: Load: ModuleOnly: refused: " + wantHalfLoaded},
		{"SkipOptimizerStates", full, deepgo.LoadOptions{SkipOptimizerStates: true}, "SkipOptimizerStates: refused"},
		{"SkipLRSchedulerStates", full, deepgo.LoadOptions{SkipLRSchedulerStates: true}, "SkipLRSchedulerStates: refused"},
		{"two kept", full, deepgo.LoadOptions{SkipOptimizerStates: true, SkipLRSchedulerStates: true}, "SkipOptimizerStates, SkipLRSchedulerStates: refused"},
		{"NonStrict, parameters missing", fewer, deepgo.LoadOptions{NonStrict: true}, "NonStrict: refused: " + wantHalfLoaded + ", and the parameters this checkpoint lacks (fc4.weight, fc4.bias)"},
		{"NonStrict, none missing", full, deepgo.LoadOptions{NonStrict: true}, ""},
		{"whole", full, deepgo.LoadOptions{}, ""},
	}
	sz := r.layers()
	set := testmodel.NewDataset(42, 64, sz[0], sz[len(sz)-1])
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			w, err := local.NewWorld(1, local.Options{Timeout: 30 * time.Second, Threads: 1})
			require.NoError(t, err)
			defer w.Close()
			var armed atomic.Bool
			cfg, err := config.Parse([]byte(r.config()))
			require.NoError(t, err)
			e, err := initEngine(ctx, cfg, testmodel.NewMLP(1, sz...), deepgo.WithComm(gatherFaultComm{w.Comm(0), &armed}))
			require.NoError(t, err)
			defer e.Close()
			armed.Store(true)
			_, err = e.Load(ctx, full, deepgo.LoadOptions{Tag: tag})
			armed.Store(false)
			require.ErrorContains(t, err, wantPartWay+tag)

			opts := tc.opts
			opts.Tag = tag
			_, err = e.Load(ctx, tc.dir, opts)
			batch := set.RankBatch(1, globalBatch, 1, 0, r.gas)
			if tc.want != "" {
				require.ErrorContains(t, err, tc.want)
				require.False(t, strings.HasPrefix(err.Error(), "deepgo: Load: "+wantPartWay), "a refused Load fails before it changes anything: %v", err)
				_, err = e.TrainBatch(ctx, batch)
				require.ErrorContains(t, err, wantHalfLoaded, "the mark stays")
				_, err = e.Load(ctx, full, deepgo.LoadOptions{Tag: tag})
			}
			require.NoError(t, err)
			require.Equal(t, 1, e.GlobalSteps())
			_, err = e.TrainBatch(ctx, batch)
			require.NoError(t, err, "after a whole Load")
		})
	}
}
