package config

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/deepgo-ml/deepgo/internal/shareddata"
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
	if err := d.Decode(&v); err != nil {
		t.Fatal(err)
	}
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
		if err := json.Unmarshal(sc.Bytes(), &g); err != nil {
			t.Fatal(err)
		}
		n++
		keys := []string{"train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps"}
		in := make([]any, 3)
		for i, k := range keys {
			in[i] = pyValue(t, g.Config[k])
		}
		tb, mb, gas, perr := pyBatch(in[0], in[1], in[2], g.World)
		if g.Error != nil {
			if perr == nil {
				t.Errorf("case %d (%s): want %s %q, got result %v %v %v", g.Case, g.Note, g.Error.Type, g.Error.Message, tb, mb, gas)
				continue
			}
			if perr.Type != g.Error.Type || perr.Phase != g.Error.Phase || perr.Message != g.Error.Message {
				t.Errorf("case %d (%s):\n got %s/%s %q\nwant %s/%s %q", g.Case, g.Note, perr.Type, perr.Phase, perr.Message,
					g.Error.Type, g.Error.Phase, g.Error.Message)
			}
		} else {
			if perr != nil {
				t.Errorf("case %d (%s): unexpected %v", g.Case, g.Note, perr)
				continue
			}
			got := []any{tb, mb, gas}
			for i, k := range keys {
				if want := pyValue(t, g.Result[k]); !samePy(got[i], want) {
					t.Errorf("case %d (%s): %s = %#v, want %#v", g.Case, g.Note, k, got[i], want)
				}
			}
		}
		checkTypedResolve(t, g, in)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		t.Fatal("no golden records")
	}
	shareddata.Checked(t, "batch_config.jsonl", n, n)
}

// checkTypedResolve runs the same case through Parse and Config.Resolve when
// the inputs are plain integers (what a Config can hold).
func checkTypedResolve(t *testing.T, g goldenBatch, in []any) {
	doc := map[string]any{}
	keys := []string{"train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps"}
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
		// Values <= 0 are rejected by type checks before the arithmetic.
		if g.Error == nil {
			t.Errorf("case %d: Parse: %v", g.Case, err)
		}
		return
	}
	batch, err := cfg.Resolve(int(g.World), 1, 1, 1)
	if g.Error != nil {
		if err == nil || !strings.Contains(err.Error(), g.Error.Message) {
			t.Errorf("case %d: Resolve error %v, want it to contain %q", g.Case, err, g.Error.Message)
		}
		return
	}
	if err != nil {
		t.Errorf("case %d: Resolve: %v", g.Case, err)
		return
	}
	want := []int64{pyValue(t, g.Result[keys[0]]).(int64), pyValue(t, g.Result[keys[1]]).(int64), pyValue(t, g.Result[keys[2]]).(int64)}
	if int64(batch.TrainBatchSize) != want[0] || int64(batch.MicroBatch) != want[1] || int64(batch.GradAccum) != want[2] || batch.DataParallel != int(g.World) {
		t.Errorf("case %d: Resolve = %+v, want %v", g.Case, batch, want)
	}
}
