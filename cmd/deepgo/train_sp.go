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

// shard is this rank's sequence shard of b (b itself without SP).
func (s *spGroups) shard(b model.TokenBatch) (model.TokenBatch, error) {
	if s == nil {
		return b, nil
	}
	return b.SequenceShard(s.sp.Comm.Rank(), s.sp.Comm.Size())
}
