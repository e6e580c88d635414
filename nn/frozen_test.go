package nn

import (
	"math/rand/v2"
	"regexp"
	"testing"

	"github.com/deepgo-ml/deepgo/model"
	"github.com/stretchr/testify/require"
)

// TestFrozenGradients: with some parameters frozen (model.Param.Frozen,
// no gradient bound) every layer of the GPT skips their gradients, and the
// trainable parameters' gradients are bit-identical to the unfrozen run's:
// freezing changes what is computed, never a trainable gradient. Each case
// freezes a different kind of parameter: the tied wte (embedding and
// head), wpe, a Linear's weight or bias alone, a LayerNorm's gain, a whole
// block, everything but ln_f.
func TestFrozenGradients(t *testing.T) {
	be := testBackend(t)
	B, T := 2, 8
	r := rand.New(rand.NewPCG(11, 0))
	in, tg := tokens(r, B*T, tinyGPT.Vocab), tokens(r, B*T, tinyGPT.Vocab)
	ref := runGPT(t, be, tinyGPT, in, tg, B, T)
	want := map[string][]float64{}
	for _, q := range ref.g.Params() {
		want[q.Name] = vals(t, q.Grad)
	}
	for _, freeze := range []string{
		`wte`,
		`wpe`,
		`wte|wpe`,
		`h\.0\.attn\.c_attn\.weight`,
		`h\.1\.mlp\.c_proj\.bias`,
		`ln_2\.weight`,
		`h\.0\.`,
		`^transformer\.(wte|wpe|h)`,
	} {
		t.Run(freeze, func(t *testing.T) {
			re := regexp.MustCompile(freeze)
			g, err := NewGPT(tinyGPT)
			require.NoError(t, err)
			pb, err := NewParamBuffers(g)
			require.NoError(t, err)
			defer func() { g.Free(); pb.Free() }()
			for _, q := range g.Params() { // runGPT's values
				w, _ := q.Data.Float32s()
				v, _ := findParam(ref.g, q.Name).Data.Float32s()
				copy(w, v)
			}
			frozen := 0
			for _, q := range g.Params() {
				if re.MatchString(q.Name) {
					q.Frozen, q.Grad = true, nil
					frozen++
				}
			}
			require.NotZero(t, frozen)
			loss, err := g.Forward(be, in, tg, B, T)
			require.NoError(t, err)
			require.Equal(t, ref.loss, loss)
			require.NoError(t, g.Backward(be))
			for _, q := range g.Params() {
				if q.Frozen {
					require.Nil(t, q.Grad, q.Name)
					continue
				}
				require.Equal(t, want[q.Name], vals(t, q.Grad), "gradient of %s", q.Name)
			}
		})
	}
}

// TestFrozenNeedsNoGradOnlyWhenFrozen: a trainable parameter without a
// gradient bound is still an error naming it; only a frozen one is skipped.
func TestFrozenNeedsNoGradOnlyWhenFrozen(t *testing.T) {
	be := testBackend(t)
	g, err := NewGPT(tinyGPT)
	require.NoError(t, err)
	pb, err := NewParamBuffers(g)
	require.NoError(t, err)
	defer func() { g.Free(); pb.Free() }()
	require.NoError(t, g.Init(1))
	p := g.Blocks[0].FC.W
	p.Grad = nil
	r := rand.New(rand.NewPCG(1, 0))
	in, tg := tokens(r, 16, tinyGPT.Vocab), tokens(r, 16, tinyGPT.Vocab)
	_, err = g.Forward(be, in, tg, 2, 8)
	require.NoError(t, err)
	require.ErrorContains(t, g.Backward(be), p.Name+" has no gradient bound")
}

func findParam(g *GPT, name string) *model.Param {
	for _, q := range g.Params() {
		if q.Name == name {
			return q
		}
	}
	return nil
}
