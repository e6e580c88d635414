package deepgo

// DeepSpeed-Ulysses sequence parallelism with pipeline stages (PP × SP ×
// DP). The world is laid out pipe, data, seq (seq fastest, pipe
// outermost): SequenceParallelGroups' (data, seq) grid under a pipe axis,
// as PipeModelDataGrid puts the model axis under it for TP. Each stage's
// parts run on the rank's sequence shard and exchange q, k and v over the
// stage's SP group in attention (nn/ulysses.go); the pipe group fixes the
// data and seq coordinates, so a stage's SP rank sends its shard of the
// residual stream to the same SP rank of the next stage; the tied wte is
// summed over the first and last stage per SP rank; and the engine's data
// group, over which ZeRO 0-1 reduce and partition, is the stage's
// sequence-data group (dp × sp ranks), as the data-parallel engine's is:
// its average over dp × sp divides out the SP factor of the ranks' local
// means' gradients.

import (
	"context"
	"fmt"

	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/config"
	"github.com/deepgo-ml/deepgo/model"
)

// PipeSequenceParallelGroup lays world out as pp pipeline stages ×
// world/(pp×sp) data-parallel ranks × sp sequence-parallel ranks (axes
// pipe, data, seq; seq fastest) and returns this rank's Ulysses group,
// the group to build the model with (nn.GPTConfig.SP) and to pass as
// WithSequenceParallel, with WithComm(world), to a pipeline engine; and
// its data-parallel rank: which micro-batches it is handed (every stage
// and every SP rank of a data rank is handed the same ones, each SP rank
// keeping its sequence shard, model.TokenBatch.SequenceShard). Every rank
// of world must call it.
func PipeSequenceParallelGroup(ctx context.Context, world comm.Comm, pp, sp int) (seq comm.Comm, dataRank int, err error) {
	if pp < 1 || sp < 1 || world.Size()%(pp*sp) != 0 {
		return nil, 0, fmt.Errorf("deepgo.PipeSequenceParallelGroup: %d pipeline stages x sequence_parallel_size %d must be >= 1 each and divide the world size %d", pp, sp, world.Size())
	}
	g, err := pipeSeqGrid(pp, sp, world.Size()/(pp*sp))
	if err != nil {
		return nil, 0, err
	}
	if seq, err = g.Group(ctx, world, comm.AxisSeq); err != nil {
		return nil, 0, err
	}
	return seq, g.CoordOf(world.Rank(), comm.AxisData), nil
}

// pipeSeqGrid is the PP × SP × DP layout: axes pipe, data, seq.
func pipeSeqGrid(pp, sp, dp int) (*comm.Grid, error) {
	return comm.NewGrid([]string{comm.AxisPipe, comm.AxisData, comm.AxisSeq}, []int{pp, dp, sp})
}

// checkPipeSP validates the pipeline's sequence-parallel setup against
// cfg and the model, as checkSP does the data-parallel engine's: the SP
// group matches sequence_parallel_size and a model that says how it
// shards sequences agrees (pipeGrid checks the group against the grid).
func checkPipeSP(cfg *config.Config, net model.Model, o options, pp int) error {
	sp := max(1, cfg.SequenceParallelSize)
	switch {
	case o.sp == nil && sp > 1:
		return fmt.Errorf("deepgo.Initialize: sequence_parallel_size %d with %d pipeline stages: pass WithSequenceParallel (the group the model shards its sequences over; see PipeSequenceParallelGroup) and WithComm with the whole world", sp, pp)
	case o.sp != nil && o.sp.Size() != sp:
		return fmt.Errorf("deepgo.Initialize: sequence_parallel_size %d, but WithSequenceParallel's group has %d ranks", sp, o.sp.Size())
	}
	if m, ok := net.(interface{ SequenceParallelSize() int }); ok && m.SequenceParallelSize() != sp {
		return fmt.Errorf("deepgo.Initialize: the model shards its sequences over %d ranks, sequence_parallel_size is %d: build it with the group WithSequenceParallel gets", m.SequenceParallelSize(), sp)
	}
	return nil
}

// spSize is the engine's Ulysses degree, 1 without sequence parallelism.
func (e *PipeEngine) spSize() int {
	if e.sp == nil {
		return 1
	}
	return e.sp.Size()
}

// dataAxes are the grid axes of the engine's data group: the data axis,
// and under Ulysses the seq axis with it (the sequence-data group).
func (e *PipeEngine) dataAxes() []string {
	if e.grid.Dim(comm.AxisSeq) > 0 {
		return []string{comm.AxisData, comm.AxisSeq}
	}
	return []string{comm.AxisData}
}
