package config

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestNonFiniteValues: a value written as an unquoted NaN or Infinity (as
// Python's json.dump writes them) followed by ',' or '}' on its line is a
// FieldError at its JSON path, not Hjson's "closing '}'" syntax error; text
// that only looks like one (quoted, in a comment, inside a quoteless
// string, a key) is left alone. One alone on its line parses, as Hjson's
// quoteless string, and the field's own check names it (typed).
func TestNonFiniteValues(t *testing.T) {
	for _, tc := range []struct {
		name  string
		doc   string
		want  []string // "path|value", in document order; nil: no such error
		typed string   // the document parses; the field's check says this
	}{
		{"lr NaN", `{"optimizer": {"type": "AdamW", "params": {"lr": NaN}}}`, []string{"optimizer.params.lr|NaN"}, ""},
		{"followed by a key", `{"gradient_clipping": Infinity, "train_micro_batch_size_per_gpu": 1}`, []string{"gradient_clipping|Infinity"}, ""},
		{name: "negative, own line", doc: "{\n  \"gradient_clipping\": -Infinity\n}", typed: `gradient_clipping: got "-Infinity"; allowed: a number`},
		{"array entry", `{"optimizer": {"type": "Adam", "params": {"betas": [0.9, NaN]}}}`, []string{"optimizer.params.betas[1]|NaN"}, ""},
		{"two, in order", `{"fp16": {"loss_scale": nan}, "gradient_clipping": inf}`, []string{"fp16.loss_scale|nan", "gradient_clipping|inf"}, ""},
		{name: "Hjson, no root braces", doc: "gradient_clipping: NaN\nsteps_per_print: 10\n", typed: `gradient_clipping: got "NaN"; allowed: a number`},
		{name: "JSON on lines, a comma after", doc: "{\"optimizer\": {\"type\": \"AdamW\", \"params\": {\n  \"lr\": NaN,\n  \"eps\": 1e-8}}}", typed: `optimizer.params.lr: got "NaN,"; allowed: a number (an unquoted NaN or Infinity reads as this string`},
		{"after a comment", "{ // lr: NaN\n \"gradient_clipping\": /* x */ NaN} # y\n", []string{"gradient_clipping|NaN"}, ""},
		{name: "a string field", doc: "{\"wandb\": {\"project\": NaN\n}}"},
		{name: "quoted", doc: `{"optimizer": {"type": "AdamW", "params": {"lr": "NaN"}}}`, typed: `optimizer.params.lr: got "NaN"; allowed: a number`},
		{name: "in a quoteless string", doc: "{\"wandb\": {\"project\": Infinity and, NaN\n}}"},
		{name: "as a key", doc: `{"NaN": 1}`},
		{name: "in a multiline string", doc: "{\"x\": '''\nNaN\n'''}"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.doc))
			if tc.want == nil {
				if tc.typed != "" {
					require.ErrorContains(t, err, tc.typed)
					require.ErrorContains(t, err, "not JSON numbers")
				} else if err != nil {
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

// A number literal that overflows a float64 (1e999, which Python's json
// reads as inf) is an error naming its path wherever it is, never an
// internal decode failure.
func TestOverflowingNumber(t *testing.T) {
	for doc, path := range map[string]string{
		`{"optimizer": {"type": "AdamW", "params": {"lr": 1e999}}}`: "optimizer.params.lr",
		`{"gradient_clipping": -1e999}`:                             "gradient_clipping",
		`{"zero_optimization": {"reduce_bucket_size": 1e999}}`:      "zero_optimization.reduce_bucket_size",
		`{"autotuning": {"arg_mappings": [1, 1e999]}}`:              "autotuning.arg_mappings[1]",
	} {
		_, err := Parse([]byte(doc))
		var es Errors
		if assert.ErrorAs(t, err, &es, doc) {
			assert.Equal(t, path, es[0].Path, doc)
		}
		if err != nil {
			assert.NotContains(t, err.Error(), "internal", doc)
		}
	}
}
