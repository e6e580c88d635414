package config

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestNonFiniteValues: a value written as an unquoted NaN or Infinity (as
// Python's json.dump writes them) is a FieldError at its JSON path, not
// Hjson's "closing '}'" syntax error; text that only looks like one
// (quoted, in a comment, inside a quoteless string, a key) is left alone.
func TestNonFiniteValues(t *testing.T) {
	for _, tc := range []struct {
		name string
		doc  string
		want []string // "path|value", in document order; nil: no such error
	}{
		{"lr NaN", `{"optimizer": {"type": "AdamW", "params": {"lr": NaN}}}`, []string{"optimizer.params.lr|NaN"}},
		{"followed by a key", `{"gradient_clipping": Infinity, "train_micro_batch_size_per_gpu": 1}`, []string{"gradient_clipping|Infinity"}},
		{"negative, own line", "{\n  \"gradient_clipping\": -Infinity\n}", []string{"gradient_clipping|-Infinity"}},
		{"array entry", `{"optimizer": {"type": "Adam", "params": {"betas": [0.9, NaN]}}}`, []string{"optimizer.params.betas[1]|NaN"}},
		{"two, in order", `{"fp16": {"loss_scale": nan}, "gradient_clipping": inf}`, []string{"fp16.loss_scale|nan", "gradient_clipping|inf"}},
		{"Hjson, no root braces", "gradient_clipping: NaN\nsteps_per_print: 10\n", []string{"gradient_clipping|NaN"}},
		{"after a comment", "{ // lr: NaN\n \"a\": /* x */ NaN # y\n}", []string{"a|NaN"}},
		{"quoted", `{"optimizer": {"type": "AdamW", "params": {"lr": "NaN"}}}`, nil},
		{"in a quoteless string", "{\"wandb\": {\"project\": Infinity and, NaN\n}}", nil},
		{"as a key", `{"NaN": 1}`, nil},
		{"in a multiline string", "{\"x\": '''\nNaN\n'''}", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.doc))
			if tc.want == nil {
				if err != nil {
					assert.NotContains(t, err.Error(), "not JSON numbers")
				}
				return
			}
			var es Errors
			require.ErrorAs(t, err, &es, "%v", err)
			require.Len(t, es, len(tc.want), "%v", err)
			for i, w := range tc.want {
				path, value, _ := strings.Cut(w, "|")
				assert.Equal(t, path, es[i].Path, "%v", err)
				assert.Equal(t, value+" (unquoted)", es[i].Value, "%v", err)
				assert.Contains(t, es[i].Allowed, "a finite number", "%v", err)
				assert.Contains(t, es[i].Msg, "NaN and Infinity are not JSON numbers", "%v", err)
			}
			assert.NotContains(t, err.Error(), "closing")
		})
	}
}
