package deepgo

// DeepSpeed-Ulysses sequence parallelism together with Megatron tensor
// parallelism (TP × SP × DP, and with pipeline stages PP × TP × SP × DP).
// Each TP rank holds its Megatron shards and heads/tp heads; within the
// TP rank's SP group the Ulysses all-to-all redistributes those local
// heads (heads divisible by tp × sp), each rank holding its sequence
// shard. The world is laid out pipe, data, seq, model (model fastest,
// pipe outermost): Megatron's rule puts the TP ranks, whose collectives
// run in every layer, adjacent, and the seq axis sits between them and
// data as SequenceParallelGroups' (data, seq) does. Dropping the seq axis
// gives TensorParallelGroups' and PipeTensorParallelGroup's grids,
// dropping model SequenceParallelGroups' and PipeSequenceParallelGroup's.
// Megatron-DeepSpeed's mpu takes the three sizes but builds its
// sequence-parallel and tensor-parallel groups from the same consecutive
// ranks, so this layout is deepgo's: it keeps the sequence-data group
// (data and seq at a fixed model coordinate) holding one TP shard, the
// group whose gradients ZeRO reduces and partitions, as each engine's
// data group is under Ulysses alone.

import (
	"context"
	"fmt"

	"github.com/deepgo-ml/deepgo/comm"
)

// TensorSequenceGroups are one rank's groups for Ulysses sequence
// parallelism with tensor parallelism (TensorSequenceParallelGroups,
// PipeTensorSequenceParallelGroups).
type TensorSequenceGroups struct {
	// SeqData is the sequence-data-parallel group (dp × sp ranks holding
	// the same TP shards): the data-parallel engine's WithComm. Nil from
	// PipeTensorSequenceParallelGroups: the pipeline engine takes the
	// whole world and lays it out itself.
	SeqData comm.Comm
	// Tensor is the TP group: nn.GPTConfig.TP and WithTensorParallel.
	Tensor comm.Comm
	// Seq is the Ulysses group: nn.GPTConfig.SP and WithSequenceParallel.
	Seq comm.Comm
	// DataRank is the rank's data-parallel index: which micro-batches it
	// is handed (every TP and SP rank of a data rank is handed the same
	// ones, each SP rank keeping its sequence shard,
	// model.TokenBatch.SequenceShard).
	DataRank int
}

// Options are the engine options the groups call for: WithComm(SeqData)
// when set, WithTensorParallel and WithSequenceParallel. A pipeline
// engine also needs WithComm(world).
func (g TensorSequenceGroups) Options() []Option {
	var o []Option
	if g.SeqData != nil {
		o = append(o, WithComm(g.SeqData))
	}
	return append(o, WithTensorParallel(g.Tensor), WithSequenceParallel(g.Seq))
}

// TensorSequenceParallelGroups lays world out as world/(tp×sp)
// data-parallel ranks × sp sequence-parallel ranks × tp tensor-parallel
// ranks (axes data, seq, model; model fastest) and returns this rank's
// groups for the data-parallel engine. Every rank of world must call it.
func TensorSequenceParallelGroups(ctx context.Context, world comm.Comm, tp, sp int) (TensorSequenceGroups, error) {
	if tp < 1 || sp < 1 || world.Size()%(tp*sp) != 0 {
		return TensorSequenceGroups{}, fmt.Errorf("deepgo.TensorSequenceParallelGroups: tensor_model_parallel_size %d x sequence_parallel_size %d must be >= 1 each and divide the world size %d", tp, sp, world.Size())
	}
	g, err := tensorSeqGrid(1, tp, sp, world.Size()/(tp*sp))
	if err != nil {
		return TensorSequenceGroups{}, err
	}
	gs, err := tensorSeqGroups(ctx, g, world)
	if err != nil {
		return TensorSequenceGroups{}, err
	}
	if gs.SeqData, err = g.Group(ctx, world, comm.AxisData, comm.AxisSeq); err != nil {
		return TensorSequenceGroups{}, err
	}
	return gs, nil
}

// PipeTensorSequenceParallelGroups lays world out as pp pipeline stages ×
// world/(pp×tp×sp) data-parallel ranks × sp sequence-parallel ranks × tp
// tensor-parallel ranks (axes pipe, data, seq, model; model fastest, pipe
// outermost) and returns this rank's TP and SP groups and data rank, for
// a pipeline engine given WithComm(world) (SeqData is nil). Every rank of
// world must call it.
func PipeTensorSequenceParallelGroups(ctx context.Context, world comm.Comm, pp, tp, sp int) (TensorSequenceGroups, error) {
	if pp < 1 || tp < 1 || sp < 1 || world.Size()%(pp*tp*sp) != 0 {
		return TensorSequenceGroups{}, fmt.Errorf("deepgo.PipeTensorSequenceParallelGroups: %d pipeline stages x tensor_model_parallel_size %d x sequence_parallel_size %d must be >= 1 each and divide the world size %d", pp, tp, sp, world.Size())
	}
	g, err := tensorSeqGrid(pp, tp, sp, world.Size()/(pp*tp*sp))
	if err != nil {
		return TensorSequenceGroups{}, err
	}
	return tensorSeqGroups(ctx, g, world)
}

// tensorSeqGroups are world rank's TP and SP groups on g and its data
// coordinate.
func tensorSeqGroups(ctx context.Context, g *comm.Grid, world comm.Comm) (TensorSequenceGroups, error) {
	var gs TensorSequenceGroups
	var err error
	if gs.Tensor, err = g.Group(ctx, world, comm.AxisModel); err != nil {
		return TensorSequenceGroups{}, err
	}
	if gs.Seq, err = g.Group(ctx, world, comm.AxisSeq); err != nil {
		return TensorSequenceGroups{}, err
	}
	gs.DataRank = g.CoordOf(world.Rank(), comm.AxisData)
	return gs, nil
}

// tensorSeqGrid is the PP × TP × SP × DP layout: axes pipe, data, seq,
// model (pipe of size 1 for the data-parallel engine).
func tensorSeqGrid(pp, tp, sp, dp int) (*comm.Grid, error) {
	return comm.NewGrid([]string{comm.AxisPipe, comm.AxisData, comm.AxisSeq, comm.AxisModel}, []int{pp, dp, sp, tp})
}
