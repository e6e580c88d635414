package deepgo_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/deepgo-ml/deepgo"
	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/comm/local"
	"github.com/deepgo-ml/deepgo/config"
	"github.com/deepgo-ml/deepgo/internal/testmodel"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// In-process ranks handed different configs fail at Initialize on every
// rank, naming the keys that differ (a rank with another micro-batch size
// trained on without a word); an nvme_path of each rank's own is allowed.
func TestInitializeAgreesOnConfig(t *testing.T) {
	for _, c := range []struct {
		name string
		doc  func(rank int) string
		want string // "" for no error
	}{
		{"micro batch", func(r int) string {
			return fmt.Sprintf(`{"train_micro_batch_size_per_gpu": %d, "optimizer": {"type": "SGD", "params": {"lr": 0.1}}}`, 2+r)
		}, "rank 1 and rank 0 differ in train_micro_batch_size_per_gpu (3 vs 2)"},
		{"zero stage", func(r int) string {
			return fmt.Sprintf(`{"train_micro_batch_size_per_gpu": 2, "zero_optimization": {"stage": %d}, "optimizer": {"type": "SGD", "params": {"lr": 0.1}}}`, 1+r)
		}, "zero_optimization.stage (2 vs 1)"},
		{"own nvme_path", func(r int) string {
			return fmt.Sprintf(`{"train_micro_batch_size_per_gpu": 2, "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "nvme", "nvme_path": %q}},
				"optimizer": {"type": "AdamW", "params": {"lr": 0.1}}}`, fmt.Sprintf("%s/r%d", t.TempDir(), r))
		}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			errs := make([]error, 2)
			err := local.Run(context.Background(), 2, local.Options{Timeout: 10 * time.Second}, func(ctx context.Context, cm comm.Comm) error {
				cfg, err := config.Parse([]byte(c.doc(cm.Rank())))
				require.NoError(t, err)
				m := testmodel.NewMLP(1, 4, 3)
				e, err := initEngine(ctx, cfg, m, deepgo.WithComm(cm))
				errs[cm.Rank()] = err
				if err == nil {
					return e.Close()
				}
				m.FreeUndonated()
				return nil
			})
			require.NoError(t, err)
			for r, err := range errs {
				if c.want == "" {
					assert.NoError(t, err, "rank %d", r)
				} else {
					assert.ErrorContains(t, err, c.want, "rank %d", r)
				}
			}
		})
	}
}
