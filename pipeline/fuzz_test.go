package pipeline

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// FuzzPartitionLayers feeds arbitrary partition methods (DeepSpeed's
// partition_method: "uniform", "parameters", "type:<regex>", anything else)
// and layer lists to PartitionLayers. types holds the layers' type names,
// comma-separated; kinds gives each layer's kind and parameter count. It
// must never panic. Unknown methods and a stage count below 1 fail with
// the documented errors; uniform and parameters always succeed; every
// success is a partition of all layers into numStages ordered parts.
func FuzzPartitionLayers(f *testing.F) {
	f.Add("uniform", "Embedding,Block,Block,Head", []byte{0, 1, 2, 3}, 2)
	f.Add("parameters", "Embedding,Block,Block,Head", []byte{0x10, 0x21, 0x21, 0x30}, 3)
	f.Add("type:block", "Embedding,TransformerBlock,TransformerBlock,Head", []byte{0, 0, 0, 0}, 2)
	f.Add("TYPE:[Bb]lock|head:extra", "Embedding,Block,,Head", []byte{1, 1, 2, 1}, 4)
	f.Add("type:(?=x)", "x", []byte{0}, 1)
	f.Add("type:nomatch", "a,b", []byte{0, 2}, 1)
	f.Add("profile", "a", []byte{0}, 1)
	f.Add("uniform", "", []byte{}, 0)
	f.Fuzz(func(t *testing.T, method, types string, kinds []byte, numStages int) {
		if numStages > 64 || numStages < -1 || len(types) > 512 {
			return // PartitionBalanced is O(layers² · stages)
		}
		var layers []Layer
		if types != "" {
			for i, name := range strings.Split(types, ",") {
				if i == 48 {
					break
				}
				l := Layer{Type: name}
				if i < len(kinds) {
					l.Kind = LayerKind(kinds[i] % 3)
					l.TrainableParams = int64(kinds[i]>>2) << (kinds[i] % 40)
				}
				layers = append(layers, l)
			}
		}
		p, err := PartitionLayers(method, layers, numStages)
		lower := strings.ToLower(method)
		known := lower == "uniform" || lower == "parameters" || strings.HasPrefix(lower, "type:")
		var pe *PartitionError
		switch {
		case numStages < 1:
			require.ErrorIs(t, err, ErrInvalidArgument, "numStages %d", numStages)
			return
		case !known:
			require.ErrorIs(t, err, ErrMethodNotImplemented, "method %q", method)
			require.ErrorAs(t, err, &pe, "method %q", method)
			return
		case err != nil:
			isType := errors.Is(err, ErrNoLayersMatched) || errors.Is(err, ErrBadLayerRegex)
			require.True(t, strings.HasPrefix(lower, "type:") && isType, "method %q on %d layers, %d stages: %v", method, len(layers), numStages, err)
			require.ErrorAs(t, err, &pe, "method %q on %d layers, %d stages", method, len(layers), numStages)
			return
		}
		require.Equal(t, lower, p.Method, "Method")
		require.Len(t, p.Parts, numStages+1, "method %q, %d layers, %d stages: parts %v", method, len(layers), numStages, p.Parts)
		require.Equal(t, 0, p.Parts[0], "method %q, %d layers, %d stages: parts %v", method, len(layers), numStages, p.Parts)
		require.Equal(t, len(layers), p.Parts[numStages], "method %q, %d layers, %d stages: parts %v", method, len(layers), numStages, p.Parts)
		for s := range numStages {
			lo, hi := p.StageBounds(s)
			require.LessOrEqual(t, lo, hi, "method %q: stage %d owns [%d, %d): parts %v", method, s, lo, hi, p.Parts)
		}
		switch {
		case lower == "uniform":
			require.Nil(t, p.Weights, "uniform partition has weights")
		case len(p.Weights) != len(layers):
			require.Failf(t, "weights not one per layer", "method %q: %d weights for %d layers", method, len(p.Weights), len(layers))
		case lower != "parameters":
			ones := 0
			for i, w := range p.Weights {
				require.False(t, w != 0 && w != 1 || w == 1 && layers[i].Kind == LayerFunction && layers[i].Type == "", "method %q: weight %v for layer %+v", method, w, layers[i])
				ones += int(w)
			}
			require.NotZero(t, ones, "method %q: succeeded with no layer matched", method)
		}
	})
}
