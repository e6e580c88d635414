package mlp_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/deepgo-ml/deepgo"
	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/comm/local"
	"github.com/deepgo-ml/deepgo/config"
	"github.com/deepgo-ml/deepgo/examples/mlp"
	"github.com/deepgo-ml/deepgo/tensor"
	"github.com/deepgo-ml/deepgo/zero"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var sizes = []int{8, 32, 32, 4}

// run trains 40 steps under ZeRO-3 on two ranks in precision ("fp32" or
// "bf16") and returns rank 0's losses and memory report.
func run(t *testing.T, precision string) ([]float64, zero.Memory) {
	t.Helper()
	half := ""
	if precision == "bf16" {
		half = `, "bf16": {"enabled": true}`
	}
	cfg, err := config.Parse(fmt.Appendf(nil, `{"train_batch_size": 16, "gradient_accumulation_steps": 2,
		"optimizer": {"type": "AdamW", "params": {"lr": 0.01}},
		"zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0}%s}`, half))
	require.NoError(t, err)
	var losses []float64
	var mem zero.Memory
	err = local.Run(context.Background(), 2, local.Options{}, func(ctx context.Context, c comm.Comm) error {
		tr, err := deepgo.Initialize(ctx, cfg, mlp.New(7, sizes...), deepgo.WithComm(c))
		if err != nil {
			return err
		}
		defer tr.Close()
		for s := range 40 {
			loss, err := tr.TrainBatch(ctx, microBatches(s, c.Rank(), 2, 4))
			if err != nil {
				return err
			}
			if c.Rank() == 0 {
				losses = append(losses, loss)
			}
		}
		if c.Rank() == 0 {
			mem = tr.Memory()
		}
		return nil
	})
	require.NoError(t, err)
	return losses, mem
}

// Under bf16 ZeRO-3 the MLP trains on the engine's bf16 shards with no
// float32 copy of its weights anywhere: the engine's parameters are bf16
// only, its fp32 master is a 1/world shard, and all the module allocates
// is one micro-step's activations in the engine's arena. The losses stay
// within 2% of the fp32 run's (first loss within 1%, mean of the last ten
// within 2%: bf16 rounds weights to 8 bits of mantissa).
func TestBF16ZeRO3NoFloat32Replica(t *testing.T) {
	ref, _ := run(t, "fp32")
	got, mem := run(t, "bf16")
	psi := 0
	for i := 1; i < len(sizes); i++ {
		psi += sizes[i-1]*sizes[i] + sizes[i]
	}
	assert.Zero(t, mem.Params[tensor.Float32], "bytes of float32 parameters under bf16: want none")
	n := mem.Params[tensor.BFloat16]
	assert.NotZero(t, n, "bf16 parameters bytes: want this rank's shard of %d", 2*psi)
	assert.LessOrEqual(t, n, int64(2*psi/2+256), "bf16 parameters bytes: want this rank's shard of %d", 2*psi)
	assert.LessOrEqual(t, mem.Master, int64(4*psi/2+512), "fp32 master bytes: want a 1/2 shard of %d", 4*psi)
	// One micro-step of 4 rows: the first layer's copy of the input, each
	// layer's output and input gradient, and the loss gradient.
	acts := 4 * (sizes[0] + sizes[len(sizes)-1])
	for i := 1; i < len(sizes); i++ {
		acts += 4 * (sizes[i] + sizes[i-1])
	}
	assert.Equal(t, int64(4*acts), mem.ArenaPeak, "arena peak bytes: want one micro-step's float32 activations")
	assert.Zero(t, mem.Arena, "arena bytes live after training")
	tail := func(l []float64) (s float64) {
		for _, v := range l[len(l)-10:] {
			s += v / 10
		}
		return s
	}
	// InEpsilon's rule is |got-fp32|/|fp32| > epsilon fails, relative to the fp32 run
	assert.InEpsilon(t, ref[0], got[0], 0.01, "first loss %v, fp32 %v: want ≤ 1%% relative", got[0], ref[0])
	assert.InEpsilon(t, tail(ref), tail(got), 0.02, "last-ten mean %v, fp32 %v: want ≤ 2%% relative", tail(got), tail(ref))
	t.Logf("fp32 %.4f -> %.4f, bf16 %.4f -> %.4f; memory %+v", ref[0], tail(ref), got[0], tail(got), mem)
}
