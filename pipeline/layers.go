package pipeline

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// LayerKind says how a layer was given to the pipeline module, which decides
// how DeepSpeed counts its parameters and finds its type name.
type LayerKind int

const (
	// LayerSpec is a layer built lazily from a spec; Type is the class name.
	LayerSpec LayerKind = iota
	// LayerModule is an already-built module; Type is its class name.
	LayerModule
	// LayerFunction is a plain function; it has no parameters, and Type is
	// the function's name ("" for a callable without a name, which a
	// "type:" method then skips).
	LayerFunction
)

// Layer is what partitioning needs to know about one pipeline layer.
type Layer struct {
	// Kind is how the layer was given.
	Kind LayerKind
	// Type is the name "type:<regex>" is matched against.
	Type string
	// TrainableParams counts the elements of the layer's trainable
	// parameters; ignored for LayerFunction.
	TrainableParams int64
}

// Errors a [PartitionLayers] failure wraps, one per DeepSpeed exception.
var (
	// ErrMethodNotImplemented: the method is not uniform, parameters or
	// type:<regex> (DeepSpeed's NotImplementedError; "profile" included).
	ErrMethodNotImplemented = errors.New("pipeline: partitioning method not implemented")
	// ErrNoLayersMatched: a type:<regex> method matched no layer
	// (DeepSpeed's RuntimeError).
	ErrNoLayersMatched = errors.New("pipeline: partitioning regex matched no layers")
	// ErrBadLayerRegex: the regex of a type: method does not compile
	// (DeepSpeed's re.error). Go's RE2 syntax has no look-around or
	// back-references, so some Python patterns are rejected here.
	ErrBadLayerRegex = errors.New("pipeline: bad layer type regex")
)

// PartitionError is the error [PartitionLayers] returns for a method it
// cannot apply. Msg is DeepSpeed's message for the same case.
type PartitionError struct {
	// Kind is ErrMethodNotImplemented, ErrNoLayersMatched or ErrBadLayerRegex.
	Kind error
	// Msg is the message DeepSpeed raises with.
	Msg string
}

// Error returns "pipeline: " followed by DeepSpeed's message.
func (e *PartitionError) Error() string { return "pipeline: " + e.Msg }

// Unwrap returns Kind, so errors.Is(err, ErrNoLayersMatched) works.
func (e *PartitionError) Unwrap() error { return e.Kind }

// Partition is a split of a pipeline's layers across its stages.
type Partition struct {
	// Method is the partition method, lower-cased as DeepSpeed uses it.
	Method string
	// Weights are the per-layer weights handed to PartitionBalanced
	// (trainable parameter counts, or 1/0 type matches); nil for uniform.
	Weights []float64
	// Parts has one boundary per stage plus one: stage s owns layers
	// [Parts[s], Parts[s+1]).
	Parts []int
}

// StageBounds returns the layers [start, stop) that stage stageID owns.
// It panics if stageID is out of range.
func (p Partition) StageBounds(stageID int) (start, stop int) {
	return p.Parts[stageID], p.Parts[stageID+1]
}

// PartitionLayers splits layers across numStages stages the way DeepSpeed's
// PipelineModule._partition_layers does. method is case-insensitive:
//
//   - "uniform": the same number of layers per stage (PartitionUniform);
//   - "parameters": balance trainable parameter counts (PartitionBalanced);
//     functions count zero;
//   - "type:<regex>": balance the number of layers whose Type matches regex,
//     searched case-insensitively anywhere in the name. As in DeepSpeed the
//     regex is lower-cased and ends at the next ':'.
//
// Anything else, "profile" included, fails with ErrMethodNotImplemented.
func PartitionLayers(method string, layers []Layer, numStages int) (Partition, error) {
	if numStages < 1 {
		return Partition{}, argError("numStages", numStages, "must be at least 1")
	}
	method = strings.ToLower(method)
	p := Partition{Method: method}
	var err error
	switch {
	case method == "uniform":
		p.Parts, err = PartitionUniform(len(layers), numStages)
		return p, err
	case method == "parameters":
		p.Weights = make([]float64, len(layers))
		for i, l := range layers {
			if l.Kind != LayerFunction {
				p.Weights[i] = float64(l.TrainableParams)
			}
		}
	case strings.HasPrefix(method, "type:"):
		if p.Weights, err = typeWeights(strings.Split(method, ":")[1], layers); err != nil {
			return Partition{}, err
		}
	default:
		return Partition{}, &PartitionError{Kind: ErrMethodNotImplemented,
			Msg: fmt.Sprintf("Partitioning method %s not implemented.", method)}
	}
	p.Parts, err = PartitionBalanced(p.Weights, numStages)
	return p, err
}

// typeWeights flags (1) each layer whose type name pattern finds.
func typeWeights(pattern string, layers []Layer) ([]float64, error) {
	re, err := regexp.Compile("(?i)" + pattern)
	if err != nil {
		return nil, &PartitionError{Kind: ErrBadLayerRegex,
			Msg: fmt.Sprintf("Partitioning type regex %q does not compile: %v", pattern, err)}
	}
	weights := make([]float64, len(layers))
	found := false
	for i, l := range layers {
		if l.Kind == LayerFunction && l.Type == "" {
			continue
		}
		if re.MatchString(l.Type) {
			weights[i], found = 1, true
		}
	}
	if !found {
		return nil, &PartitionError{Kind: ErrNoLayersMatched,
			Msg: fmt.Sprintf("Partitioning '%s' found no valid layers to partition.", pattern)}
	}
	return weights, nil
}
