package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/deepgo-ml/deepgo"
	"github.com/deepgo-ml/deepgo/checkpoint/safetensors"
	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/comm/local"
	"github.com/deepgo-ml/deepgo/config"
	"github.com/deepgo-ml/deepgo/model"
	"github.com/deepgo-ml/deepgo/tensor"
	"github.com/stretchr/testify/require"
)

// affine is a parameter-only module (identity forward and backward): the
// consolidation test needs an engine's checkpoint layout, not training.
type affine struct {
	name string
	ps   []*model.Param
}

func (a *affine) Name() string           { return a.name }
func (a *affine) Params() []*model.Param { return a.ps }
func (a *affine) Forward(_ context.Context, in model.Activation) (model.Activation, error) {
	return in, nil
}
func (a *affine) Backward(_ context.Context, g model.Activation) (model.Activation, error) {
	return g, nil
}

type affineModel []model.Module

func (m affineModel) Modules() []model.Module { return m }
func (m affineModel) Loss(context.Context, model.Activation, model.Activation, float64) (float64, model.Activation, error) {
	return 0, nil, nil
}

func newAffineModel() affineModel {
	var m affineModel
	k := 0
	for i, shape := range [][][]int{{{5, 3}, {5}}, {{7}, {2, 2, 2}}} {
		a := &affine{name: []string{"enc", "head"}[i]}
		for j, s := range shape {
			n := 1
			for _, d := range s {
				n *= d
			}
			v := make([]float32, n)
			for x := range v {
				k++
				v[x] = float32(k) / 8
			}
			t, _ := tensor.FromFloat32(v, s...)
			a.ps = append(a.ps, &model.Param{Name: a.name + "." + []string{"weight", "bias"}[j], Shape: s, Data: t})
		}
		m = append(m, a)
	}
	return m
}

// TestCkptConsolidateEngine: `deepgo ckpt consolidate` on a checkpoint an
// Engine saved (ZeRO-3 over 3 ranks, bf16, so every unit is padded and
// split) writes each parameter as the engine's Parameters has it.
func TestCkptConsolidateEngine(t *testing.T) {
	dir := t.TempDir()
	cfgJSON := `{"train_batch_size": 3, "bf16": {"enabled": true},
		"optimizer": {"type": "AdamW", "params": {"lr": 0.001}},
		"zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0}}`
	want := map[string][]float32{}
	err := local.Run(context.Background(), 3, local.Options{Timeout: 30 * time.Second, Threads: 1}, func(ctx context.Context, c comm.Comm) error {
		cfg, err := config.Parse([]byte(cfgJSON))
		if err != nil {
			return err
		}
		e, err := deepgo.Initialize(ctx, cfg, newAffineModel(), deepgo.WithComm(c))
		if err != nil {
			return err
		}
		defer e.Close()
		if err := e.Save(ctx, dir, deepgo.SaveOptions{}); err != nil {
			return err
		}
		p, err := e.Parameters(ctx)
		if c.Rank() == 0 {
			want = p
		}
		return err
	})
	require.NoError(t, err)
	out := filepath.Join(t.TempDir(), "model.safetensors")
	var stdout, stderr bytes.Buffer
	code := run([]string{"ckpt", "consolidate", dir, out}, &stdout, &stderr)
	require.Zero(t, code, "consolidate\n%s", stderr.String())
	code = run([]string{"ckpt", "inspect", dir}, &stdout, &stderr)
	require.Zero(t, code, "inspect\n%s%s", stdout.String(), stderr.String())
	b, err := os.ReadFile(out)
	require.NoError(t, err)
	h, err := safetensors.ReadHeader(bytes.NewReader(b), int64(len(b)))
	require.NoError(t, err)
	got := map[string][]float32{}
	for _, ti := range h.Tensors {
		require.Equal(t, tensor.Float32, ti.DType, ti.Name)
		raw := b[h.DataOffset+ti.Begin : h.DataOffset+ti.End]
		v := make([]float32, len(raw)/4)
		for i := range v {
			v[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
		}
		got[ti.Name] = v
	}
	require.Len(t, want, 4, "tensors the engine has")
	require.Len(t, got, len(want), "consolidated tensors")
	for name, w := range want {
		g := got[name]
		require.Len(t, g, len(w), name)
		for i := range w {
			require.Equal(t, math.Float32bits(w[i]), math.Float32bits(g[i]), "%s[%d] = %v, engine has %v", name, i, g[i], w[i])
		}
	}

}

// TestCkptConsolidateExcludeFrozen: consolidating a checkpoint saved with
// ExcludeFrozen says which frozen parameters the file lacks.
func TestCkptConsolidateExcludeFrozen(t *testing.T) {
	cfg, err := config.Parse([]byte(`{"train_batch_size": 1, "optimizer": {"type": "AdamW", "params": {"lr": 0.001}}}`))
	require.NoError(t, err)
	for _, exclude := range []bool{false, true} {
		dir := t.TempDir()
		err = local.Run(context.Background(), 1, local.Options{Timeout: 30 * time.Second, Threads: 1}, func(ctx context.Context, c comm.Comm) error {
			m := newAffineModel()
			m[1].Params()[1].Frozen = true // head.bias
			e, err := deepgo.Initialize(ctx, cfg, m, deepgo.WithComm(c))
			if err != nil {
				return err
			}
			defer e.Close()
			return e.Save(ctx, dir, deepgo.SaveOptions{ExcludeFrozen: exclude})
		})
		require.NoError(t, err)
		var stdout, stderr bytes.Buffer
		code := run([]string{"ckpt", "consolidate", dir, filepath.Join(t.TempDir(), "m.safetensors")}, &stdout, &stderr)
		require.Zero(t, code, "consolidate\n%s", stderr.String())
		if exclude {
			require.Contains(t, stdout.String(), "note: 1 frozen parameter saved with ExcludeFrozen, not in ")
			require.Contains(t, stdout.String(), ": head.bias\n")
		} else {
			require.NotContains(t, stdout.String(), "note:")
		}
	}
}
