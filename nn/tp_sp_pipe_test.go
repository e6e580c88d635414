package nn_test

import (
	"testing"

	"github.com/deepgo-ml/deepgo/data"
	"github.com/stretchr/testify/require"
)

// A TP 2 × SP 2 × PP 2 checkpoint (the pipeline's: TP shards as
// mp_rank_XX, sharded over each stage's sequence-data group) resumes bit
// for bit at its own layout and within the resharding tolerances (1e-6
// relative losses, 3e-6 norm-wise parameters) at TP 2 × PP 2 without SP,
// SP 2 × PP 2 without TP, PP 2 alone, in the data-parallel Engine at
// TP 2 × SP 2 and at TP 1 × SP 1, and at another data world; TP 2 × PP 2
// and Engine TP 2 × SP 2 checkpoints resume at TP 2 × SP 2 × PP 2.
func TestGPTTensorUlyssesPipelineCheckpoint(t *testing.T) {
	mk, err := data.NewMarkov(32, 1, 2, 3)
	require.NoError(t, err)
	corpus := &data.Tokens{IDs: mk.Generate(20000, 4), Vocab: 32}
	base := upRun{tp: 2, pp: 2, sp: 2, dp: 1, stage: 1, micro: 2, sched: "1F1B", virtual: 1}
	with := func(f func(*upRun)) upRun { r := base; f(&r); return r }
	engine := func(r *upRun) { r.pp = 1; r.sched = "GPipe" }
	saves := []upRun{
		base,
		with(func(r *upRun) { r.sp = 1 }),
		with(engine),
	}
	loads := []upRun{
		base,
		with(func(r *upRun) { r.sp = 1 }),
		with(func(r *upRun) { r.tp = 1 }),
		with(func(r *upRun) { r.tp, r.sp = 1, 1 }),
		with(engine),
		with(func(r *upRun) { engine(r); r.tp, r.sp = 1, 1 }),
		with(func(r *upRun) { r.dp = 2; r.micro = 1 }),
	}
	if testing.Short() {
		saves, loads = saves[:1], loads[:2]
	}
	// the other checkpoints: only into TP × SP × PP
	requireUlyssesResumes(t, corpus, saves, loads, func(saved, load upRun) bool { return saved != base && load != base })
}
