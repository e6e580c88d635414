package deepgo

// 3-D parallelism: the pipeline engine with a Megatron tensor-parallel
// group per stage. The world is DeepSpeed's PipeModelDataParallelTopology
// (axes pipe, data, model; TP ranks adjacent, pipe outermost); the model
// is sharded over the model axis before Initialize (PipeTensorParallelGroup
// gives that group), each stage's parts run the layers' TP collectives,
// activations go from a stage's TP rank to the same TP rank of the next
// stage (the pipe group fixes the data and model coordinates; under
// megatron_sequence_parallel each carries only that rank's sequence
// shard, whose size the part's Input gives the receiver), the tied
// wte is a vocabulary shard summed over the stages holding it per TP rank,
// and ZeRO runs over the data axis.

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/config"
)

// PipeTensorParallelGroup lays world out as DeepSpeed's
// PipeModelDataParallelTopology(pp, tp, world/(pp×tp)) and returns this
// rank's tensor-parallel group: the group to shard the model over
// (nn.GPTConfig.TP) and to pass as WithTensorParallel, with WithComm(world),
// to a pipeline engine. Every rank of world must call it.
func PipeTensorParallelGroup(ctx context.Context, world comm.Comm, pp, tp int) (comm.Comm, error) {
	if pp < 1 || tp < 1 || world.Size()%(pp*tp) != 0 {
		return nil, fmt.Errorf("deepgo.PipeTensorParallelGroup: %d pipeline stages x tensor_model_parallel_size %d must be >= 1 each and divide the world size %d", pp, tp, world.Size())
	}
	g, err := comm.PipeModelDataGrid(pp, tp, world.Size()/(pp*tp))
	if err != nil {
		return nil, err
	}
	return g.Group(ctx, world, comm.AxisModel)
}

// pipeGrid lays out the pipeline engine's world: pipe × data without
// tensor or sequence parallelism, pipe × data × model with TP, pipe ×
// data × seq with Ulysses SP (pipe_sp.go), pipe × data × seq × model with
// both (tp_sp.go), after checking that the WithTensorParallel and
// WithSequenceParallel groups are this rank's model and seq groups of that
// grid.
func pipeGrid(ctx context.Context, cfg *config.Config, pp int, o options) (*comm.Grid, error) {
	tp := max(1, cfg.TensorModelParallelSize)
	sp := max(1, cfg.SequenceParallelSize)
	switch {
	case o.tp == nil && tp > 1:
		return nil, fmt.Errorf("deepgo.Initialize: tensor_model_parallel_size %d with %d pipeline stages: pass WithTensorParallel (the group the model is sharded over; see PipeTensorParallelGroup) and WithComm with the whole world", tp, pp)
	case o.tp != nil && o.tp.Size() != tp:
		return nil, fmt.Errorf("deepgo.Initialize: tensor_model_parallel_size %d, but WithTensorParallel's group has %d ranks", tp, o.tp.Size())
	case o.comm.Size()%(pp*tp) != 0:
		return nil, fmt.Errorf("deepgo.Initialize: %d pipeline stages x tensor_model_parallel_size %d need a world of pp × tp × data-parallel ranks (WithComm), got %d ranks", pp, tp, o.comm.Size())
	case o.comm.Size()%(pp*sp) != 0:
		return nil, fmt.Errorf("deepgo.Initialize: %d pipeline stages x sequence_parallel_size %d need a world of pp × sp × data-parallel ranks (WithComm), got %d ranks", pp, sp, o.comm.Size())
	case o.comm.Size()%(pp*tp*sp) != 0:
		return nil, fmt.Errorf("deepgo.Initialize: %d pipeline stages x tensor_model_parallel_size %d x sequence_parallel_size %d need a world of pp × tp × sp × data-parallel ranks (WithComm), got %d ranks", pp, tp, sp, o.comm.Size())
	}
	switch {
	case sp > 1 && tp > 1:
		g, err := tensorSeqGrid(pp, tp, sp, o.comm.Size()/(pp*tp*sp))
		if err != nil {
			return nil, err
		}
		// stages pair up ranks by their (seq, model) coordinates
		const hint = "PipeTensorSequenceParallelGroups"
		return g, errors.Join(checkGridGroup(ctx, g, o.comm, o.tp, comm.AxisModel, "WithTensorParallel", hint),
			checkGridGroup(ctx, g, o.comm, o.sp, comm.AxisSeq, "WithSequenceParallel", hint))
	case sp > 1:
		g, err := pipeSeqGrid(pp, sp, o.comm.Size()/(pp*sp))
		if err != nil {
			return nil, err
		}
		// stages pair up SP ranks by their seq coordinate
		return g, checkGridGroup(ctx, g, o.comm, o.sp, comm.AxisSeq, "WithSequenceParallel", "PipeSequenceParallelGroup")
	case tp > 1:
		g, err := comm.PipeModelDataGrid(pp, tp, o.comm.Size()/(pp*tp))
		if err != nil {
			return nil, err
		}
		// activations and tied gradients pair up TP ranks by their model
		// coordinate
		return g, checkGridGroup(ctx, g, o.comm, o.tp, comm.AxisModel, "WithTensorParallel", "PipeTensorParallelGroup")
	}
	return comm.PipeDataGrid(pp, o.comm.Size()/pp)
}

