package config

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestBF16MasterValidation: bf16.bf16_master_weights_and_grads and
// bf16.bf16_optimizer_states are refused where DeepSpeed asserts, and where
// deepgo has no implementation, naming the key, the value and what is
// allowed; the allowed combinations parse clean.
func TestBF16MasterValidation(t *testing.T) {
	const adam = `"optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}`
	cases := []struct {
		name, doc string
		want      []string // substrings of the error; none: it parses
	}{
		{"offload cpu", `{"bf16": {"enabled": true, "bf16_master_weights_and_grads": true}, "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}, ` + adam + `}`, nil},
		{"both, no offload", `{"bf16": {"enabled": true, "bf16_master_weights_and_grads": true, "bf16_optimizer_states": true}, "zero_optimization": {"stage": 3}, ` + adam + `}`, nil},
		{"both, offload cpu", `{"bf16": {"enabled": true, "bf16_master_weights_and_grads": true, "bf16_optimizer_states": true}, "zero_optimization": {"stage": 1, "offload_optimizer": {"device": "cpu"}}, ` + adam + `}`, nil},
		{"states without masters", `{"bf16": {"enabled": true, "bf16_optimizer_states": true}, "zero_optimization": {"stage": 2}}`,
			[]string{"bf16.bf16_optimizer_states: got true", "false unless bf16.bf16_master_weights_and_grads is true"}},
		{"bf16 off", `{"bf16": {"enabled": false, "bf16_master_weights_and_grads": true}, "zero_optimization": {"stage": 2}}`,
			[]string{"bf16.bf16_master_weights_and_grads: got true", "false unless bf16.enabled is true"}},
		{"stage 0", `{"bf16": {"enabled": true, "bf16_master_weights_and_grads": true, "bf16_optimizer_states": true}, "zero_optimization": {"stage": 0}}`,
			[]string{"bf16.bf16_master_weights_and_grads: got true", "zero_optimization.stage 0", "stage 1, 2 or 3"}},
		{"fp32 states without offload", `{"bf16": {"enabled": true, "bf16_master_weights_and_grads": true}, "zero_optimization": {"stage": 2}}`,
			[]string{"zero_optimization.offload_optimizer.device: got \"none\"", `"cpu" or "nvme"`}},
		{"bf16 states on nvme", `{"bf16": {"enabled": true, "bf16_master_weights_and_grads": true, "bf16_optimizer_states": true}, "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "nvme", "nvme_path": "/tmp"}}}`,
			[]string{"zero_optimization.offload_optimizer.device: got \"nvme\"", "not supported"}},
		{"lamb", `{"bf16": {"enabled": true, "bf16_master_weights_and_grads": true, "bf16_optimizer_states": true}, "zero_optimization": {"stage": 2}, "optimizer": {"type": "Lamb"}}`,
			[]string{"optimizer.type: got \"Lamb\"", "Adam or AdamW", "not supported"}},
		{"fp32 grads", `{"bf16": {"enabled": true, "bf16_master_weights_and_grads": true, "bf16_optimizer_states": true}, "zero_optimization": {"stage": 2}, "data_types": {"grad_accum_dtype": "fp32"}}`,
			[]string{"data_types.grad_accum_dtype: got \"fp32\"", `"bf16" or unset`}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse([]byte(c.doc))
			if c.want == nil {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			for _, w := range c.want {
				assert.ErrorContains(t, err, w)
			}
		})
	}
}
