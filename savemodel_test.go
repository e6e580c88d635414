package deepgo_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/deepgo-ml/deepgo"
	"github.com/deepgo-ml/deepgo/checkpoint/safetensors"
	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/config"
	"github.com/deepgo-ml/deepgo/data"
	"github.com/deepgo-ml/deepgo/model"
	"github.com/deepgo-ml/deepgo/nn"
	"github.com/deepgo-ml/deepgo/tensor"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// savedModel is a safetensors file read back: each tensor's header entry
// and its raw little-endian elements widened to float32 bits.
type savedModel struct {
	hdr  *safetensors.Header
	bits map[string][]uint32 // F32: the bits; F16/BF16: the 16-bit values
}

func readSavedModel(t *testing.T, path string) savedModel {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	hdr, err := safetensors.ReadHeader(f, int64(len(b)))
	require.NoError(t, err)
	out := savedModel{hdr: hdr, bits: map[string][]uint32{}}
	for _, ti := range hdr.Tensors {
		raw := b[hdr.DataOffset+ti.Begin : hdr.DataOffset+ti.End]
		var v []uint32
		switch ti.DType {
		case tensor.Float32:
			for i := 0; i < len(raw); i += 4 {
				v = append(v, binary.LittleEndian.Uint32(raw[i:]))
			}
		default:
			for i := 0; i < len(raw); i += 2 {
				v = append(v, uint32(binary.LittleEndian.Uint16(raw[i:])))
			}
		}
		out.bits[ti.Name] = v
	}
	return out
}

// castBits is v in dt's bits, as readSavedModel returns them.
func castBits(v []float32, dt tensor.DType) []uint32 {
	out := make([]uint32, len(v))
	for i, x := range v {
		switch dt {
		case tensor.Float16:
			out[i] = uint32(tensor.Float32ToFloat16(x))
		case tensor.BFloat16:
			out[i] = uint32(tensor.Float32ToBFloat16(x))
		default:
			out[i] = math.Float32bits(x)
		}
	}
	return out
}

// liveBits is the engine's working copy of p (host memory: the CPU
// backend at ZeRO 0-2) in readSavedModel's form.
func liveBits(t *testing.T, p *model.Param) []uint32 {
	t.Helper()
	if p.Data.DType() == tensor.Float32 {
		v, err := p.Data.Float32s()
		require.NoError(t, err)
		return castBits(v, tensor.Float32)
	}
	v, err := p.Data.Uint16s()
	require.NoError(t, err)
	out := make([]uint32, len(v))
	for i, x := range v {
		out[i] = uint32(x)
	}
	return out
}

type saveModelCase struct {
	name   string
	dev    string
	tp, pp int
	ranks  int
	dtype  tensor.DType
	config string // the precision and zero_optimization keys
	live   bool   // compare with the engine's working weights (CPU, ZeRO 0-2, no TP)
}

// TestSaveModel: DeepSpeed's save_16bit_model. After two steps, SaveModel
// writes one safetensors file holding every parameter of the GPT once
// (the tied embedding too), under its name and full shape, in the
// model's dtype, with exactly the values of the fp32 masters
// (Parameters, unsharded over TP) rounded to that dtype; where the engine
// keeps the working weights in host memory they match those bit for bit.
// ZeRO 0-3, tensor parallelism and pipeline stages, on the CPU and the
// simulated device.
func TestSaveModel(t *testing.T) { saveModelTable(t, saveModelCases()) }

