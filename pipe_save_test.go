package deepgo_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/deepgo-ml/deepgo"
	"github.com/deepgo-ml/deepgo/checkpoint"
	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/data"
	"github.com/deepgo-ml/deepgo/model"
	"github.com/deepgo-ml/deepgo/nn"
	"github.com/stretchr/testify/require"
)

// pipeCkptRun is one world of pipeline ranks over a small GPT (2 blocks,
// width 8, vocab 16, T 8; its 4 modules cut uniformly): each rank loads
// load first when set, trains steps [from, to) recording its losses,
// saves to save when set, and reports its parameters and losses.
type pipeCkptRun struct {
	pp, dp, zero   int
	dev            string // worldFor's device: "" the CPU backend
	scheduler      string // the "scheduler" member; "": WarmupLR up to 0.01 over 4 steps
	load, save     string
	rankLoad       map[int]string // a rank's own copy of load
	from, to       int
	wantLoadErr    func(rank int, err error) error // Load must fail; nil: must succeed
	losses         [][]float64                     // [rank][step]
	params         map[string][]float32            // rank 0's
	paramsAtLoaded map[string][]float32            // rank 0's, right after Load
}

func (p *pipeCkptRun) config() string {
	sched := p.scheduler
	if sched == "" {
		sched = `{"type": "WarmupLR", "params": {"warmup_num_steps": 4, "warmup_max_lr": 0.01}}`
	}
	return fmt.Sprintf(`{"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 4,
		"pipeline_model_parallel_size": %d, "pipeline": {"partition": "uniform"},
		"zero_optimization": {"stage": %d}, "gradient_clipping": 1.0,
		"optimizer": {"type": "AdamW", "params": {"lr": 0.01, "weight_decay": 0.01}},
		"scheduler": %s}`, p.pp, p.zero, sched)
}

func (p *pipeCkptRun) run(t *testing.T) error {
	t.Helper()
	mk, err := data.NewMarkov(16, 1, 2, 3)
	require.NoError(t, err)
	corpus := &data.Tokens{IDs: mk.Generate(4000, 4), Vocab: 16}
	world := p.pp * p.dp
	p.losses = make([][]float64, world)
	var mu sync.Mutex
	asIs := func(g *nn.GPT) model.Model { return g }
	return worldFor(p.dev)(context.Background(), world, func(ctx context.Context, c comm.Comm, opts []deepgo.Option) error {
		return withPipeGPTOpts(ctx, p.config(), asIs, opts, func(tr deepgo.Trainer) error {
			return p.rank(ctx, c, tr, corpus, &mu)
		})
	})
}

// rank is one rank's part of run.
func (p *pipeCkptRun) rank(ctx context.Context, c comm.Comm, tr deepgo.Trainer, corpus *data.Tokens, mu *sync.Mutex) error {
	if p.load != "" {
		from := p.load
		if d, ok := p.rankLoad[c.Rank()]; ok {
			from = d
		}
		_, err := tr.Load(ctx, from, deepgo.LoadOptions{})
		if p.wantLoadErr != nil {
			return p.wantLoadErr(c.Rank(), err)
		}
		if err != nil {
			return err
		}
		if tr.GlobalSteps() != p.from {
			return fmt.Errorf("rank %d: loaded global steps %d, want %d", c.Rank(), tr.GlobalSteps(), p.from)
		}
		ps, err := tr.Parameters(ctx)
		if err != nil {
			return err
		}
		if c.Rank() == 0 {
			p.paramsAtLoaded = ps
		}
	}
	d := c.Rank() % p.dp // the data coordinate: every stage of a pipe reads the same batches
	for step := p.from; step < p.to; step++ {
		mbs := make([]model.MicroBatch, 4)
		for i := range mbs {
			k := ((step*p.dp+d)*4 + i) * 2
			mbs[i] = corpus.MakeBatch([]int{k, k + 1}, 8).MicroBatch()
		}
		loss, err := tr.TrainBatch(ctx, mbs)
		if err != nil {
			return err
		}
		mu.Lock()
		p.losses[c.Rank()] = append(p.losses[c.Rank()], loss)
		mu.Unlock()
		if step+1 == p.from+2 && p.save != "" { // save after two steps of this run
			if err := tr.Save(ctx, p.save, deepgo.SaveOptions{}); err != nil {
				return err
			}
		}
	}
	ps, err := tr.Parameters(ctx)
	if c.Rank() == 0 {
		p.params = ps
	}
	return err
}

