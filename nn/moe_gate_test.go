package nn

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"strings"
	"testing"
)

// gateCase is one case of testdata/moe/gate.json, written by
// testdata/moe/gen_gate.py from DeepSpeed's own top1gating/top2gating.
type gateCase struct {
	S, E, K        int
	CapacityFactor float64 `json:"capacity_factor"`
	MinCapacity    int     `json:"min_capacity"`
	DropTokens     bool    `json:"drop_tokens"`
	Logits         []float32
	Capacity       int
	Expert, Loc    []int32
	Weight         []float32
	LAux           float64 `json:"l_aux"`
	ExpCounts      []int64 `json:"exp_counts"`
	W              []float32
	C              float64
	DLogits        []float32
	CombineShape   []int     `json:"combine_shape"`
	Combine        []float32 `json:"combine"`
	Dispatch       []int     `json:"dispatch"`
	DenseLAux      float64   `json:"dense_l_aux"`
}

func loadGateCases(t *testing.T) []gateCase {
	t.Helper()
	b, err := os.ReadFile("testdata/moe/gate.json")
	if err != nil {
		t.Fatal(err)
	}
	var cs []gateCase
	if err := json.Unmarshal(b, &cs); err != nil {
		t.Fatal(err)
	}
	if len(cs) == 0 {
		t.Fatal("no golden gate cases")
	}
	return cs
}

// closeF32 reports whether a is b to float32 rounding: within 4 ulps of
// the larger, or 1e-7 absolute near zero.
func closeF32(a, b float64) bool {
	d := math.Abs(a - b)
	return d <= 1e-7 || d <= 4*math.Abs(b)*(1.0/(1<<23))
}

// TestRouteGolden: indices, locations, capacity and exp_counts exactly
// (k = 1 with DeepSpeed's choice of kept tokens, see route1),
// combine weights, l_aux and the logits' gradient to float32 rounding
// (the softmax's exp differs from torch's in the last bits; the gradient
// within 1e-7 + 1e-6·max|dlogits|: torch sums terms of order 1 in float32),
// and the
// dense combine weights and dispatch mask rebuilt from the routes.
func TestRouteGolden(t *testing.T) {
	for i, c := range loadGateCases(t) {
		t.Run(fmt.Sprintf("%d_S%d_E%d_k%d_cf%v_drop%v", i, c.S, c.E, c.K, c.CapacityFactor, c.DropTokens), func(t *testing.T) {
			cfg := GateConfig{K: c.K, CapacityFactor: c.CapacityFactor, MinCapacity: c.MinCapacity, DropTokens: c.DropTokens}
			r, err := route(c.Logits, c.S, c.E, cfg, deepSpeedPick(c))
			if err != nil {
				t.Fatal(err)
			}
			mine, err := Route(c.Logits, c.S, c.E, cfg)
			if err != nil {
				t.Fatal(err)
			}
			checkOwnPick(t, mine, r)
			if r.Capacity != c.Capacity {
				t.Fatalf("capacity %d, DeepSpeed %d", r.Capacity, c.Capacity)
			}
			for e, n := range c.ExpCounts {
				if r.ExpCounts[e] != n {
					t.Fatalf("exp_counts %v, DeepSpeed %v", r.ExpCounts, c.ExpCounts)
				}
			}
			dropped := 0
			for j := range c.Expert {
				if r.Expert[j] != c.Expert[j] || (c.Expert[j] >= 0 && r.Loc[j] != c.Loc[j]) {
					t.Fatalf("route %d: expert %d slot %d, DeepSpeed %d slot %d", j, r.Expert[j], r.Loc[j], c.Expert[j], c.Loc[j])
				}
				if !closeF32(float64(r.Weight[j]), float64(c.Weight[j])) {
					t.Fatalf("route %d: weight %v, DeepSpeed %v", j, r.Weight[j], c.Weight[j])
				}
				if c.Expert[j] < 0 {
					dropped++
				}
			}
			if !closeF32(float64(r.LAux), c.LAux) || !closeF32(float64(r.LAux), c.DenseLAux) {
				t.Fatalf("l_aux %v, DeepSpeed %v", r.LAux, c.LAux)
			}
			checkDense(t, r, c)
			dl := make([]float32, c.S*c.E)
			if err := r.Backward(dl, c.W, c.C); err != nil {
				t.Fatal(err)
			}
			scale := 0.0
			for _, v := range c.DLogits {
				scale = max(scale, math.Abs(float64(v)))
			}
			for j := range dl {
				if math.Abs(float64(dl[j]-c.DLogits[j])) > 1e-7+1e-6*scale {
					t.Fatalf("dlogits[%d] %v, torch %v", j, dl[j], c.DLogits[j])
				}
			}
			t.Logf("capacity %d, %d of %d routes dropped", r.Capacity, dropped, len(c.Expert))
		})
	}
}