// saveModelCases are TestSaveModel's cases.
func saveModelCases() []saveModelCase {
	return []saveModelCase{
		{name: "fp32-zero0", ranks: 1, dtype: tensor.Float32, config: `"zero_optimization": {"stage": 0}`, live: true},
		{name: "bf16-zero2", ranks: 2, dtype: tensor.BFloat16, config: `"bf16": {"enabled": true}, "zero_optimization": {"stage": 2}`, live: true},
		{name: "fp16-zero1", ranks: 2, dtype: tensor.Float16, config: `"fp16": {"enabled": true}, "zero_optimization": {"stage": 1}`, live: true},
		{name: "bf16-zero2", dev: "sim+delay", ranks: 2, dtype: tensor.BFloat16, config: `"bf16": {"enabled": true}, "zero_optimization": {"stage": 2}`},
		{name: "fp16-zero3", ranks: 2, dtype: tensor.Float16,
			config: `"fp16": {"enabled": true}, "zero_optimization": {"stage": 3, "stage3_gather_16bit_weights_on_model_save": true}`},
		{name: "fp16-zero3", dev: "sim+delay", ranks: 2, dtype: tensor.Float16,
			config: `"fp16": {"enabled": true}, "zero_optimization": {"stage": 3, "stage3_gather_16bit_weights_on_model_save": true}`},
		{name: "bf16-zero1-tp2", tp: 2, ranks: 4, dtype: tensor.BFloat16, config: `"bf16": {"enabled": true}, "zero_optimization": {"stage": 1}`},
		{name: "bf16-zero1-pp2", pp: 2, ranks: 4, dtype: tensor.BFloat16, config: `"bf16": {"enabled": true}, "zero_optimization": {"stage": 1}`},
		{name: "bf16-zero1-pp2", dev: "sim+delay", pp: 2, ranks: 2, dtype: tensor.BFloat16, config: `"bf16": {"enabled": true}, "zero_optimization": {"stage": 1}`},
	}
}

// saveModelTable runs TestSaveModel's checks on cases.
func saveModelTable(t *testing.T, cases []saveModelCase) {
	src, err := data.NewMarkov(32, 1, 2, 3)
	require.NoError(t, err)
	corpus := &data.Tokens{IDs: src.Generate(20_000, 4), Vocab: 32}
	for _, c := range cases {
		t.Run(devName(c.dev)+"/"+c.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "export")
			var want map[string][]float32
			var live map[string][]uint32
			var shapes map[string][]int
			var mu sync.Mutex
			err := saveModelRun(t, c, corpus, func(ctx context.Context, rank int, tr deepgo.Trainer, g *nn.GPT) error {
				if err := tr.SaveModel(ctx, dir, deepgo.SaveModelOptions{}); err != nil {
					return err
				}
				p, err := tr.Parameters(ctx)
				if err == nil {
					p, err = g.Unshard(ctx, p)
				}
				if err != nil || rank != 0 {
					return err
				}
				mu.Lock()
				defer mu.Unlock()
				want, live, shapes = p, map[string][]uint32{}, map[string][]int{}
				for _, q := range g.Params() {
					if c.live {
						live[q.Name] = liveBits(t, q)
					}
					full := slices.Clone(q.Shape)
					if q.Parallel.Split && c.tp > 1 {
						full[q.Parallel.Dim] *= c.tp
					}
					shapes[q.Name] = full
				}
				return nil
			})
			require.NoError(t, err)
			got := readSavedModel(t, filepath.Join(dir, deepgo.DefaultModelFile))
			require.Len(t, got.hdr.Tensors, len(want), "one tensor per parameter")
			assert.Equal(t, "2", got.hdr.Metadata["deepgo.step"])
			for name, v := range want {
				ti, ok := got.hdr.Find(name)
				require.True(t, ok, name)
				assert.Equal(t, c.dtype, ti.DType, name)
				assert.Equal(t, shapes[name], ti.Shape, name)
				assert.Equal(t, castBits(v, c.dtype), got.bits[name], name)
				if c.live {
					assert.Equal(t, live[name], got.bits[name], "%s: the engine's working copy", name)
				}
			}
		})
	}
}

