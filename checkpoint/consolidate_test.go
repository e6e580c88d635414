package checkpoint

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/deepgo-ml/deepgo/checkpoint/safetensors"
	"github.com/deepgo-ml/deepgo/tensor"
	"github.com/stretchr/testify/require"
)

// expectedParams are the parameters a checkpoint of synthState at step
// holds, as Python would see them.
func expectedParams(step int64) map[string]any {
	out := map[string]any{}
	var off int64
	for _, p := range testParams {
		vals := make([]float32, p.Numel())
		for i := range vals {
			vals[i] = masterValue(step, off+int64(i))
		}
		off += p.Numel()
		out[p.Name] = map[string]any{"shape": p.Shape, "values": vals}
	}
	return out
}

// TestConsolidate: a checkpoint saved by 3 ranks consolidates into one
// float32 file holding every parameter whole with the saved values, read
// back in Go and, when python3 has safetensors and numpy, in Python.
func TestConsolidate(t *testing.T) {
	dir := t.TempDir()
	saveWorld(t, dir, 3, 6, Options{})
	ck, err := Open(nil, dir, "")
	require.NoError(t, err)
	defer ck.Close()
	out := filepath.Join(t.TempDir(), "model.safetensors")
	require.NoError(t, ck.Consolidate(context.Background(), nil, out))
	b, err := os.ReadFile(out)
	require.NoError(t, err)
	h, err := safetensors.ReadHeader(bytes.NewReader(b), int64(len(b)))
	require.NoError(t, err)
	require.Len(t, h.Tensors, len(testParams), "tensors")
	// every parameter whole, with its shape and the saved values bit for bit
	var off int64
	for _, p := range testParams {
		info, ok := h.Find(p.Name)
		require.True(t, ok, "%s not found", p.Name)
		require.Equal(t, tensor.Float32, info.DType, "%s: %+v", p.Name, info)
		require.Equal(t, p.Shape, info.Shape, "%s: %+v", p.Name, info)
		raw := b[h.DataOffset+info.Begin : h.DataOffset+info.End]
		for i := range p.Numel() {
			got, want := math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:])), masterValue(6, off+i)
			if math.Float32bits(got) != math.Float32bits(want) {
				require.Failf(t, "not the saved bits", "%s[%d] = %v, saved %v", p.Name, i, got, want)
			}
		}
		off += p.Numel()
	}
	t.Run("python", func(t *testing.T) { runPython(t, out, expectedParams(6)) })
}

// runPython runs testdata/check_consolidated.py when python3 has
// safetensors and numpy (pip install safetensors numpy), else skips.
func runPython(t *testing.T, consolidated string, want map[string]any) {
	if err := exec.Command("python3", "-c", "import safetensors, numpy").Run(); err != nil {
		t.Skip("python3 with safetensors and numpy not available: pip install safetensors numpy")
	}
	tmp := t.TempDir()
	exp := filepath.Join(tmp, "expected.json")
	b, _ := json.Marshal(want)
	os.WriteFile(exp, b, 0o644)

	// A file of every dtype numpy has (all but BF16), written by deepgo.
	dt := filepath.Join(tmp, "dtypes.safetensors")
	vals := map[string]any{}
	var named []safetensors.Named
	add := func(name, npType string, x *tensor.Tensor, v any) {
		named = append(named, safetensors.Named{Name: name, Tensor: x})
		vals[name] = map[string]any{"dtype": npType, "shape": x.Shape(), "values": v}
	}
	f32, _ := tensor.FromFloat32([]float32{1.5, -2, 3e-7, 0}, 2, 2)
	add("f32", "float32", f32, []float32{1.5, -2, 3e-7, 0})
	f16 := mustEmpty(t, tensor.Float16, 3)
	h, _ := f16.Uint16s()
	for i, v := range []float32{0.5, -65504, 1.0 / 1024} {
		h[i] = tensor.Float32ToFloat16(v)
	}
	add("f16", "float16", f16, []float32{0.5, -65504, 1.0 / 1024})
	i32 := mustEmpty(t, tensor.Int32, 2)
	iv, _ := i32.Int32s()
	copy(iv, []int32{-7, 1 << 30})
	add("i32", "int32", i32, []int32{-7, 1 << 30})
	i64 := mustEmpty(t, tensor.Int64, 1, 2)
	lv, _ := i64.Int64s()
	copy(lv, []int64{-1 << 50, 3})
	add("i64", "int64", i64, []int64{-1 << 50, 3})
	u8 := mustEmpty(t, tensor.Uint8, 3)
	ub, _ := u8.RawBytes()
	copy(ub, []byte{0, 200, 255})
	add("u8", "uint8", u8, []int{0, 200, 255})
	bl := mustEmpty(t, tensor.Bool, 2)
	bb, _ := bl.RawBytes()
	copy(bb, []byte{1, 0})
	add("bool", "bool", bl, []bool{true, false})
	f64 := mustEmpty(t, tensor.Float64, 2)
	dv, _ := f64.Float64s()
	copy(dv, []float64{1e300, -0.1})
	add("f64", "float64", f64, []float64{1e300, -0.1})
	empty := mustEmpty(t, tensor.Float32, 0, 3)
	add("empty", "float32", empty, []float32{})
	fl, _ := os.Create(dt)
	_, err := safetensors.Write(fl, named, map[string]string{"format": "pt"})
	require.NoError(t, err)
	fl.Close()
	for _, n := range named {
		n.Tensor.Free()
	}
	dtj := filepath.Join(tmp, "dtypes.json")
	b, _ = json.Marshal(vals)
	os.WriteFile(dtj, b, 0o644)

	out, err := exec.Command("python3", "testdata/check_consolidated.py", consolidated, exp, dt, dtj).CombinedOutput()
	require.NoError(t, err, "python check:\n%s", out)
	t.Logf("python: %s", out)
}