// TestPipelineCheckpointResume: a pipeline (2 stages × 2 data-parallel
// ranks, ZeRO stage 0 and 1, AdamW with a warmup schedule) saved after 2
// steps and resumed by fresh engines of a fresh world trains the next 2
// steps with bit-identical losses and ends with bit-identical parameters;
// the same checkpoint loads into 4 stages × 1 rank and into the
// data-parallel Engine with the same parameters, and the Engine's
// checkpoint into 2 stages.
func TestPipelineCheckpointResume(t *testing.T) {
	t.Parallel()
	for _, z := range []int{0, 1} {
		t.Run(fmt.Sprintf("zero%d", z), func(t *testing.T) {
			dir := t.TempDir()
			ref := &pipeCkptRun{pp: 2, dp: 2, zero: z, save: dir, from: 0, to: 4}
			require.NoError(t, ref.run(t))
			res := &pipeCkptRun{pp: 2, dp: 2, zero: z, load: dir, from: 2, to: 4}
			require.NoError(t, res.run(t))
			for r := range ref.losses {
				want, got := ref.losses[r][2:], res.losses[r]
				for i := range want {
					require.Equal(t, math.Float64bits(want[i]), math.Float64bits(got[i]), "rank %d step %d: loss %v, uninterrupted %v", r, 2+i, got[i], want[i])
				}
			}
			require.NoError(t, bitEqual(ref.params, res.params), "parameters after the resumed steps")

			deep := &pipeCkptRun{pp: 4, dp: 1, zero: z, load: dir, from: 2, to: 3}
			require.NoError(t, deep.run(t))
			saved := &pipeCkptRun{pp: 2, dp: 2, zero: z, load: dir, from: 2, to: 2}
			require.NoError(t, saved.run(t))
			require.NoError(t, bitEqual(saved.paramsAtLoaded, deep.paramsAtLoaded), "4 stages load the 2-stage checkpoint's parameters")

			// the data-parallel Engine loads the pipeline's checkpoint, and
			// a pipeline loads the Engine's
			flat := &pipeCkptRun{pp: 1, dp: 2, zero: z, load: dir, from: 2, to: 3}
			require.NoError(t, flat.run(t))
			require.NoError(t, bitEqual(saved.paramsAtLoaded, flat.paramsAtLoaded), "the Engine loads the 2-stage checkpoint's parameters")
			edir := t.TempDir()
			require.NoError(t, (&pipeCkptRun{pp: 1, dp: 2, zero: z, save: edir, from: 0, to: 2}).run(t))
			eng := &pipeCkptRun{pp: 1, dp: 2, zero: z, load: edir, from: 2, to: 2}
			require.NoError(t, eng.run(t))
			piped := &pipeCkptRun{pp: 2, dp: 1, zero: z, load: edir, from: 2, to: 3}
			require.NoError(t, piped.run(t))
			require.NoError(t, bitEqual(eng.paramsAtLoaded, piped.paramsAtLoaded), "2 stages load the Engine's checkpoint's parameters")
		})
	}
}

