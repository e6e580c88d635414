package optim

import (
	"math"
	"strings"
	"testing"

	"github.com/deepgo-ml/deepgo/backend"
	"github.com/deepgo-ml/deepgo/tensor"
)

// TestLoadState: state and step count copied out of one Adam into a fresh
// one (which has not stepped) make the next steps bit-identical; bad
// state is refused before anything changes.
func TestLoadState(t *testing.T) {
	be, err := backend.NewCPU(1)
	if err != nil {
		t.Fatal(err)
	}
	defer be.Close()
	mk := func() (Optimizer, *tensor.Tensor, *tensor.Tensor) {
		o, err := New("AdamW", map[string]any{"lr": 0.01, "weight_decay": 0.1}, be)
		if err != nil {
			t.Fatal(err)
		}
		p, _ := tensor.FromFloat32([]float32{1, -2, 3, 0.5, 7})
		g, _ := tensor.FromFloat32([]float32{0.1, 0.2, -0.3, 0.4, -1})
		t.Cleanup(func() { o.Close(); p.Free(); g.Free() })
		return o, p, g
	}
	a, pa, g := mk()
	grp := func(p *tensor.Tensor) ParamGroup {
		return ParamGroup{Name: "g", Params: []*tensor.Tensor{p}, Grads: []*tensor.Tensor{g}}
	}
	for range 3 {
		if err := a.Step(grp(pa), 0.01, 1); err != nil {
			t.Fatal(err)
		}
	}
	b, pb, _ := mk()
	va, _ := pa.Float32s()
	vb, _ := pb.Float32s()
	copy(vb, va)
	if err := LoadState(b, "g", []*tensor.Tensor{pb}, map[string][]*tensor.Tensor{"exp_avg": a.State("g")["exp_avg"]}, 3); err == nil || !strings.Contains(err.Error(), "exp_avg_sq") {
		t.Fatalf("missing exp_avg_sq: %v", err)
	}
	if b.State("g") != nil || b.Steps("g") != 0 {
		t.Fatal("a refused LoadState changed the optimizer")
	}
	if err := LoadState(b, "g", []*tensor.Tensor{pb}, a.State("g"), a.Steps("g")); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := a.Step(grp(pa), 0.01, 1); err != nil {
			t.Fatal(err)
		}
		if err := b.Step(grp(pb), 0.01, 1); err != nil {
			t.Fatal(err)
		}
	}
	for i := range va {
		if math.Float32bits(va[i]) != math.Float32bits(vb[i]) {
			t.Fatalf("param[%d] = %v after the restored steps, %v uninterrupted", i, vb[i], va[i])
		}
	}
	// nil state resets to zero.
	if err := LoadState(b, "g", []*tensor.Tensor{pb}, nil, 0); err != nil {
		t.Fatal(err)
	}
	for _, ts := range b.State("g") {
		v, _ := ts[0].Float32s()
		for _, x := range v {
			if x != 0 {
				t.Fatal("nil state did not zero the state")
			}
		}
	}
	if b.Steps("g") != 0 {
		t.Fatal("steps not reset")
	}
}
