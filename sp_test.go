package deepgo_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/deepgo-ml/deepgo"
	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/comm/local"
	"github.com/deepgo-ml/deepgo/config"
	"github.com/deepgo-ml/deepgo/nn"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// SequenceParallelGroups lays 4 ranks out as 2 data × 2 sequence ranks,
// sequence fastest: SP groups {0,1} and {2,3}, one sequence-data group of
// all four, data ranks 0, 0, 1, 1; an SP degree that does not divide the
// world is refused naming both.
func TestSequenceParallelGroups(t *testing.T) {
	seq := make([][]int, 4)
	seqData := make([][]int, 4)
	dataRank := make([]int, 4)
	err := local.Run(context.Background(), 4, local.Options{Timeout: 10 * time.Second}, func(ctx context.Context, c comm.Comm) error {
		if _, _, _, err := deepgo.SequenceParallelGroups(ctx, c, 3); err == nil || !strings.Contains(err.Error(), "sequence_parallel_size 3 must be >= 1 and divide the world size 4") {
			return fmt.Errorf("sp 3 of 4: got %v", err)
		}
		sd, s, dr, err := deepgo.SequenceParallelGroups(ctx, c, 2)
		if err != nil {
			return err
		}
		seq[c.Rank()], seqData[c.Rank()], dataRank[c.Rank()] = s.Members(), sd.Members(), dr
		return nil
	})
	require.NoError(t, err)
	assert.Equal(t, [][]int{{0, 1}, {0, 1}, {2, 3}, {2, 3}}, seq)
	assert.Equal(t, [][]int{{0, 1, 2, 3}, {0, 1, 2, 3}, {0, 1, 2, 3}, {0, 1, 2, 3}}, seqData)
	assert.Equal(t, []int{0, 0, 1, 1}, dataRank)
}

// PipeSequenceParallelGroup lays 8 ranks out as 2 stages × 2 data × 2
// sequence ranks (pipe outermost, seq fastest): SP groups {0,1}, {2,3},
// {4,5}, {6,7}, data ranks 0, 0, 1, 1 on each stage; sizes that do not
// divide the world are refused naming them.
func TestPipeSequenceParallelGroup(t *testing.T) {
	seq := make([][]int, 8)
	dataRank := make([]int, 8)
	err := local.Run(context.Background(), 8, local.Options{Timeout: 10 * time.Second}, func(ctx context.Context, c comm.Comm) error {
		if _, _, err := deepgo.PipeSequenceParallelGroup(ctx, c, 3, 2); err == nil || !strings.Contains(err.Error(), "3 pipeline stages x sequence_parallel_size 2 must be >= 1 each and divide the world size 8") {
			return fmt.Errorf("pp 3 x sp 2 of 8: got %v", err)
		}
		s, dr, err := deepgo.PipeSequenceParallelGroup(ctx, c, 2, 2)
		if err != nil {
			return err
		}
		defer s.Close()
		seq[c.Rank()], dataRank[c.Rank()] = s.Members(), dr
		return nil
	})
	require.NoError(t, err)
	assert.Equal(t, [][]int{{0, 1}, {0, 1}, {2, 3}, {2, 3}, {4, 5}, {4, 5}, {6, 7}, {6, 7}}, seq)
	assert.Equal(t, []int{0, 0, 1, 1, 0, 0, 1, 1}, dataRank)
}

// Initialize refuses a sequence-parallel setup it cannot run, naming the
// key and the sizes: an SP group of the wrong size, SP with Megatron's
// sequence parallelism, SP with TP but no TP group, SP with
// pipeline stages on a world too small for both, and a model sharded over SP ranks under an engine told
// sequence_parallel_size 1 (it would average over the wrong group).
func TestSequenceParallelRefusals(t *testing.T) {
	cases := []struct {
		name, cfg, want string
		noGroup         bool // no WithSequenceParallel
	}{
		{"group size", `"sequence_parallel_size": 4`, "sequence_parallel_size 4, but WithSequenceParallel's group has 2 ranks", false},
		{"with megatron sp", `"sequence_parallel_size": 2, "tensor_model_parallel_size": 2, "megatron_sequence_parallel": true`, "sequence_parallel_size 2 (Ulysses) with megatron_sequence_parallel (tensor_model_parallel_size 2): not supported", false},
		// the combination is refused before the missing options are asked for
		{"with megatron sp, no group", `"sequence_parallel_size": 2, "tensor_model_parallel_size": 2, "megatron_sequence_parallel": true`, "sequence_parallel_size 2 (Ulysses) with megatron_sequence_parallel (tensor_model_parallel_size 2): not supported", true},
		// with plain TP it runs, given the TP group too
		{"with tp, no tp group", `"sequence_parallel_size": 2, "tensor_model_parallel_size": 2`, "tensor_model_parallel_size 2: pass WithTensorParallel", false},
		// Ulysses runs with pipeline stages, but not on too few ranks
		{"with pipeline", `"sequence_parallel_size": 2, "pipeline_model_parallel_size": 2`, "2 pipeline stages x sequence_parallel_size 2 need a world of pp × sp × data-parallel ranks (WithComm), got 2 ranks", false},
		{"model sharded", `"sequence_parallel_size": 1`, "the model shards its sequences over 2 ranks, sequence_parallel_size is 1", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := local.Run(context.Background(), 2, local.Options{Timeout: 10 * time.Second}, func(ctx context.Context, c comm.Comm) error {
				cfg, err := config.Parse([]byte(`{"train_micro_batch_size_per_gpu": 1, ` + tc.cfg + `, "optimizer": {"type": "Adam", "params": {"lr": 0.001}}}`))
				if err != nil {
					return err
				}
				g, err := nn.NewReadyGPT(nn.GPTConfig{Layers: 2, Heads: 2, Width: 8, Vocab: 8, SeqLen: 4, SP: nn.SP{Comm: c}}, nil, 1)
				if err != nil {
					return err
				}
				defer g.Free()
				opts := []deepgo.Option{deepgo.WithComm(c)}
				if !tc.noGroup {
					opts = append(opts, deepgo.WithSequenceParallel(c))
				}
				tr, err := deepgo.Initialize(ctx, cfg, g, opts...)
				if err == nil {
					tr.Close()
					return fmt.Errorf("no error")
				}
				if !strings.Contains(err.Error(), tc.want) {
					return fmt.Errorf("got %v, want %q", err, tc.want)
				}
				return nil
			})
			require.NoError(t, err)
		})
	}
}