// TestPipelineCheckpointTiedMismatch: in a checkpoint whose last stage's
// copy of the tied wte was altered on disk (and the manifest resealed, so
// every file verifies), the resume's comparison of the tied copies fails
// Load on every rank, naming the weight and the stage.
func TestPipelineCheckpointTiedMismatch(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	require.NoError(t, (&pipeCkptRun{pp: 2, dp: 2, zero: 1, save: dir, from: 0, to: 2}).run(t))
	tag := checkpoint.DefaultTag(2)
	ck, err := checkpoint.Open(nil, dir, tag)
	require.NoError(t, err)
	var copyName, wte string
	for _, n := range ck.Names() {
		if strings.HasPrefix(n, "fp32/") && strings.Contains(n, "@") {
			copyName = n
			wte = strings.TrimPrefix(n[:strings.Index(n, "@")], "fp32/")
		}
	}
	require.NotEmpty(t, copyName, "the checkpoint holds the head's copy of the tied weight: %v", ck.Names())
	g, _ := ck.Lookup(copyName)
	piece := g.Pieces[len(g.Pieces)-1]
	ck.Close()
	require.Contains(t, []int{2, 3}, piece.Rank, "stage 1's ranks hold %s", copyName)
	alterTensor(t, dir, tag, piece.File, piece.Tensor, 0, 0.25)

	want := fmt.Sprintf("tied weight %q: the copy on pipeline stage(s) [1] differs from stage 0's", wte)
	res := &pipeCkptRun{pp: 2, dp: 2, zero: 1, load: dir, from: 2, to: 2, wantLoadErr: func(rank int, err error) error {
		var te *deepgo.TiedMismatchError
		switch {
		case err == nil:
			return fmt.Errorf("rank %d: Load of the altered checkpoint succeeded", rank)
		case !strings.Contains(err.Error(), want):
			return fmt.Errorf("rank %d: error does not say %q: %v", rank, want, err)
		case !errors.As(err, &te) && rank == 0:
			return fmt.Errorf("rank 0: error is not a *deepgo.TiedMismatchError: %v", err)
		}
		t.Logf("rank %d: %v", rank, err)
		return nil
	}}
	require.NoError(t, res.run(t))
}

// TestPipelineCheckpointReplicaMismatch: under ZeRO stage 0 both
// data-parallel ranks of stage 0 hold its parameters whole; when rank 1
// resumes from its own copy of the checkpoint (node-local disks) in which
// one element of a stage-0 parameter was altered and the manifest
// resealed, Load fails on every rank, naming the parameter, the stage's
// data-parallel group and the rank that differs.
func TestPipelineCheckpointReplicaMismatch(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	require.NoError(t, (&pipeCkptRun{pp: 2, dp: 2, zero: 0, save: dir, from: 0, to: 2}).run(t))
	local := t.TempDir()
	require.NoError(t, os.CopyFS(local, os.DirFS(dir)))
	tag := checkpoint.DefaultTag(2)
	ck, err := checkpoint.Open(nil, local, tag)
	require.NoError(t, err)
	var piece checkpoint.Piece
	var param string
	for _, n := range ck.Names() {
		g, _ := ck.Lookup(n)
		if strings.HasPrefix(n, "fp32/") && !strings.Contains(n, "wte") && g.Pieces[0].Rank < 2 { // a stage-0 parameter
			piece, param = g.Pieces[0], strings.TrimPrefix(n, "fp32/")
			break
		}
	}
	ck.Close()
	require.NotEmpty(t, param, "a parameter of stage 0")
	alterTensor(t, local, tag, piece.File, piece.Tensor, 0, 0.25)

	want := fmt.Sprintf("pipeline stage 0, whose data-parallel ranks are world ranks [0 1]: checkpoint: replicated tensor %q differs from rank 0's on rank(s) 1", param)
	res := &pipeCkptRun{pp: 2, dp: 2, zero: 0, load: dir, rankLoad: map[int]string{1: local}, from: 2, to: 2,
		wantLoadErr: func(rank int, err error) error {
			if err == nil || !strings.Contains(err.Error(), want) {
				return fmt.Errorf("rank %d: Load returned %v, want an error saying %q", rank, err, want)
			}
			return nil
		}}
	require.NoError(t, res.run(t))
}
