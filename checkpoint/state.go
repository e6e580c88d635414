package checkpoint

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"

	"github.com/deepgo-ml/deepgo/model"
	"github.com/deepgo-ml/deepgo/tensor"
)

// State is one rank's share of a checkpoint: its tensors and its small
// JSON-encoded pieces of state. Every rank of the data-parallel group
// passes its own State to Save.
type State struct {
	// Step is the global step count (the same on every rank); the default
	// tag is global_step<Step>.
	Step int64
	// ZeroStage, Topology, Config and Params describe the run; rank 0's
	// are recorded in the manifest.
	ZeroStage int
	// Topology holds the parallel degrees, e.g. {"data": 4, "pipe": 1}.
	Topology map[string]int
	// Config is the resolved config document.
	Config json.RawMessage
	// Params says where each model parameter lives in the saved tensors,
	// which is what Consolidate exports.
	Params []ParamRef
	// Meta holds this rank's small state by key (loss scaler, LR
	// schedule, counters, data sampler position, RNG states, ...).
	Meta map[string]json.RawMessage
	// Tensors are this rank's tensors: contiguous host tensors, unchanged
	// until Save returns (AsyncSaver copies them first).
	Tensors []Entry
}

// Entry is one tensor of a rank.
type Entry struct {
	// Name identifies the tensor. A whole tensor's name is unique in the
	// checkpoint; every rank's piece of a sharded tensor has the same name.
	Name string
	// File groups tensors into files with checkpoint_type "sharded"
	// (e.g. "model", "optim"); "" means "model". Ignored for "blob".
	File string
	// Data is the tensor.
	Data *tensor.Tensor
	// Shard is nil for a whole tensor; otherwise Data is elements
	// [Shard.Offset, Shard.Offset+Data.Numel()) of a flat vector of which
	// every rank holds a piece (a ZeRO partition).
	Shard *Shard
}

// Shard places a piece of a flat vector sharded over ranks.
type Shard struct {
	// Numel is the number of meaningful elements of the flat vector;
	// pieces may extend past it (padding), which reads as zero.
	Numel int64 `json:"numel"`
	// Offset is where this piece starts in the flat vector.
	Offset int64 `json:"offset"`
}

// ParamRef places one model parameter: elements [Offset, Offset+numel)
// of the saved tensor Source, viewed with Shape. A parameter saved as
// tensor-parallel shards has Split instead of Source and Offset.
type ParamRef struct {
	Name   string `json:"name"`
	Shape  []int  `json:"shape"`
	Source string `json:"source,omitempty"`
	Offset int64  `json:"offset"`
	// Split, when set, says the parameter (of the full shape Shape) was
	// saved as one shard per tensor-parallel rank, cut as Layout says.
	Split *TPSplit `json:"tp_split,omitempty"`
}

// TPSplit places a parameter's tensor-parallel shards, like Megatron's
// mp_rank_XX files: shard r (of len(Shards)) is elements [Offset,
// Offset+numel/len(Shards)) of tensor Source, laid out as
// model.TPLayout.Runs gives for rank r.
type TPSplit struct {
	Dim    int        `json:"dim"`
	Parts  int        `json:"parts,omitempty"`
	Shards []ShardRef `json:"shards"`
}

// ShardRef is where one tensor-parallel shard of a parameter lies.
type ShardRef struct {
	Source string `json:"source"`
	Offset int64  `json:"offset"`
}

// Layout is the split as a model.TPLayout.
func (s *TPSplit) Layout() model.TPLayout {
	return model.TPLayout{Split: true, Dim: s.Dim, Parts: s.Parts}
}

// Pieces lists where the parameter's values lie: its shards in rank
// order, or its one Source.
func (p ParamRef) Pieces() []ShardRef {
	if p.Split == nil {
		return []ShardRef{{Source: p.Source, Offset: p.Offset}}
	}
	return p.Split.Shards
}

// WithSources is p with each piece's source renamed by rename (an
// optimizer state laid out like the master weights, say).
func (p ParamRef) WithSources(rename func(string) (string, error)) (ParamRef, error) {
	var err error
	if p.Split == nil {
		p.Source, err = rename(p.Source)
		return p, err
	}
	s := *p.Split
	s.Shards = slices.Clone(s.Shards)
	for i := range s.Shards {
		if s.Shards[i].Source, err = rename(s.Shards[i].Source); err != nil {
			return p, err
		}
	}
	p.Split = &s
	return p, nil
}

// Numel is the product of Shape.
func (p ParamRef) Numel() int64 { return shapeNumel(p.Shape) }

func shapeNumel(shape []int) int64 {
	n := int64(1)
	for _, d := range shape {
		n *= int64(d)
	}
	return n
}

// numelFits reports whether shape has no negative dimension and an element
// count that fits an int64, so that shapeNumel is exact.
func numelFits(shape []int) bool {
	n := int64(1)
	for _, d := range shape {
		if d < 0 || d != 0 && n > math.MaxInt64/int64(d) {
			return false
		}
		n *= int64(d)
	}
	return true
}

// Bytes is the total size of the state's tensors.
func (s *State) Bytes() int64 {
	var n int64
	for _, e := range s.Tensors {
		n += int64(e.Data.Bytes())
	}
	return n
}

// SetMeta stores v, JSON-encoded, under key.
func (s *State) SetMeta(key string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("checkpoint: meta %q: %w", key, err)
	}
	if s.Meta == nil {
		s.Meta = map[string]json.RawMessage{}
	}
	s.Meta[key] = b
	return nil
}
