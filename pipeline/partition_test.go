package pipeline

import (
	"math"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestPartitionUniform(t *testing.T) {
	tests := []struct {
		items, parts int
		want         []int
	}{
		{0, 1, []int{0, 0}},
		{5, 5, []int{0, 1, 2, 3, 4, 5}},
		{2, 4, []int{0, 1, 2, 2, 2}},
		{10, 3, []int{0, 4, 7, 10}},
		{11, 3, []int{0, 4, 8, 11}},
		{12, 3, []int{0, 4, 8, 12}},
	}
	for _, tt := range tests {
		got, err := PartitionUniform(tt.items, tt.parts)
		if assert.NoError(t, err, "PartitionUniform(%d, %d)", tt.items, tt.parts) {
			assert.Equal(t, tt.want, got, "PartitionUniform(%d, %d)", tt.items, tt.parts)
		}
	}
}

func TestPartitionBalanced(t *testing.T) {
	tests := []struct {
		weights []float64
		parts   int
		want    []int
	}{
		{[]float64{1, 1, 1, 1}, 2, []int{0, 2, 4}},
		{[]float64{1, 1, 1, 1}, 1, []int{0, 4}},
		{[]float64{3}, 2, []int{0, 1, 1}}, // falls back to uniform
		{[]float64{0.5, 0.25, 0.25}, 2, []int{0, 1, 3}},
		// Spread, not heaviest part: {5 | 1 1 1 1 1} has spread 0.
		{[]float64{5, 1, 1, 1, 1, 1}, 2, []int{0, 1, 6}},
		// All zero: every split ties; ties go to the later split point.
		{[]float64{0, 0, 0, 0}, 2, []int{0, 3, 4}},
	}
	for _, tt := range tests {
		got, err := PartitionBalanced(tt.weights, tt.parts)
		if assert.NoError(t, err, "PartitionBalanced(%v, %d)", tt.weights, tt.parts) {
			assert.Equal(t, tt.want, got, "PartitionBalanced(%v, %d)", tt.weights, tt.parts)
		}
	}
}

func TestPartitionArgumentErrors(t *testing.T) {
	check := func(call string, err error, arg string) {
		t.Helper()
		if assert.ErrorIs(t, err, ErrInvalidArgument, call) {
			assert.ErrorContains(t, err, arg, call)
		}
	}
	_, err := PartitionUniform(-1, 2)
	check("PartitionUniform(-1, 2)", err, "numItems")
	_, err = PartitionUniform(3, 0)
	check("PartitionUniform(3, 0)", err, "numParts")
	_, err = PartitionBalanced([]float64{1, 2}, 0)
	check("PartitionBalanced(_, 0)", err, "numParts")
	_, err = PartitionBalanced([]float64{1, math.NaN(), 2}, 2)
	check("PartitionBalanced(NaN)", err, "weights[1]")
	_, err = PartitionLayers("uniform", nil, 0)
	check("PartitionLayers(_, _, 0)", err, "numStages")
}

func TestPartitionLayers(t *testing.T) {
	layers := []Layer{
		{Kind: LayerSpec, Type: "Embedding", TrainableParams: 100},
		{Kind: LayerFunction, Type: "to_fp32", TrainableParams: 999}, // functions have no parameters
		{Kind: LayerSpec, Type: "TransformerBlock", TrainableParams: 50},
		{Kind: LayerModule, Type: "TransformerBlock", TrainableParams: 50},
		{Kind: LayerFunction}, // a callable without a name
		{Kind: LayerSpec, Type: "Head", TrainableParams: 100},
	}
	tests := []struct {
		method      string
		wantMethod  string
		wantWeights []float64
		wantParts   []int
		wantErr     error
		wantMsg     string
	}{
		{method: "Uniform", wantMethod: "uniform", wantParts: []int{0, 3, 6}},
		{method: "parameters", wantMethod: "parameters", wantWeights: []float64{100, 0, 50, 50, 0, 100}, wantParts: []int{0, 3, 6}},
		{method: "type:block", wantMethod: "type:block", wantWeights: []float64{0, 0, 1, 1, 0, 0}, wantParts: []int{0, 3, 6}},
		{method: "type:^(embedding|head)$", wantMethod: "type:^(embedding|head)$", wantWeights: []float64{1, 0, 0, 0, 0, 1}, wantParts: []int{0, 5, 6}},
		// DeepSpeed keeps only the text between the first and second ':'.
		{method: "type:head:ignored", wantMethod: "type:head:ignored", wantWeights: []float64{0, 0, 0, 0, 0, 1}, wantParts: []int{0, 5, 6}},
		{method: "type:mlp", wantErr: ErrNoLayersMatched, wantMsg: "Partitioning 'mlp' found no valid layers to partition."},
		{method: "type:(", wantErr: ErrBadLayerRegex},
		{method: "profile", wantErr: ErrMethodNotImplemented, wantMsg: "Partitioning method profile not implemented."},
		{method: "Best", wantErr: ErrMethodNotImplemented, wantMsg: "Partitioning method best not implemented."},
	}
	for _, tt := range tests {
		p, err := PartitionLayers(tt.method, layers, 2)
		if tt.wantErr != nil {
			var pe *PartitionError
			if assert.ErrorIs(t, err, tt.wantErr, "PartitionLayers(%q)", tt.method) &&
				assert.ErrorAs(t, err, &pe, "PartitionLayers(%q)", tt.method) && tt.wantMsg != "" {
				assert.Equal(t, tt.wantMsg, pe.Msg, "PartitionLayers(%q)", tt.method)
			}
			continue
		}
		if !assert.NoError(t, err, "PartitionLayers(%q)", tt.method) {
			continue
		}
		assert.Equal(t, tt.wantMethod, p.Method, "PartitionLayers(%q) = %+v", tt.method, p)
		// slices.Equal, as before: a nil slice equals an empty one.
		assert.True(t, slices.Equal(p.Weights, tt.wantWeights), "PartitionLayers(%q) = %+v; want weights %v", tt.method, p, tt.wantWeights)
		assert.True(t, slices.Equal(p.Parts, tt.wantParts), "PartitionLayers(%q) = %+v; want parts %v", tt.method, p, tt.wantParts)
	}
}
