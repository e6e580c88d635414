package main

import (
	"context"

	"github.com/deepgo-ml/deepgo"
	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/config"
	"github.com/deepgo-ml/deepgo/nn"
)

// tpSize is the config's tensor_model_parallel_size (1 when absent or nil:
// a config that did not load: Initialize reports it).
func tpSize(cfg *config.Config) int {
	if cfg == nil {
		return 1
	}
	return max(1, cfg.TensorModelParallelSize)
}

// tpRank splits world c into its data-parallel and tensor-parallel groups
// (deepgo.TensorParallelGroups) for tp > 1: the model shards itself over
// the TP group, and the engine options replace the world with the data
// group. With tp 1 it returns c, no TP group and no options.
func tpRank(ctx context.Context, c comm.Comm, tp int) (data comm.Comm, group nn.TP, opts []deepgo.Option, err error) {
	if tp <= 1 {
		return c, nn.TP{}, nil, nil
	}
	dc, tc, err := deepgo.TensorParallelGroups(ctx, c, tp)
	if err != nil {
		return nil, nn.TP{}, nil, err
	}
	return dc, nn.TP{Comm: tc}, []deepgo.Option{deepgo.WithComm(dc), deepgo.WithTensorParallel(tc)}, nil
}
