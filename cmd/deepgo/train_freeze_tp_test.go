package main

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/deepgo-ml/deepgo/nn"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestTrainFreezeModelParallel: `deepgo train --freeze` with
// tensor_model_parallel_size 2 (× 2 data-parallel ranks, ZeRO 1, and with
// Megatron's sequence parallelism), with Ulysses sequence_parallel_size
// 2, and with pipeline_model_parallel_size 2 (alone and × TP 2 with
// Megatron's sequence parallelism: the tied wte frozen on both stages)
// ends at the final loss of the same
// frozen run at TP 1 (to float32 summation order), and the model it saves
// (the TP shards gathered) holds the frozen parameters at their initial
// values bit for bit while the others have moved.
func TestTrainFreezeModelParallel(t *testing.T) {
	dir := t.TempDir()
	freeze := `wte|h\.0\.attn\.c_attn|ln_f\.bias`
	train := func(tp int, extra string) (trainResult, string, string) {
		cfg := filepath.Join(dir, fmt.Sprintf("tp%d-%d.json", tp, len(extra)))
		require.NoError(t, os.WriteFile(cfg, []byte(fmt.Sprintf(`{"train_batch_size": 16, "train_micro_batch_size_per_gpu": 8,
			"tensor_model_parallel_size": %d, %s "gradient_clipping": 1.0, "zero_optimization": {"stage": 1},
			"optimizer": {"type": "AdamW", "params": {"lr": 0.003}}}`, tp, extra)), 0o644))
		export := filepath.Join(dir, fmt.Sprintf("export-%d-%d", tp, len(extra)))
		var out, errb bytes.Buffer
		code := run([]string{"train", "--config", cfg, "--model", "tiny", "--steps", "10", "--freeze", freeze, "--save-model", export}, &out, &errb)
		require.Zero(t, code, errb.String())
		lines := strings.Split(strings.TrimSpace(out.String()), "\n")
		var r trainResult
		require.NoError(t, json.Unmarshal([]byte(lines[len(lines)-1]), &r), "last line %q", lines[len(lines)-1])
		return r, export, errb.String()
	}
	one, _, note := train(1, "")
	assert.Contains(t, note, "4 parameters frozen (3712 elements), 12 trainable")
	mc := trainModels["tiny"]
	re := regexp.MustCompile(freeze)
	var pp2 trainResult
	for _, c := range []struct {
		tp, pp, ranks int
		extra         string
	}{{2, 1, 4, ""}, {2, 1, 4, `"megatron_sequence_parallel": true,`}, {1, 1, 4, `"sequence_parallel_size": 2,`},
		{1, 2, 4, `"pipeline_model_parallel_size": 2,`}, {2, 2, 8, `"pipeline_model_parallel_size": 2, "megatron_sequence_parallel": true,`}} {
		extra := c.extra
		r, export, note := train(c.tp, extra)
		assert.Equal(t, c.ranks, r.Ranks)
		if c.pp > 1 { // the note counts the pipeline's GPT, a block per stage
			assert.Contains(t, note, "4 parameters frozen (3712 elements), 24 trainable", extra)
		}
		// the pipeline's GPT has a block per stage: PP 2 is its own
		// reference, and TP 2 × PP 2 ends at its final loss
		ref := one
		switch {
		case c.pp > 1 && c.tp == 1:
			pp2, ref = r, r
		case c.pp > 1:
			ref = pp2
		}
		t.Logf("%s: final loss %v, reference %v", extra, r.FinalLoss, ref.FinalLoss)
		assert.LessOrEqual(t, math.Abs(r.FinalLoss-ref.FinalLoss)/ref.FinalLoss, 1e-5, "final loss")
		g := mc.gpt
		g.Vocab = mc.vocab
		if c.pp > 1 {
			g.Layers = pipeLayers(g.Layers, c.pp, 1)
		}
		init, err := nn.NewReadyGPT(g, nil, 1)
		require.NoError(t, err)
		defer init.Free()
		_, vals := readTensors(t, filepath.Join(export, "model.safetensors"))
		frozen := requireFrozenKept(t, init, vals, re, func(b []byte, i int, x float32) bool {
			return 4*i+4 <= len(b) && binary.LittleEndian.Uint32(b[4*i:]) == math.Float32bits(x)
		})
		require.Equal(t, 4, frozen)
	}
}
