package pipeline

import (
	"errors"
	"strings"
	"testing"
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
			if !errors.Is(err, ErrInvalidArgument) {
				t.Fatalf("numStages %d: error %v, want ErrInvalidArgument", numStages, err)
			}
			return
		case !known:
			if !errors.Is(err, ErrMethodNotImplemented) || !errors.As(err, &pe) {
				t.Fatalf("method %q: error %v, want ErrMethodNotImplemented", method, err)
			}
			return
		case err != nil:
			isType := errors.Is(err, ErrNoLayersMatched) || errors.Is(err, ErrBadLayerRegex)
			if !strings.HasPrefix(lower, "type:") || !isType || !errors.As(err, &pe) {
				t.Fatalf("method %q on %d layers, %d stages: %v", method, len(layers), numStages, err)
			}
			return
		}
		if p.Method != lower {
			t.Fatalf("Method %q, want %q", p.Method, lower)
		}
		if len(p.Parts) != numStages+1 || p.Parts[0] != 0 || p.Parts[numStages] != len(layers) {
			t.Fatalf("method %q, %d layers, %d stages: parts %v", method, len(layers), numStages, p.Parts)
		}
		for s := range numStages {
			if lo, hi := p.StageBounds(s); lo > hi {
				t.Fatalf("method %q: stage %d owns [%d, %d): parts %v", method, s, lo, hi, p.Parts)
			}
		}
		switch {
		case lower == "uniform":
			if p.Weights != nil {
				t.Fatalf("uniform partition has weights %v", p.Weights)
			}
		case len(p.Weights) != len(layers):
			t.Fatalf("method %q: %d weights for %d layers", method, len(p.Weights), len(layers))
		case lower != "parameters":
			ones := 0
			for i, w := range p.Weights {
				if w != 0 && w != 1 || w == 1 && layers[i].Kind == LayerFunction && layers[i].Type == "" {
					t.Fatalf("method %q: weight %v for layer %+v", method, w, layers[i])
				}
				ones += int(w)
			}
			if ones == 0 {
				t.Fatalf("method %q: succeeded with no layer matched", method)
			}
		}
	})
}