// checkGridGroup refuses a group c (an option's, named by opt) that is not
// world rank's group along axis of g (built by the constructor named by
// hint).
func checkGridGroup(ctx context.Context, g *comm.Grid, world, c comm.Comm, axis, opt, hint string) error {
	got, err := comm.AllGatherInt64s(ctx, c, []int64{int64(world.Rank())})
	if err != nil {
		return fmt.Errorf("deepgo.Initialize: checking the %s group: %w", opt, err)
	}
	groups, err := g.Groups(axis)
	if err != nil {
		return err
	}
	for _, want := range groups {
		if !slices.Contains(want, world.Rank()) {
			continue
		}
		for i, r := range got {
			if i >= len(want) || int(r) != want[i] {
				return fmt.Errorf("deepgo.Initialize: %s's group holds world ranks %v, want %v on the grid %v (build it with %s)", opt, got, want, g, hint)
			}
		}
	}
	return nil
}

// tpShardNorm is this rank's share of the squared gradient norm under TP:
// the sharded parameters' squares (summed over the TP ranks by the
// caller's reduction), plus the replicated ones' on TP rank 0 only, which
// hold the same values on every TP rank. Tied copies skip selects stay out.
func (e *PipeEngine) tpShardNorm(skip func(m, p int) bool) (float64, error) {
	split := func(m, p int) bool { return e.params[m][p].Parallel.Split }
	ss, err := e.z.OwnedSumSquares(func(m, p int) bool { return skip(m, p) || !split(m, p) })
	if err != nil {
		return 0, err
	}
	if e.tp.Rank() != 0 {
		return ss, nil
	}
	repl, err := e.z.OwnedSumSquares(func(m, p int) bool { return skip(m, p) || split(m, p) })
	return ss + repl, err
}

// checkPipeShards refuses a stage holding a tensor-parallel shard without
// the TP group: its norm and overflow would be this rank's shards' alone.
func (e *PipeEngine) checkPipeShards() error {
	if p := firstShard(e.params); e.tp == nil && p != nil {
		return fmt.Errorf("deepgo.Initialize: pipeline stage %d: parameter %s is a tensor-parallel shard (dim %d): set tensor_model_parallel_size and pass WithTensorParallel with the group the model is sharded over", e.stage, p.Name, p.Parallel.Dim)
	}
	return nil
}

// tpSize is the engine's TP degree, 1 without tensor parallelism.
func (e *PipeEngine) tpSize() int {
	if e.tp == nil {
		return 1
	}
	return e.tp.Size()
}

// tpRank is this rank's TP rank, 0 without tensor parallelism.
func (e *PipeEngine) tpRank() int {
	if e.tp == nil {
		return 0
	}
	return e.tp.Rank()
}
