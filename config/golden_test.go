package config

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/deepgo-ml/deepgo/internal/shareddata"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type goldenBatch struct {
	Case   int                        `json:"case"`
	Note   string                     `json:"note"`
	World  int64                      `json:"world_size"`
	Config map[string]json.RawMessage `json:"config"`
	Result map[string]json.RawMessage `json:"result"`
	Error  *struct {
		Type    string `json:"type"`
		Phase   string `json:"phase"`
		Message string `json:"message"`
	} `json:"error"`
}

// pyValue decodes one JSON value the way Python's json does: integers stay
// ints, numbers with a fraction or exponent become floats.
func pyValue(t *testing.T, raw json.RawMessage) any {
	if raw == nil {
		return nil
	}
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var v any
	require.NoError(t, d.Decode(&v))
	if n, ok := v.(json.Number); ok {
		if strings.ContainsAny(string(n), ".eE") {
			f, _ := n.Float64()
			return f
		}
		i, _ := n.Int64()
		return i
	}
	return v
}

func samePy(a, b any) bool {
	switch x := a.(type) {
	case float64:
		y, ok := b.(float64)
		return ok && x == y
	case int64:
		y, ok := b.(int64)
		return ok && x == y
	}
	return a == b
}

// TestGoldenBatch checks every record of batch_config.jsonl against
// DeepSpeed's batch logic, and the typed Resolve for the integer cases.
func TestGoldenBatch(t *testing.T) {
	f, err := os.Open(shareddata.GoldenFile(t, "batch_config.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	n := 0
	for sc.Scan() {
		if len(bytes.TrimSpace(sc.Bytes())) == 0 {
			continue
		}
		var g goldenBatch
		require.NoError(t, json.Unmarshal(sc.Bytes(), &g))
		n++
		keys := batchKeys
		in := make([]any, 3)
		for i, k := range keys {
			in[i] = pyValue(t, g.Config[k])
		}
		tb, mb, gas, perr := pyBatch(in[0], in[1], in[2], g.World)
		if g.Error != nil {
			if !assert.NotNil(t, perr, "case %d (%s): want %s %q, got result %v %v %v", g.Case, g.Note, g.Error.Type, g.Error.Message, tb, mb, gas) {
				continue
			}
			assert.Equal(t, [3]string{g.Error.Type, g.Error.Phase, g.Error.Message}, [3]string{perr.Type, perr.Phase, perr.Message},
				"case %d (%s): type, phase, message", g.Case, g.Note)
		} else {
			if !assert.Nil(t, perr, "case %d (%s): unexpected error", g.Case, g.Note) {
				continue
			}
			got := []any{tb, mb, gas}
			for i, k := range keys {
				want := pyValue(t, g.Result[k])
				assert.True(t, samePy(got[i], want), "case %d (%s): %s = %#v, want %#v", g.Case, g.Note, k, got[i], want)
			}
		}
		checkTypedResolve(t, g, in)
	}
	require.NoError(t, sc.Err())
	if n == 0 {
		t.Fatal("no golden records")
	}
	shareddata.Checked(t, "batch_config.jsonl", n, n)
}

// checkTypedResolve runs the same case through Parse and Config.Resolve when
// the inputs are plain integers (what a Config can hold).
func checkTypedResolve(t *testing.T, g goldenBatch, in []any) {
	doc := map[string]any{}
	keys := batchKeys
	for i, v := range in {
		switch v.(type) {
		case nil:
		case int64:
			doc[keys[i]] = v
		default:
			return
		}
	}
	b, _ := json.Marshal(doc)
	cfg, err := Parse(b)
	if err != nil {
		if !assert.NotNil(t, g.Error, "case %d: Parse: %v (DeepSpeed accepts it)", g.Case, err) {
			return
		}
		// Values <= 0 are rejected by type checks before the arithmetic:
		// DeepSpeed's error must be about such a value too.
		assert.Empty(t, sameBatchParseError(g, in, err), "case %d (%s): Parse: %v; DeepSpeed: %s (%s): %s", g.Case, g.Note, err,
			g.Error.Type, g.Error.Phase, g.Error.Message)
		return
	}
	batch, err := cfg.Resolve(int(g.World), 1, 1, 1)
	if g.Error != nil {
		assert.ErrorContains(t, err, g.Error.Message, "case %d: Resolve", g.Case)
		return
	}
	if !assert.NoError(t, err, "case %d: Resolve", g.Case) {
		return
	}
	want := []int64{pyValue(t, g.Result[keys[0]]).(int64), pyValue(t, g.Result[keys[1]]).(int64), pyValue(t, g.Result[keys[2]]).(int64)}
	got := []int64{int64(batch.TrainBatchSize), int64(batch.MicroBatch), int64(batch.GradAccum)}
	assert.Equal(t, want, got, "case %d: Resolve = %+v: train, micro, gas", g.Case, batch)
	assert.Equal(t, int(g.World), batch.DataParallel, "case %d: Resolve = %+v: data parallel", g.Case, batch)
}

// batchKeys is the batch triad in DeepSpeed's order; golden inputs follow it.
var batchKeys = []string{"train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps"}

// goldenBadKey returns the key a golden error is about when DeepSpeed
// failed on one non-positive value: the key a "has to be greater than 0"
// assertion names, or the zero divisor of a ZeroDivisionError (train //
// micro // world, or train // world // gas). Other errors (inconsistent
// sizes, missing keys, wrong types) give "".
func goldenBadKey(g goldenBatch, in []any) string {
	e := g.Error
	for i, prefix := range []string{"Train batch size: ", "Micro batch size per gpu: ", "Gradient accumulation steps: "} {
		if e.Type == "AssertionError" && strings.HasPrefix(e.Message, prefix) && strings.HasSuffix(e.Message, " has to be greater than 0") {
			return batchKeys[i]
		}
	}
	if e.Type == "ZeroDivisionError" {
		for _, i := range []int{1, 2} {
			if in[i] == int64(0) {
				return batchKeys[i]
			}
		}
	}
	return ""
}

// sameBatchParseError returns "" when err, Parse's rejection of a golden
// case DeepSpeed also failed, is the same error: DeepSpeed failed on a
// non-positive value (goldenBadKey), every FieldError names a batch key
// whose input is <= 0 and allows only integers >= 1, and one names the key
// DeepSpeed named when that key was an input (not a derived value).
// Otherwise it says what differs.
func sameBatchParseError(g goldenBatch, in []any, err error) string {
	key := goldenBadKey(g, in)
	if key == "" {
		return "DeepSpeed's error is not about a value <= 0, so Parse must accept the input"
	}
	var es Errors
	if !errors.As(err, &es) || len(es) == 0 {
		return "not a config.Errors"
	}
	named := false
	for _, e := range es {
		i := slices.Index(batchKeys, e.Path)
		if i < 0 {
			return fmt.Sprintf("error at %q: not a batch key", e.Path)
		}
		if v, ok := in[i].(int64); !ok || v > 0 {
			return fmt.Sprintf("error at %s, whose input %v is not <= 0", e.Path, in[i])
		}
		if !strings.Contains(e.Allowed, ">= 1") {
			return fmt.Sprintf("error at %s allows %q: want the integer >= 1 class", e.Path, e.Allowed)
		}
		named = named || e.Path == key
	}
	if given := in[slices.Index(batchKeys, key)] != nil; given && !named {
		return fmt.Sprintf("no error at %s, the input DeepSpeed named", key)
	}
	return ""
}