// checkDense compares DeepSpeed's dense combine weights [S, E, C] and
// dispatch mask with the routes' scatter.
func checkDense(t *testing.T, r *Routing, c gateCase) {
	t.Helper()
	if len(c.CombineShape) != 3 || c.CombineShape[0] != c.S || c.CombineShape[1] != c.E || c.CombineShape[2] != r.Capacity {
		t.Fatalf("dense combine shape %v, want [%d %d %d]", c.CombineShape, c.S, c.E, r.Capacity)
	}
	dense := make([]float32, c.S*c.E*r.Capacity)
	for j, x := range r.Expert {
		if x >= 0 {
			s := j % c.S
			dense[(s*c.E+int(x))*r.Capacity+int(r.Loc[j])] += r.Weight[j]
		}
	}
	for j, v := range dense {
		if (v != 0) != (c.Dispatch[j] != 0) || !closeF32(float64(v), float64(c.Combine[j])) {
			t.Fatalf("dense [%d]: combine %v dispatch %v, DeepSpeed %v %d", j, v, v != 0, c.Combine[j], c.Dispatch[j])
		}
	}
}

// TestRouteRefuses: bad configurations name the argument and value.
func TestRouteRefuses(t *testing.T) {
	lg := make([]float32, 8*4)
	for _, c := range []struct {
		cfg  GateConfig
		s, e int
		want string
	}{
		{GateConfig{K: 3, CapacityFactor: 1}, 8, 4, "moe.k 3"},
		{GateConfig{K: 1, CapacityFactor: 0}, 8, 4, "moe.capacity_factor 0"},
		{GateConfig{K: 1, CapacityFactor: 1, MinCapacity: -1}, 8, 4, "moe.min_capacity -1"},
		{GateConfig{K: 1, CapacityFactor: 1, MinCapacity: 9}, 8, 4, "min_capacity 9"},
		{GateConfig{K: 2, CapacityFactor: 1}, 32, 1, "k 2 > 1 experts"},
	} {
		_, err := Route(lg, c.s, c.e, c.cfg)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: error %v, want %q", c.cfg, err, c.want)
		}
	}
}

// deepSpeedPick keeps, of the tokens an over-full expert got under k = 1,
// those DeepSpeed's torch.topk kept.
func deepSpeedPick(c gateCase) func([]int, int) []int {
	return func(toks []int, capacity int) []int {
		var kept []int
		for _, t := range toks {
			if c.Expert[t] >= 0 {
				kept = append(kept, t)
			}
		}
		return kept
	}
}

// checkOwnPick: deepgo's own choice (the first tokens) differs from
// DeepSpeed's only in which of an over-full expert's tokens it keeps.
func checkOwnPick(t *testing.T, mine, ds *Routing) {
	t.Helper()
	if mine.Capacity != ds.Capacity {
		t.Fatalf("capacity %d, with DeepSpeed's pick %d", mine.Capacity, ds.Capacity)
	}
	for e := range mine.Rows {
		if mine.Rows[e] != ds.Rows[e] {
			t.Fatalf("expert %d keeps %d routes, with DeepSpeed's pick %d", e, mine.Rows[e], ds.Rows[e])
		}
	}
	next := make([]int32, mine.E)
	for j, x := range mine.Expert {
		if x < 0 {
			continue
		}
		if mine.Loc[j] != next[x] && mine.K == 1 {
			t.Fatalf("route %d: slot %d, want %d (first tokens in order)", j, mine.Loc[j], next[x])
		}
		next[x]++
	}
}
