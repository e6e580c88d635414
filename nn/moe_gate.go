package nn

import (
	"fmt"
	"math"
)

// GateConfig is DeepSpeed's TopKGate (deepspeed/moe/sharded_moe.py) at
// expert parallel size 1, without random token selection (use_rts=False),
// without noise (noisy_gate_policy None) and, for k = 2, without the
// Gumbel sampling of the second expert (top2_2nd_expert_sampling=False):
// the routing is then a function of the logits alone.
type GateConfig struct {
	// K is the number of experts a token is routed to: 1 or 2.
	K int
	// CapacityFactor scales the expert capacity, ceil(S/E × factor × K)
	// floored at MinCapacity (DeepSpeed's _capacity).
	CapacityFactor float64
	MinCapacity    int
	// DropTokens drops routes past an expert's capacity; false sizes the
	// capacity by the busiest expert (k = 1: at most S) and drops none.
	DropTokens bool
}

// Check validates the configuration; what names the caller's argument.
func (c GateConfig) Check(what string) error {
	if c.K != 1 && c.K != 2 {
		return fmt.Errorf("%s.k %d: must be 1 or 2 (DeepSpeed's topkgating for k > 2 is not supported)", what, c.K)
	}
	if !(c.CapacityFactor > 0) || math.IsInf(c.CapacityFactor, 0) {
		return fmt.Errorf("%s.capacity_factor %v: must be a finite number > 0", what, c.CapacityFactor)
	}
	if c.MinCapacity < 0 {
		return fmt.Errorf("%s.min_capacity %d: must be >= 0", what, c.MinCapacity)
	}
	return nil
}

// Routing is one gate decision over S tokens and E experts, DeepSpeed's
// sparse routes: route r of token s (index r·S+s, DeepSpeed's [k, s]
// order) goes to Expert[i] at slot Loc[i] of its capacity buffer with
// combine weight Weight[i]; Expert -1 is a dropped route (weight 0).
type Routing struct {
	S, E, K, Capacity int
	// Gates is the fp32 softmax of the logits, [S, E].
	Gates  []float32
	Expert []int32
	Loc    []int32
	Weight []float32
	// LAux is the load-balancing loss, E·Σ_e mean_s(gates)_e ·
	// mean_s(first choice is e).
	LAux float32
	// ExpCounts is the routes each expert was chosen for before capacity
	// dropped any (first and second choices), DeepSpeed's exp_counts.
	ExpCounts []int64
	// Rows is the routes each expert kept: slots [0, Rows[e]) of its
	// buffer are filled (the locations are contiguous from 0).
	Rows []int
	// ce is the fraction of tokens whose first choice each expert was,
	// kept for the aux-loss gradient.
	ce   []float64
	top1 []int32 // first choices, before dropping
	top2 []int32 // second choices (k = 2), before dropping
	kept []bool  // whether each route survived capacity
}

// capacity is DeepSpeed's _capacity: ceil((S / E) × factor) in float32
// arithmetic (torch multiplies a Python float by a float32 tensor),
// floored at minCap.
func capacity(s, e int, factor float64, minCap int) int {
	c := int(math.Ceil(float64(float32(float64(s)/float64(e)) * float32(factor))))
	return max(c, minCap)
}

// Route computes the gate's decision from logits [S, E] (float32, row
// major), as top1gating/top2gating do with sparse_routes.
func Route(logits []float32, s, e int, cfg GateConfig) (*Routing, error) {
	return route(logits, s, e, cfg, firstTokens)
}

// route is Route with k = 1's choice of the tokens an over-full expert
// keeps.
func route(logits []float32, s, e int, cfg GateConfig, pick func([]int, int) []int) (*Routing, error) {
	if err := cfg.Check("moe"); err != nil {
		return nil, err
	}
	if s < 1 || e < 1 || len(logits) != s*e {
		return nil, fmt.Errorf("nn.Route: %d logits for %d tokens x %d experts", len(logits), s, e)
	}
	if cfg.K > e {
		return nil, fmt.Errorf("nn.Route: k %d > %d experts", cfg.K, e)
	}
	if cfg.K == 1 && s < cfg.MinCapacity {
		// top1gating's assertion
		return nil, fmt.Errorf("nn.Route: %d tokens < min_capacity %d: set min_capacity to 0 or use more tokens", s, cfg.MinCapacity)
	}
	r := &Routing{S: s, E: e, K: cfg.K, Gates: make([]float32, s*e), ExpCounts: make([]int64, e), Rows: make([]int, e), ce: make([]float64, e)}
	softmaxRows(r.Gates, logits, s, e)
	r.top1 = make([]int32, s)
	for t := 0; t < s; t++ {
		r.top1[t] = int32(argmax(r.Gates[t*e : (t+1)*e]))
		r.ce[r.top1[t]]++
	}
	for i := range r.ce {
		r.ce[i] /= float64(s)
	}
	r.LAux = r.laux()
	if cfg.K == 1 {
		r.route1(cfg, pick)
	} else {
		r.route2(logits, cfg)
	}
	return r, nil
}

