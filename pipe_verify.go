package deepgo

// After a pipeline load the ranks compare, by digest, what must be
// identical: replicas across data-parallel ranks, tied copies across
// stages.

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/deepgo-ml/deepgo/checkpoint"
	"github.com/deepgo-ml/deepgo/tensor"
)

// verifyIdentical compares by digest what must be identical after a
// load: the stage's replicated parameters (and, under ZeRO stage 0 with
// fp16/bf16 weights, its fp32 masters) across its data-parallel ranks,
// the parameters TP replicates across its TP group, then each tied
// weight's fp32 values across the stages holding it (per TP rank: the
// tied groups pair the same TP rank of each stage, so a split wte's
// shards are compared shard by shard). Every
// comparison runs on every rank whatever the others found, so that no
// group is left waiting; the errors are joined.
func (e *PipeEngine) verifyIdentical(ctx context.Context) error {
	idx, rep, err := e.replicated()
	defer e.releaseStaged()
	// a rank whose host copies failed still meets the others here, so that
	// none waits for it in the comparisons
	if err := agreeOn(ctx, e.world, "Load", err); err != nil {
		return err
	}
	var errs []error
	if err := checkpoint.VerifyReplicated(ctx, e.data, rep); err != nil {
		errs = append(errs, fmt.Errorf("pipeline stage %d, whose data-parallel ranks are world ranks %v: %w", e.stage, e.dataWorldRanks(), err))
	}
	if e.tpSize() > 1 {
		// the parameters TP replicates, across the stage's TP group
		var tpRep []checkpoint.Named
		for i := range idx {
			if !e.params[idx[i][0]][idx[i][1]].Parallel.Split {
				tpRep = append(tpRep, rep[i])
			}
		}
		if err := checkpoint.VerifyReplicated(ctx, e.tp, tpRep); err != nil {
			errs = append(errs, fmt.Errorf("pipeline stage %d, over its tensor-parallel group (ranks are TP ranks): %w", e.stage, err))
		}
	}
	if len(e.tied) == 0 {
		return errors.Join(errs...)
	}
	all, err := e.z.GatherMaster(ctx)
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	for _, t := range e.tied {
		v, err := tensor.FromFloat32(all[t.m][t.p])
		if err != nil {
			return errors.Join(append(errs, err)...)
		}
		err = checkpoint.VerifyReplicated(ctx, t.group, []checkpoint.Named{{Name: t.name, Tensor: v}})
		v.Free()
		var me *checkpoint.ReplicaMismatchError
		if errors.As(err, &me) {
			bad := make([]int, len(me.Ranks))
			for i, r := range me.Ranks {
				bad[i] = t.stages[r]
			}
			err = &TiedMismatchError{Param: t.name, Stages: bad, Owner: t.stages[0]}
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// replicated lists, in host memory (host copies on a device, freed by
// releaseStaged), the tensors the stage's data-parallel ranks must hold
// identically: its working-precision parameters, named by their
// checkpoint keys, and under ZeRO stage 0 with fp16/bf16 weights its fp32
// masters.
// idx are the parameters' (module, param) pairs, in the order of the
// first len(idx) tensors.
func (e *PipeEngine) replicated() (idx [][2]int, rep []checkpoint.Named, err error) {
	keys := e.ckptKeys()
	idx, ts := e.z.ReplicatedParams()
	rep = make([]checkpoint.Named, 0, len(ts))
	for i, t := range ts {
		h, err := e.hostCopy(t)
		if err != nil {
			return nil, nil, err
		}
		rep = append(rep, checkpoint.Named{Name: keys[idx[i][0]][idx[i][1]], Tensor: h})
	}
	if e.z.Config().Stage == 0 && e.z.Config().ModelDType != tensor.Float32 {
		for u := range e.z.Layout().Units {
			h, err := e.hostCopy(e.z.Master(u))
			if err != nil {
				return nil, nil, err
			}
			rep = append(rep, checkpoint.Named{Name: masterName(u), Tensor: h})
		}
	}
	return idx, rep, nil
}

// dataWorldRanks are the world ranks of this stage's data-parallel group.
func (e *PipeEngine) dataWorldRanks() []int {
	groups, _ := e.grid.Groups(e.dataAxes()...) // the grid has the axes
	for _, g := range groups {
		if slices.Contains(g, e.world.Rank()) {
			return g
		}
	}
	return nil
}

// TiedMismatchError says that the copies of a weight tied across pipeline
// stages differ after a load.
type TiedMismatchError struct {
	// Param is the tied weight's name.
	Param string
	// Stages are the stages whose copy differs from the owner's.
	Stages []int
	// Owner is the lowest stage holding the weight, whose copy is the
	// reference.
	Owner int
}

// Error names the weight and the stages.
func (e *TiedMismatchError) Error() string {
	return fmt.Sprintf("tied weight %q: the copy on pipeline stage(s) %v differs from stage %d's", e.Param, e.Stages, e.Owner)
}
