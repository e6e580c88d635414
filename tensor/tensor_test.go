package tensor

import (
	"encoding/json"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestDTypeNamesAndSizes(t *testing.T) {
	cases := []struct {
		dt   DType
		name string
		size int
	}{
		{Float32, "float32", 4}, {Float16, "float16", 2}, {BFloat16, "bfloat16", 2}, {Int32, "int32", 4},
		{Int64, "int64", 8}, {Uint8, "uint8", 1}, {Bool, "bool", 1}, {Float64, "float64", 8},
	}
	for _, c := range cases {
		assert.Equal(t, c.name, c.dt.String(), "DType %d name", c.dt)
		assert.Equal(t, c.size, c.dt.Size(), "%s size", c.name)
		got, err := ParseDType(c.name)
		assert.NoError(t, err, "ParseDType(%q)", c.name)
		assert.Equal(t, c.dt, got, "ParseDType(%q)", c.name)
	}
	for in, want := range map[string]DType{"fp16": Float16, "bf16": BFloat16, "torch.bfloat16": BFloat16, "half": Float16, "FP32": Float32} {
		got, err := ParseDType(in)
		assert.NoError(t, err, "ParseDType(%q)", in)
		assert.Equal(t, want, got, "ParseDType(%q)", in)
	}
	_, err := ParseDType("fp8")
	assert.ErrorContains(t, err, `"fp8"`, "ParseDType(fp8): want the value")
	assert.ErrorContains(t, err, "bfloat16", "ParseDType(fp8): want the allowed names")
	assert.False(t, DType(99).Valid(), "DType(99) should be invalid")
	assert.Zero(t, DType(99).Size(), "DType(99) should have size 0")
}

func TestDevice(t *testing.T) {
	for in, want := range map[string]Device{"cpu": CPU, "cuda": CUDA(0), "cuda:3": CUDA(3)} {
		d, err := ParseDevice(in)
		assert.NoError(t, err, "ParseDevice(%q)", in)
		assert.Equal(t, want, d, "ParseDevice(%q)", in)
		if in != "cuda" {
			assert.Equal(t, in, d.String(), "%v.String()", d)
		}
	}
	_, err := ParseDevice("tpu")
	assert.Error(t, err, "ParseDevice(tpu) should fail")
}

func TestViews(t *testing.T) {
	x, err := Empty(Float32, 2, 3, 4)
	require.NoError(t, err)
	defer x.Free()
	require.Equal(t, 24, x.Numel(), "numel of %v", x)
	require.Equal(t, 96, x.Bytes(), "bytes of %v", x)
	require.True(t, x.Contiguous(), "%v not contiguous", x)
	require.Zero(t, uintptr(x.Ptr())%HostAlign, "%v at %p not aligned to %d", x, x.Ptr(), HostAlign)
	f, _ := x.Float32s()
	for i := range f {
		require.Zero(t, f[i], "Empty is not zeroed")
		f[i] = float32(i)
	}
	r, err := x.Reshape(6, -1)
	require.NoError(t, err, "Reshape(6, -1)")
	require.Equal(t, 4, r.Shape()[1], "Reshape(6, -1) = %v", r)
	s, err := x.Slice(5, 3)
	require.NoError(t, err)
	v, _ := s.Float32s()
	require.Equal(t, []float32{5, 7}, []float32{v[0], v[2]}, "Slice(5,3) = %v: first and last", v)
	n, err := x.Narrow(2, 1, 2)
	require.NoError(t, err, "Narrow")
	require.False(t, n.Contiguous(), "Narrow = %v is contiguous", n)
	require.Equal(t, 1, n.Offset(), "Narrow = %v offset", n)
	_, err = n.Float32s()
	assert.Error(t, err, "Float32s of a strided view should fail")
	_, err = x.Uint16s()
	assert.ErrorContains(t, err, "dtype float32", "Uint16s of float32")
	for _, c := range []struct {
		name string
		err  error
	}{
		{"reshape size", func() error { _, err := x.Reshape(5, 5); return err }()},
		{"reshape two -1", func() error { _, err := x.Reshape(-1, -1); return err }()},
		{"slice range", func() error { _, err := x.Slice(20, 5); return err }()},
		{"narrow dim", func() error { _, err := x.Narrow(3, 0, 1); return err }()},
		{"negative shape", func() error { _, err := Empty(Float32, -1); return err }()},
		{"bad dtype", func() error { _, err := Empty(DType(42), 1); return err }()},
		{"wrong data length", func() error { _, err := FromFloat32([]float32{1, 2, 3}, 2, 2); return err }()},
	} {
		assert.Error(t, c.err, c.name)
	}
}

func TestFreeTwice(t *testing.T) {
	x, _ := Empty(Float16, 4)
	v, _ := x.Slice(1, 2)
	require.NoError(t, v.Free())
	require.ErrorIs(t, x.Free(), ErrFreed, "second Free")
	assert.Nil(t, x.Ptr(), "Ptr after Free should be nil")
	_, err := x.Uint16s()
	assert.ErrorIs(t, err, ErrFreed, "Uint16s after Free")
}

func TestFlatLayoutAndShards(t *testing.T) {
	specs := []ParamSpec{{"w1", []int{3, 5}}, {"b1", []int{5}}, {"w2", []int{7}}}
	slots, total, err := FlatLayout(specs, 8, 4)
	require.NoError(t, err)
	wantOff := []int{0, 16, 24}
	for i, s := range slots {
		assert.Equal(t, wantOff[i], s.Offset, "slot %s offset", s.Name)
	}
	assert.Equal(t, 32, total, "total: 24+7 = 31, padded to a multiple of 4")
	f, err := NewFlat(Float32, specs, 8, 4)
	require.NoError(t, err)
	defer f.Free()
	w1, _ := f.View(0)
	got := w1.Shape()
	assert.Equal(t, []int{3, 5}, got[:2], "view shape %v", got)
	d, _ := w1.Float32s()
	d[0] = 42
	all, _ := f.Data.Float32s()
	assert.Equal(t, float32(42), all[0], "view does not share the flat storage")
	sh, err := f.Shard(1, 4)
	if assert.NoError(t, err, "Shard(1,4)") {
		assert.Equal(t, 8, sh.Offset(), "Shard(1,4) = %v offset", sh)
		assert.Equal(t, 8, sh.Numel(), "Shard(1,4) = %v numel", sh)
	}
	_, err = f.Shard(0, 3)
	assert.ErrorContains(t, err, "equal shards", "Shard(0,3)")
	_, _, err = FlatLayout(specs, 0, 1)
	assert.Error(t, err, "align 0 should fail")
}

func TestWrapStorageKeepsOwnership(t *testing.T) {
	x, _ := Empty(Uint8, 64)
	defer x.Free()
	w := WrapStorage(unsafe.Add(x.Ptr(), 1), 32, CPU, nil)
	require.NoError(t, w.Free())
	raw, _ := x.RawBytes()
	require.Len(t, raw, 64, "owner storage affected")
}

func TestDTypeJSON(t *testing.T) {
	type rec struct {
		D DType `json:"d"`
	}
	for _, d := range []DType{Float32, Float16, BFloat16, Int32, Int64, Uint8, Bool, Float64} {
		b, err := json.Marshal(rec{d})
		require.NoError(t, err)
		assert.Equal(t, `{"d":"`+d.String()+`"}`, string(b))
		var back rec
		require.NoError(t, json.Unmarshal(b, &back))
		assert.Equal(t, d, back.D)
	}
	var r rec
	require.NoError(t, json.Unmarshal([]byte(`{"d":"bf16"}`), &r))
	assert.Equal(t, BFloat16, r.D)
	assert.ErrorContains(t, json.Unmarshal([]byte(`{"d":"fp8"}`), &r), `"fp8"`)
	b, err := json.Marshal(rec{DType(200)})
	require.NoError(t, err)
	assert.Equal(t, `{"d":"dtype(200)"}`, string(b))
	assert.ErrorContains(t, json.Unmarshal(b, &r), `"dtype(200)"`)
}

func TestDeviceJSON(t *testing.T) {
	for _, d := range []Device{CPU, CUDA(1), Sim(3)} {
		b, err := json.Marshal(struct{ D Device }{d})
		require.NoError(t, err)
		assert.Equal(t, `{"D":"`+d.String()+`"}`, string(b))
		var back struct{ D Device }
		require.NoError(t, json.Unmarshal(b, &back))
		assert.Equal(t, d, back.D)
	}
	var back struct{ D Device }
	assert.ErrorContains(t, json.Unmarshal([]byte(`{"D":"tpu"}`), &back), `"tpu"`)
}
