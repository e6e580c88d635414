package tensor

import (
	"errors"
	"strings"
	"testing"
	"unsafe"
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
		if c.dt.String() != c.name || c.dt.Size() != c.size {
			t.Errorf("%d: %s/%d, want %s/%d", c.dt, c.dt, c.dt.Size(), c.name, c.size)
		}
		if got, err := ParseDType(c.name); err != nil || got != c.dt {
			t.Errorf("ParseDType(%q) = %v, %v", c.name, got, err)
		}
	}
	for in, want := range map[string]DType{"fp16": Float16, "bf16": BFloat16, "torch.bfloat16": BFloat16, "half": Float16, "FP32": Float32} {
		if got, err := ParseDType(in); err != nil || got != want {
			t.Errorf("ParseDType(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	if _, err := ParseDType("fp8"); err == nil || !strings.Contains(err.Error(), `"fp8"`) || !strings.Contains(err.Error(), "bfloat16") {
		t.Errorf("ParseDType(fp8) error = %v, want the value and the allowed names", err)
	}
	if DType(99).Valid() || DType(99).Size() != 0 {
		t.Error("DType(99) should be invalid with size 0")
	}
}

func TestDevice(t *testing.T) {
	for in, want := range map[string]Device{"cpu": CPU, "cuda": CUDA(0), "cuda:3": CUDA(3)} {
		d, err := ParseDevice(in)
		if err != nil || d != want {
			t.Errorf("ParseDevice(%q) = %v, %v", in, d, err)
		}
		if in != "cuda" && d.String() != in {
			t.Errorf("%v.String() = %q", d, d.String())
		}
	}
	if _, err := ParseDevice("tpu"); err == nil {
		t.Error("ParseDevice(tpu) should fail")
	}
}

func TestViews(t *testing.T) {
	x, err := Empty(Float32, 2, 3, 4)
	if err != nil {
		t.Fatal(err)
	}
	defer x.Free()
	if x.Numel() != 24 || x.Bytes() != 96 || !x.Contiguous() || uintptr(x.Ptr())%HostAlign != 0 {
		t.Fatalf("bad tensor %v: numel %d bytes %d", x, x.Numel(), x.Bytes())
	}
	f, _ := x.Float32s()
	for i := range f {
		if f[i] != 0 {
			t.Fatal("Empty is not zeroed")
		}
		f[i] = float32(i)
	}
	r, err := x.Reshape(6, -1)
	if err != nil || r.Shape()[1] != 4 {
		t.Fatalf("Reshape(6, -1) = %v, %v", r, err)
	}
	s, err := x.Slice(5, 3)
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := s.Float32s(); v[0] != 5 || v[2] != 7 {
		t.Fatalf("Slice(5,3) = %v", v)
	}
	n, err := x.Narrow(2, 1, 2)
	if err != nil || n.Contiguous() || n.Offset() != 1 {
		t.Fatalf("Narrow = %v (offset %d), %v", n, n.Offset(), err)
	}
	if _, err := n.Float32s(); err == nil {
		t.Error("Float32s of a strided view should fail")
	}
	if _, err := x.Uint16s(); err == nil || !strings.Contains(err.Error(), "dtype float32") {
		t.Errorf("Uint16s of float32: %v", err)
	}
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
		if c.err == nil {
			t.Errorf("%s: no error", c.name)
		}
	}
}

func TestFreeTwice(t *testing.T) {
	x, _ := Empty(Float16, 4)
	v, _ := x.Slice(1, 2)
	if err := v.Free(); err != nil {
		t.Fatal(err)
	}
	if err := x.Free(); !errors.Is(err, ErrFreed) {
		t.Fatalf("second Free = %v, want ErrFreed", err)
	}
	if x.Ptr() != nil {
		t.Error("Ptr after Free should be nil")
	}
	if _, err := x.Uint16s(); !errors.Is(err, ErrFreed) {
		t.Errorf("Uint16s after Free = %v, want ErrFreed", err)
	}
}

func TestFlatLayoutAndShards(t *testing.T) {
	specs := []ParamSpec{{"w1", []int{3, 5}}, {"b1", []int{5}}, {"w2", []int{7}}}
	slots, total, err := FlatLayout(specs, 8, 4)
	if err != nil {
		t.Fatal(err)
	}
	wantOff := []int{0, 16, 24}
	for i, s := range slots {
		if s.Offset != wantOff[i] {
			t.Errorf("slot %s offset %d, want %d", s.Name, s.Offset, wantOff[i])
		}
	}
	if total != 32 { // 24+7 = 31, padded to a multiple of 4
		t.Errorf("total %d, want 32", total)
	}
	f, err := NewFlat(Float32, specs, 8, 4)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Free()
	w1, _ := f.View(0)
	if got := w1.Shape(); got[0] != 3 || got[1] != 5 {
		t.Errorf("view shape %v", got)
	}
	d, _ := w1.Float32s()
	d[0] = 42
	all, _ := f.Data.Float32s()
	if all[0] != 42 {
		t.Error("view does not share the flat storage")
	}
	sh, err := f.Shard(1, 4)
	if err != nil || sh.Offset() != 8 || sh.Numel() != 8 {
		t.Errorf("Shard(1,4) = %v off %d, %v", sh, sh.Offset(), err)
	}
	if _, err := f.Shard(0, 3); err == nil || !strings.Contains(err.Error(), "equal shards") {
		t.Errorf("Shard(0,3) = %v", err)
	}
	if _, _, err := FlatLayout(specs, 0, 1); err == nil {
		t.Error("align 0 should fail")
	}
}

func TestWrapStorageKeepsOwnership(t *testing.T) {
	x, _ := Empty(Uint8, 64)
	defer x.Free()
	w := WrapStorage(unsafe.Add(x.Ptr(), 1), 32, CPU, nil)
	if err := w.Free(); err != nil {
		t.Fatal(err)
	}
	if raw, _ := x.RawBytes(); len(raw) != 64 {
		t.Fatal("owner storage affected")
	}
}
