package deepgo

// DeepSpeed-Ulysses sequence parallelism in the data-parallel engine
// (with pipeline stages: pipe_sp.go): the model exchanges attention's q,
// k and v over an SP group itself (nn.GPTConfig.SP); the engine's part is
// DeepSpeed's: replicated parameters are reduced, and ZeRO partitions
// them, over the sequence-data-parallel group (dp × sp ranks,
// seq_data_parallel_group), which averages the SP ranks' token shares
// into the full gradient.
//
// Data path: every rank of an SP group is handed the same micro-batches
// (those of its data-parallel rank) and keeps its sequence shard
// (model.TokenBatch.SequenceShard): tokens [r·T/sp, (r+1)·T/sp) of every
// sequence. train_micro_batch_size_per_gpu counts sequences, as in
// DeepSpeed, so the batch triad's data-parallel size is world / sp.

import (
	"context"
	"fmt"

	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/config"
	"github.com/deepgo-ml/deepgo/model"
)

// WithSequenceParallel runs the engine as one rank of the Ulysses
// sequence-parallel group sp, the group the model shards its sequences
// over; WithComm is then the sequence-data-parallel group (dp × sp ranks:
// SequenceParallelGroups builds both), or with pipeline stages the whole
// world (pp × dp × sp ranks: PipeSequenceParallelGroup builds sp on that
// grid). sp.Size() must equal sequence_parallel_size.
//
// Each rank must be handed its own shard of every sequence: the batch of
// its data-parallel rank cut with model.TokenBatch.SequenceShard(sp.Rank(),
// sp.Size()). The engine cannot tell a shard from a shorter whole
// sequence, so a rank given the full batch trains, on different data,
// without an error, as long as the sequence fits the model.
func WithSequenceParallel(sp comm.Comm) Option { return func(o *options) { o.sp = sp } }

// SequenceParallelGroups lays world out as DeepSpeed does for Ulysses
// (groups.py: sequence-parallel ranks adjacent, data outermost) and
// returns this rank's sequence-data-parallel group (every rank of world:
// dp × sp) and its sequence-parallel group, with its data-parallel rank
// (which micro-batches it is handed; each rank then trains on its
// sequence shard of them, model.TokenBatch.SequenceShard). Every rank of
// world must call it.
func SequenceParallelGroups(ctx context.Context, world comm.Comm, sp int) (seqData, seq comm.Comm, dataRank int, err error) {
	if sp < 1 || world.Size()%sp != 0 {
		return nil, nil, 0, fmt.Errorf("deepgo.SequenceParallelGroups: sequence_parallel_size %d must be >= 1 and divide the world size %d", sp, world.Size())
	}
	g, err := comm.NewGrid([]string{comm.AxisData, comm.AxisSeq}, []int{world.Size() / sp, sp})
	if err != nil {
		return nil, nil, 0, err
	}
	if seqData, err = g.Group(ctx, world, comm.AxisData, comm.AxisSeq); err != nil {
		return nil, nil, 0, err
	}
	if seq, err = g.Group(ctx, world, comm.AxisSeq); err != nil {
		return nil, nil, 0, err
	}
	return seqData, seq, g.CoordOf(world.Rank(), comm.AxisData), nil
}

// checkSP validates the sequence-parallel setup against cfg and the model:
// the SP group matches sequence_parallel_size and divides the engine's
// group, and a model that says how it shards sequences agrees (with TP
// too, tp_sp.go; on the CPU or a device: groups_device.go).
func checkSP(cfg *config.Config, net model.Model, o options) error {
	sp := max(1, cfg.SequenceParallelSize)
	n := 1
	if o.comm != nil {
		n = o.comm.Size()
	}
	hint := "SequenceParallelGroups"
	if cfg.TensorModelParallelSize > 1 {
		hint = "TensorSequenceParallelGroups"
	}
	switch {
	case o.sp == nil && sp > 1:
		return fmt.Errorf("deepgo.Initialize: sequence_parallel_size %d: pass WithSequenceParallel (the group the model shards its sequences over) and WithComm the sequence-data-parallel group (see %s)", sp, hint)
	case o.sp != nil && o.sp.Size() != sp:
		return fmt.Errorf("deepgo.Initialize: sequence_parallel_size %d, but WithSequenceParallel's group has %d ranks", sp, o.sp.Size())
	case sp > 1 && n%sp != 0:
		return fmt.Errorf("deepgo.Initialize: sequence_parallel_size %d does not divide the %d ranks of WithComm's group (the sequence-data-parallel group, dp x sp)", sp, n)
	}
	if m, ok := net.(interface{ SequenceParallelSize() int }); ok && m.SequenceParallelSize() != sp {
		return fmt.Errorf("deepgo.Initialize: the model shards its sequences over %d ranks, sequence_parallel_size is %d: build it with the group WithSequenceParallel gets", m.SequenceParallelSize(), sp)
	}
	return nil
}