// softmaxRows writes the softmax of every row of x [s, e] into out,
// subtracting the row's max, in float64 rounded once.
func softmaxRows(out, x []float32, s, e int) {
	for t := 0; t < s; t++ {
		row := x[t*e : (t+1)*e]
		m := row[0]
		for _, v := range row {
			m = max(m, v)
		}
		var sum float64
		for _, v := range row {
			sum += math.Exp(float64(v - m))
		}
		for i, v := range row {
			out[t*e+i] = float32(math.Exp(float64(v-m)) / sum)
		}
	}
}

// argmax is the first index of the largest value (torch.argmax's choice).
func argmax(v []float32) int {
	b := 0
	for i, x := range v {
		if x > v[b] {
			b = i
		}
	}
	return b
}

// laux is E × Σ_e me_e·ce_e with me the mean gate per expert.
func (r *Routing) laux() float32 {
	var sum float64
	for i := 0; i < r.E; i++ {
		var me float64
		for t := 0; t < r.S; t++ {
			me += float64(r.Gates[t*r.E+i])
		}
		sum += me / float64(r.S) * r.ce[i]
	}
	return float32(sum * float64(r.E))
}

// route1 is top1gating with use_rts=False: an expert keeps Capacity of
// the tokens that chose it and their locations count the kept tokens in
// token order. Which tokens an over-full expert keeps differs from
// DeepSpeed: deepgo keeps the first ones (the position policy of
// top2gating and topkgating), DeepSpeed takes torch.topk over a 0/1 mask,
// whose choice among the equal ones is the sort implementation's (on the
// CPU neither the first nor the last; the golden tests check the rest
// with DeepSpeed's choice, through pick).
func (r *Routing) route1(cfg GateConfig, pick func(toks []int, capacity int) []int) {
	s, e := r.S, r.E
	toks := make([][]int, e)
	for t, x := range r.top1 {
		r.ExpCounts[x]++
		toks[x] = append(toks[x], t)
	}
	if cfg.DropTokens {
		r.Capacity = capacity(s, e, cfg.CapacityFactor, cfg.MinCapacity)
	} else {
		r.Capacity = int(min(maxCount(r.ExpCounts), int64(s)))
	}
	r.alloc(s)
	keep := make([]bool, s)
	for _, ts := range toks {
		if len(ts) > r.Capacity {
			ts = pick(ts, r.Capacity)
		}
		for _, t := range ts {
			keep[t] = true
		}
	}
	for t, x := range r.top1 {
		if keep[t] {
			r.set(t, x, r.Rows[x], r.Gates[t*e+int(x)])
			r.Rows[x]++
		}
	}
}

// firstTokens keeps the first capacity tokens.
func firstTokens(toks []int, capacity int) []int { return toks[:capacity] }

