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

// tpRank makes world c's tensor-parallel group for tp > 1, which the
// model shards itself over, and the engine options: without pipeline
// stages the data-parallel engine runs over the data group of
// deepgo.TensorParallelGroups; with pp stages the pipeline engine takes
// the whole world (pipe × data × model, deepgo.PipeTensorParallelGroup).
// With tp 1 it returns no TP group and no options.
func tpRank(ctx context.Context, c comm.Comm, tp, pp int) (group nn.TP, opts []deepgo.Option, err error) {
	switch {
	case tp <= 1:
		return nn.TP{}, nil, nil
	case pp > 1:
		tc, err := deepgo.PipeTensorParallelGroup(ctx, c, pp, tp)
		if err != nil {
			return nn.TP{}, nil, err
		}
		return nn.TP{Comm: tc}, []deepgo.Option{deepgo.WithTensorParallel(tc)}, nil
	}
	dc, tc, err := deepgo.TensorParallelGroups(ctx, c, tp)
	if err != nil {
		return nn.TP{}, nil, err
	}
	return nn.TP{Comm: tc}, []deepgo.Option{deepgo.WithComm(dc), deepgo.WithTensorParallel(tc)}, nil
}

// parallelHeads is the built-in model's head count and width for n ranks
// splitting its heads (TP, and Ulysses SP, each need heads divisible by
// their degree): heads rounded up to a multiple of n, the width up to a
// multiple of the heads, so that a user's config with a larger degree
// than the model's heads trains instead of stopping at NewGPT.
func parallelHeads(heads, width, n int) (int, int) {
	if n <= 1 || heads%n == 0 {
		return heads, width
	}
	h := (heads + n - 1) / n * n
	return h, (width + h - 1) / h * h
}

// parallelVocab is the built-in model's vocabulary for tp tensor-parallel
// ranks, which split it evenly: rounded up to a multiple of tp, as
// Megatron pads its vocabulary (to --make-vocab-size-divisible-by x TP).
// The padded rows are never targets; their logits join the softmax and
// learn to stay low, as in Megatron.
func parallelVocab(vocab, tp int) int {
	if tp <= 1 {
		return vocab
	}
	return (vocab + tp - 1) / tp * tp
}

// parallelSeqLen is the built-in model's context for n ranks splitting
// every sequence (Ulysses SP, or Megatron SP over the TP ranks): rounded
// down to a multiple of n, never below n.
func parallelSeqLen(t, n int) int {
	if n <= 1 || t%n == 0 {
		return t
	}
	return max(n, t/n*n)
}
