package deepgo

import (
	"fmt"
	"testing"

	"github.com/deepgo-ml/deepgo/config"
	"github.com/deepgo-ml/deepgo/tensor"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The pipeline engine names each activation_checkpointing key it does not
// apply, and says nothing of the keys a config leaves off.
func TestPipeNotesActivationCheckpointing(t *testing.T) {
	for _, c := range []struct {
		section string
		want    []string
		not     []string
	}{
		{`{}`, nil, []string{"activation_checkpointing."}},
		{`{"partition_activations": true, "cpu_checkpointing": true}`,
			[]string{"activation_checkpointing.partition_activations: no effect with pipeline stages", "activation_checkpointing.cpu_checkpointing: no effect"},
			[]string{"contiguous_memory_optimization"}},
		{`{"partition_activations": true, "contiguous_memory_optimization": true, "number_checkpoints": 2, "profile": true, "synchronize_checkpoint_boundary": true}`,
			[]string{"contiguous_memory_optimization: no effect", "profile: no effect", "synchronize_checkpoint_boundary: no effect"},
			[]string{"cpu_checkpointing"}},
	} {
		cfg, err := config.Parse([]byte(fmt.Sprintf(`{"train_micro_batch_size_per_gpu": 1, "activation_checkpointing": %s}`, c.section)))
		require.NoError(t, err)
		notes := fmt.Sprint(pipeNotes(cfg, tensor.CPU))
		for _, w := range c.want {
			assert.Contains(t, notes, w, c.section)
		}
		for _, w := range c.not {
			assert.NotContains(t, notes, w, c.section)
		}
	}
}
