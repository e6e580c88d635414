package deepgo

// Megatron tensor parallelism in the data-parallel engine: the model's
// layers are sharded over a TP group (nn.GPTConfig.TP) and do their own
// collectives; the engine runs ZeRO 0-3 in the data-parallel group of the
// ranks holding the same shards, and makes the step agree over TP: one
// overflow verdict, and the gradient norm of the whole (unsharded) model.

import (
	"context"
	"fmt"
	"math"

	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/config"
	"github.com/deepgo-ml/deepgo/model"
	"github.com/deepgo-ml/deepgo/tensor"
)

// WithTensorParallel runs the engine as one rank of the tensor-parallel
// group tp, the group the model was sharded over; WithComm is then this
// rank's data-parallel group (TensorParallelGroups builds both from a
// world). tp.Size() must equal tensor_model_parallel_size. The engine's
// Parameters are then this rank's shards (nn.GPT.Unshard gathers them).
// The ranks of one tensor-parallel group must pass the same micro-batches
// (each computes its shard of the same tokens; the engine cannot compare
// arbitrary inputs, so different data trains without an error), as in
// Megatron, where the data loader is shared by the group.
func WithTensorParallel(tp comm.Comm) Option { return func(o *options) { o.tp = tp } }

// TensorParallelGroups lays world out as DeepSpeed and Megatron do
// (comm.PipeModelDataGrid with one stage: model ranks adjacent, data
// outermost) and returns this rank's data-parallel and tensor-parallel
// groups. Every rank of world must call it.
func TensorParallelGroups(ctx context.Context, world comm.Comm, tp int) (data, model comm.Comm, err error) {
	if tp < 1 || world.Size()%tp != 0 {
		return nil, nil, fmt.Errorf("deepgo.TensorParallelGroups: tensor_model_parallel_size %d must be >= 1 and divide the world size %d", tp, world.Size())
	}
	g, err := comm.PipeModelDataGrid(1, tp, world.Size()/tp)
	if err != nil {
		return nil, nil, err
	}
	if data, err = g.Group(ctx, world, comm.AxisData); err != nil {
		return nil, nil, err
	}
	if model, err = g.Group(ctx, world, comm.AxisModel); err != nil {
		return nil, nil, err
	}
	return data, model, nil
}

// checkTP refuses what cannot run at all (unsupported), then validates the
// tensor-parallel setup against cfg, and a model that says whether it
// splits its sequences Megatron's way against megatron_sequence_parallel.
func checkTP(cfg *config.Config, net model.Model, o options) error {
	if err := unsupported(cfg); err != nil {
		return err
	}
	tp := max(1, cfg.TensorModelParallelSize)
	switch {
	case o.tp == nil && tp > 1:
		return fmt.Errorf("deepgo.Initialize: tensor_model_parallel_size %d: pass WithTensorParallel (the group the model is sharded over; see TensorParallelGroups)", tp)
	case o.tp != nil && o.tp.Size() != tp:
		return fmt.Errorf("deepgo.Initialize: tensor_model_parallel_size %d, but WithTensorParallel's group has %d ranks", tp, o.tp.Size())
	}
	return checkMegatronSP(cfg, net)
}

// checkMegatronSP refuses a model that says whether it splits its
// sequences Megatron's way and disagrees with megatron_sequence_parallel:
// the config is what the user reads, so a model built otherwise would
// train unlike it says (the layouts give the same numbers, but not the
// same memory).
func checkMegatronSP(cfg *config.Config, net model.Model) error {
	tp := max(1, cfg.TensorModelParallelSize)
	if m, ok := net.(interface{ MegatronSequenceParallel() bool }); ok && tp > 1 && m.MegatronSequenceParallel() != cfg.MegatronSequenceParallel {
		return fmt.Errorf("deepgo.Initialize: megatron_sequence_parallel is %v, but the model was built with nn.TP.SequenceParallel %v: build it as the config says", cfg.MegatronSequenceParallel, m.MegatronSequenceParallel())
	}
	return nil
}

// tpOverflow agrees on overflow over the TP group: each rank checked only
// its shards' gradients.
func (e *Engine) tpOverflow(ctx context.Context, overflow bool) (bool, error) {
	if e.tp == nil || e.tp.Size() == 1 {
		return overflow, nil
	}
	flag, err := tensor.Empty(tensor.Int32, 1)
	if err != nil {
		return false, err
	}
	defer flag.Free()
	v, _ := flag.Int32s()
	if overflow {
		v[0] = 1
	}
	if err := comm.AllReduceHost(ctx, e.tp, flag, comm.Max); err != nil { // a host flag: staged over NCCL
		return false, fmt.Errorf("deepgo: agreeing on overflow over tensor parallelism: %w", err)
	}
	return v[0] != 0, nil
}

// globalNorm is the (loss-scaled) gradient norm of the whole model: under
// TP the sharded parameters' squares summed over the TP group, the
// replicated ones (the same on every TP rank) counted once.
func (e *Engine) globalNorm(ctx context.Context) (float64, error) {
	if e.tp == nil || e.tp.Size() == 1 {
		return e.z.GlobalNorm(ctx)
	}
	split, repl, err := e.z.SumSquaresSplit(ctx, func(m, p int) bool { return e.params[m][p].Parallel.Split })
	if err != nil {
		return 0, err
	}
	all, err := comm.AllGatherInt64s(ctx, e.tp, []int64{int64(math.Float64bits(split))})
	if err != nil {
		return 0, fmt.Errorf("deepgo: gradient norm over tensor parallelism: %w", err)
	}
	sum := repl
	for _, b := range all {
		sum += math.Float64frombits(uint64(b))
	}
	return math.Sqrt(sum), nil
}

// reportRank is the rank that logs and writes reports: the world rank in
// TensorParallelGroups' layout (model fastest), so that only one of the
// TP ranks holding data rank 0 counts as rank 0.
func (e *Engine) reportRank() int {
	if e.tp == nil {
		return e.c.Rank()
	}
	return e.c.Rank()*e.tp.Size() + e.tp.Rank()
}

// checkShards refuses a model sharded for TP (a Split parameter) without
// the TP group: its norm and overflow would be this rank's shards' alone.
func (e *Engine) checkShards() error {
	if p := firstShard(e.params); e.tp == nil && p != nil {
		return fmt.Errorf("deepgo.Initialize: parameter %s is a tensor-parallel shard (dim %d): set tensor_model_parallel_size and pass WithTensorParallel with the group the model is sharded over", p.Name, p.Parallel.Dim)
	}
	return nil
}

// firstShard is the first tensor-parallel shard (a Split parameter) among
// params, nil when there is none.
func firstShard(params [][]*model.Param) *model.Param {
	for _, ps := range params {
		for _, p := range ps {
			if p.Parallel.Split {
				return p
			}
		}
	}
	return nil
}
