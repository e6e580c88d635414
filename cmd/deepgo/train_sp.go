package main

import (
	"context"

	"github.com/deepgo-ml/deepgo"
	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/config"
	"github.com/deepgo-ml/deepgo/model"
	"github.com/deepgo-ml/deepgo/nn"
)

// spSize is the config's sequence_parallel_size (1 when absent or nil:
// a config that did not load: Initialize reports it).
func spSize(cfg *config.Config) int {
	if cfg == nil {
		return 1
	}
	return max(1, cfg.SequenceParallelSize)
}

// spGroups is one rank's Ulysses layout (deepgo.SequenceParallelGroups,
// or deepgo.PipeSequenceParallelGroup with pipeline stages): the SP group
// the model shards its sequences over, the engine options (the
// sequence-data-parallel group as the data-parallel engine's; the
// pipeline engine takes the whole world and lays it out itself), and which
// micro-batches the rank is handed (data rank dr of dn).
type spGroups struct {
	sp     nn.SP
	opts   []deepgo.Option
	dr, dn int
}

// spRank builds c's Ulysses groups for sp > 1 with pp pipeline stages;
// nil with sp 1.
func spRank(ctx context.Context, c comm.Comm, sp, pp int) (*spGroups, error) {
	if sp <= 1 {
		return nil, nil
	}
	if pp > 1 {
		sc, dr, err := deepgo.PipeSequenceParallelGroup(ctx, c, pp, sp)
		if err != nil {
			return nil, err
		}
		return &spGroups{sp: nn.SP{Comm: sc}, opts: []deepgo.Option{deepgo.WithSequenceParallel(sc)},
			dr: dr, dn: c.Size() / (pp * sp)}, nil
	}
	sdc, sc, dr, err := deepgo.SequenceParallelGroups(ctx, c, sp)
	if err != nil {
		return nil, err
	}
	return &spGroups{sp: nn.SP{Comm: sc}, opts: []deepgo.Option{deepgo.WithComm(sdc), deepgo.WithSequenceParallel(sc)},
		dr: dr, dn: c.Size() / sp}, nil
}

// parallelRank builds c's model-parallel groups: TP's (tpRank) and
// Ulysses's (spRank), or with both the TP × SP grid's
// (deepgo.TensorSequenceParallelGroups, PipeTensorSequenceParallelGroups
// with pipeline stages), whose options then all ride on the spGroups.
func parallelRank(ctx context.Context, c comm.Comm, tp, sp, pp int) (nn.TP, []deepgo.Option, *spGroups, error) {
	if tp > 1 && sp > 1 {
		var gs deepgo.TensorSequenceGroups
		var err error
		if pp > 1 {
			gs, err = deepgo.PipeTensorSequenceParallelGroups(ctx, c, pp, tp, sp)
		} else {
			gs, err = deepgo.TensorSequenceParallelGroups(ctx, c, tp, sp)
		}
		if err != nil {
			return nn.TP{}, nil, nil, err
		}
		return nn.TP{Comm: gs.Tensor}, nil, &spGroups{sp: nn.SP{Comm: gs.Seq}, opts: gs.Options(), dr: gs.DataRank, dn: c.Size() / (pp * tp * sp)}, nil
	}
	tpg, opts, err := tpRank(ctx, c, tp, pp)
	if err != nil {
		return nn.TP{}, nil, nil, err
	}
	spg, err := spRank(ctx, c, sp, pp)
	return tpg, opts, spg, err
}

// shard is this rank's sequence shard of b (b itself without SP).
func (s *spGroups) shard(b model.TokenBatch) (model.TokenBatch, error) {
	if s == nil {
		return b, nil
	}
	return b.SequenceShard(s.sp.Comm.Rank(), s.sp.Comm.Size())
}
