package data

import (
	"fmt"
	"math"
	"math/rand/v2"
)

// Markov is a fixed random Markov source over Vocab symbols of order 1 or
// 2: each context (the previous Order symbols) has a sparse transition row
// with Branch possible next symbols, so a model can learn it, and its
// entropy rate — the best achievable mean cross-entropy, in nats per token
// — is known exactly.
type Markov struct {
	Vocab, Order, Branch int
	// next[ctx] are the Branch successors of context ctx, probs[ctx] their
	// probabilities; a context is prev (order 1) or prev2*Vocab+prev.
	next  [][]int32
	probs [][]float64
	cum   [][]float64
}

// NewMarkov builds the source from seed: for each context, Branch distinct
// successors with Dirichlet(1)-like random probabilities.
func NewMarkov(vocab, order, branch int, seed uint64) (*Markov, error) {
	if vocab < 2 || (order != 1 && order != 2) || branch < 1 || branch > vocab {
		return nil, fmt.Errorf("data.NewMarkov: vocab %d, order %d, branch %d: need vocab >= 2, order 1 or 2, 1 <= branch <= vocab", vocab, order, branch)
	}
	r := rand.New(rand.NewPCG(seed, 0x6d61726b6f76))
	nctx := vocab
	if order == 2 {
		nctx = vocab * vocab
	}
	m := &Markov{Vocab: vocab, Order: order, Branch: branch, next: make([][]int32, nctx), probs: make([][]float64, nctx), cum: make([][]float64, nctx)}
	for c := 0; c < nctx; c++ {
		succ := r.Perm(vocab)[:branch]
		p := make([]float64, branch)
		sum := 0.0
		for i := range p {
			p[i] = -math.Log(1 - r.Float64()) // Exp(1): normalised, a Dirichlet(1) row
			sum += p[i]
		}
		cum := make([]float64, branch)
		acc := 0.0
		m.next[c] = make([]int32, branch)
		for i := range p {
			p[i] /= sum
			acc += p[i]
			cum[i] = acc
			m.next[c][i] = int32(succ[i])
		}
		cum[branch-1] = 1
		m.probs[c], m.cum[c] = p, cum
	}
	return m, nil
}

func (m *Markov) ctx(prev2, prev int32) int {
	if m.Order == 1 {
		return int(prev)
	}
	return int(prev2)*m.Vocab + int(prev)
}

// Generate draws n tokens from the source, starting from a random context.
func (m *Markov) Generate(n int, seed uint64) []int32 {
	r := rand.New(rand.NewPCG(seed, 0x67656e))
	out := make([]int32, n)
	prev2, prev := int32(r.IntN(m.Vocab)), int32(r.IntN(m.Vocab))
	for i := range out {
		c := m.ctx(prev2, prev)
		u := r.Float64()
		k := 0
		for k < m.Branch-1 && u > m.cum[c][k] {
			k++
		}
		out[i] = m.next[c][k]
		prev2, prev = prev, out[i]
	}
	return out
}

// EntropyRate is H = sum over contexts of pi(ctx) * H(next | ctx), in nats
// per token, with pi the stationary distribution of the context chain
// (found by power iteration from uniform, averaged over the last iterates
// so a periodic chain converges too). No predictor of the next token given
// the whole past does better on average than this.
func (m *Markov) EntropyRate() float64 {
	n := len(m.next)
	pi := make([]float64, n)
	for i := range pi {
		pi[i] = 1 / float64(n)
	}
	nxt := make([]float64, n)
	avg := make([]float64, n)
	const iters, tail = 4000, 1000
	for it := 0; it < iters; it++ {
		clear(nxt)
		for c, p := range pi {
			if p == 0 {
				continue
			}
			prev := c % m.Vocab // the last symbol of the context
			for k, s := range m.next[c] {
				nc := int(s)
				if m.Order == 2 {
					nc = prev*m.Vocab + int(s)
				}
				nxt[nc] += p * m.probs[c][k]
			}
		}
		pi, nxt = nxt, pi
		if it >= iters-tail {
			for i := range avg {
				avg[i] += pi[i] / tail
			}
		}
	}
	h := 0.0
	for c, p := range avg {
		for _, q := range m.probs[c] {
			if q > 0 {
				h -= p * q * math.Log(q)
			}
		}
	}
	return h
}