// route2 is top2gating without second-expert sampling: the second choice
// is the largest logit but the first, its location offset by the
// expert's count of first choices (kept or not); routes past capacity are
// dropped; the kept gates are normalised by their sum (clamped at
// float32's epsilon).
func (r *Routing) route2(logits []float32, cfg GateConfig) {
	s, e := r.S, r.E
	r.top2 = make([]int32, s)
	first := make([]int, e)
	for t := 0; t < s; t++ {
		b := -1
		for i := 0; i < e; i++ {
			if int32(i) != r.top1[t] && (b < 0 || logits[t*e+i] > logits[t*e+b]) {
				b = i
			}
		}
		r.top2[t] = int32(b)
		first[r.top1[t]]++
		r.ExpCounts[r.top1[t]]++
		r.ExpCounts[b]++
	}
	if cfg.DropTokens {
		r.Capacity = capacity(s, e, cfg.CapacityFactor*2, cfg.MinCapacity)
	} else {
		r.Capacity = int(maxCount(r.ExpCounts))
	}
	r.alloc(2 * s)
	n1, n2 := make([]int, e), make([]int, e)
	for t := 0; t < s; t++ {
		x1, x2 := r.top1[t], r.top2[t]
		l1, l2 := n1[x1], first[x2]+n2[x2]
		n1[x1]++
		n2[x2]++
		var g1, g2 float32
		k1, k2 := l1 < r.Capacity, l2 < r.Capacity
		if k1 {
			g1 = r.Gates[t*e+int(x1)]
		}
		if k2 {
			g2 = r.Gates[t*e+int(x2)]
		}
		d := max(g1+g2, float32(epsF32))
		if k1 {
			r.set(t, x1, l1, g1/d)
			r.Rows[x1]++
		}
		if k2 {
			r.set(s+t, x2, l2, g2/d)
			r.Rows[x2]++
		}
	}
}

// epsF32 is torch.finfo(torch.float32).eps.
const epsF32 = 1.1920928955078125e-07

func (r *Routing) alloc(n int) {
	r.Expert, r.Loc, r.Weight, r.kept = make([]int32, n), make([]int32, n), make([]float32, n), make([]bool, n)
	for i := range r.Expert {
		r.Expert[i] = -1
	}
}

func (r *Routing) set(i int, x int32, loc int, w float32) {
	r.Expert[i], r.Loc[i], r.Weight[i], r.kept[i] = x, int32(loc), w, true
}

func maxCount(c []int64) int64 {
	m := c[0]
	for _, v := range c {
		m = max(m, v)
	}
	return m
}

// Backward writes dlogits [S, E], the gradient of Σ_i dWeight[i]·Weight[i]
// + dLAux·LAux through the softmax (the masks, locations and capacity are
// constants, as in torch).
func (r *Routing) Backward(dlogits, dWeight []float32, dLAux float64) error {
	s, e := r.S, r.E
	if len(dlogits) != s*e || len(dWeight) != len(r.Weight) {
		return fmt.Errorf("nn.Routing.Backward: %d dlogits and %d weight gradients for %d x %d with %d routes", len(dlogits), len(dWeight), s, e, len(r.Weight))
	}
	dg := make([]float64, e)
	for t := 0; t < s; t++ {
		// the aux loss: d(E·Σ me·ce)/d gates[t, i] = E·ce_i/S
		for i := range dg {
			dg[i] = dLAux * float64(e) * r.ce[i] / float64(s)
		}
		r.weightGrad(dg, t, dWeight)
		// softmax: dx = p ⊙ (dg − Σ p·dg)
		p := r.Gates[t*e : (t+1)*e]
		var dot float64
		for i, v := range p {
			dot += float64(v) * dg[i]
		}
		for i, v := range p {
			dlogits[t*e+i] = float32(float64(v) * (dg[i] - dot))
		}
	}
	return nil
}

// weightGrad adds into dg the gradient of token t's combine weights with
// respect to its gates.
func (r *Routing) weightGrad(dg []float64, t int, dWeight []float32) {
	s, e := r.S, r.E
	if r.K == 1 {
		if r.kept[t] {
			dg[r.Expert[t]] += float64(dWeight[t])
		}
		return
	}
	var g [2]float64
	var x [2]int32
	for k := 0; k < 2; k++ {
		if i := k*s + t; r.kept[i] {
			x[k], g[k] = r.Expert[i], float64(r.Gates[t*e+int(r.Expert[i])])
		}
	}
	sum := g[0] + g[1]
	d := max(sum, epsF32)
	// w_k = g_k / d with d = max(g0+g1, eps): the clamp passes no gradient below eps
	for k := 0; k < 2; k++ {
		i := k*s + t
		if !r.kept[i] {
			continue
		}
		dw := float64(dWeight[i])
		dg[x[k]] += dw / d
		if sum >= epsF32 {
			for j := 0; j < 2; j++ {
				if r.kept[j*s+t] {
					dg[x[j]] -= dw * g[k] / (d * d)
				}
			}
		}
	}
}