// saveModelRun trains a small GPT two steps on c's world and calls fn on
// every rank.
func saveModelRun(t *testing.T, c saveModelCase, corpus *data.Tokens, fn func(ctx context.Context, rank int, tr deepgo.Trainer, g *nn.GPT) error) error {
	t.Helper()
	pp := max(1, c.pp)
	cfgJSON := fmt.Sprintf(`{"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 2, "pipeline_model_parallel_size": %d,
		"tensor_model_parallel_size": %d, "optimizer": {"type": "AdamW", "params": {"lr": 0.01}}, %s}`, pp, max(1, c.tp), c.config)
	return worldFor(c.dev)(context.Background(), c.ranks, func(ctx context.Context, cm comm.Comm, opts []deepgo.Option) error {
		cfg, err := config.Parse([]byte(cfgJSON))
		if err != nil {
			return err
		}
		gc := nn.GPTConfig{Layers: 2, Heads: 4, Width: 16, Vocab: 32, SeqLen: 16}
		dataRank := cm.Rank() % (c.ranks / pp) // a pipeline's ranks: stage-major
		if c.tp > 1 {
			dc, tc, err := deepgo.TensorParallelGroups(ctx, cm, c.tp)
			if err != nil {
				return err
			}
			defer dc.Close()
			defer tc.Close()
			gc.TP = nn.TP{Comm: tc}
			opts = append(opts, deepgo.WithComm(dc), deepgo.WithTensorParallel(tc))
			dataRank = dc.Rank()
		}
		g, err := nn.NewReadyGPT(gc, nil, 1)
		if err != nil {
			return err
		}
		defer g.Free()
		tr, err := deepgo.Initialize(ctx, cfg, g, opts...)
		if err != nil {
			return err
		}
		defer tr.Close()
		for step := range 2 {
			mbs := make([]model.MicroBatch, 2)
			for i := range mbs {
				k := 16*step + 4*dataRank + 2*i
				mbs[i] = corpus.MakeBatch([]int{k, k + 1}, 16).MicroBatch()
			}
			if _, err := tr.TrainBatch(ctx, mbs); err != nil {
				return err
			}
		}
		return fn(ctx, cm.Rank(), tr, g)
	})
}

// TestSaveModelRefusals: at ZeRO stage 3 without
// stage3_gather_16bit_weights_on_model_save every rank gets
// ErrModelNotGathered and nothing is written, as DeepSpeed saves nothing;
// a file name with a directory part or without the .safetensors suffix is
// refused naming the option, an empty directory naming the argument.
func TestSaveModelRefusals(t *testing.T) {
	src, err := data.NewMarkov(32, 1, 2, 3)
	require.NoError(t, err)
	corpus := &data.Tokens{IDs: src.Generate(20_000, 4), Vocab: 32}
	dir := filepath.Join(t.TempDir(), "export")
	c := saveModelCase{ranks: 2, config: `"fp16": {"enabled": true}, "zero_optimization": {"stage": 3}`}
	errs := make([]error, c.ranks)
	err = saveModelRun(t, c, corpus, func(ctx context.Context, rank int, tr deepgo.Trainer, _ *nn.GPT) error {
		errs[rank] = tr.SaveModel(ctx, dir, deepgo.SaveModelOptions{})
		for _, name := range []string{"../x.safetensors", "sub/x.safetensors", "pytorch_model.bin", " ", ".safetensors"} {
			if err := tr.SaveModel(ctx, dir, deepgo.SaveModelOptions{Name: name}); err == nil || !strings.Contains(err.Error(), "SaveModelOptions.Name") {
				return fmt.Errorf("name %q: got %v", name, err)
			}
		}
		if err := tr.SaveModel(ctx, "", deepgo.SaveModelOptions{}); err == nil || !strings.Contains(err.Error(), "dir is empty") {
			return fmt.Errorf("an empty dir: got %v", err)
		}
		return nil
	})
	require.NoError(t, err)
	for r, err := range errs {
		require.ErrorIs(t, err, deepgo.ErrModelNotGathered, "rank %d", r)
		assert.Contains(t, err.Error(), "zero_optimization.stage3_gather_16bit_weights_on_model_save")
	}
	_, err = os.Stat(dir)
	assert.True(t, os.IsNotExist(err), "nothing written: %v", err)
}

// TestSaveModelReservedName: a parameter called __metadata__ (the key
// safetensors keeps for the file's metadata) is refused by name before any
// gather, and nothing is written.
func TestSaveModelReservedName(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "export")
	gc := nn.GPTConfig{Layers: 1, Heads: 2, Width: 8, Vocab: 16, SeqLen: 8}
	rename := func(g *nn.GPT) model.Model {
		g.Params()[0].Name = "__metadata__"
		return g
	}
	err := withGPTOpts(context.Background(), `{"train_micro_batch_size_per_gpu": 1, "optimizer": {"type": "AdamW", "params": {"lr": 0.01}}}`, gc, 1, rename, nil, func(tr deepgo.Trainer) error {
		return tr.SaveModel(context.Background(), dir, deepgo.SaveModelOptions{})
	})
	require.ErrorContains(t, err, `parameter "__metadata__": safetensors reserves the name`)
	_, err = os.Stat(dir)
	assert.True(t, os.IsNotExist(err), "nothing written: %v", err)
}
