package checkpoint

import (
	"cmp"
	"encoding/json"
	"fmt"
	"math"
	"path"
	"slices"
	"strings"

	"github.com/deepgo-ml/deepgo/checkpoint/safetensors"
)

// Format and Version identify the manifest layout.
const (
	Format  = "deepgo.checkpoint"
	Version = 1
)

// Manifest is the content of <tag>/manifest.json: everything needed to
// verify and read a checkpoint. Rank 0 writes it last, from every rank's
// RankManifest, once all shard files are durable.
type Manifest struct {
	Format         string                     `json:"format"`
	Version        int                        `json:"version"`
	Tag            string                     `json:"tag"`
	Step           int64                      `json:"step"`
	World          int                        `json:"world"`
	Topology       map[string]int             `json:"topology,omitempty"`
	ZeroStage      int                        `json:"zero_stage"`
	CheckpointType string                     `json:"checkpoint_type"`
	Gathered       bool                       `json:"gathered"`
	Config         json.RawMessage            `json:"config,omitempty"`
	Params         []ParamRef                 `json:"params,omitempty"`
	Ranks          []RankManifest             `json:"ranks"`
	Extra          map[string]json.RawMessage `json:"extra,omitempty"`
}

// RankManifest is one rank's part of the manifest.
type RankManifest struct {
	Rank    int                        `json:"rank"`
	Files   []FileInfo                 `json:"files"`
	Tensors []TensorInfo               `json:"tensors"`
	Meta    map[string]json.RawMessage `json:"meta,omitempty"`
}

// FileInfo is one file of a rank: name (relative to the tag directory),
// size and CRC-32C (Castagnoli) of the whole file, in hex.
type FileInfo struct {
	Name   string `json:"name"`
	Size   int64  `json:"size"`
	CRC32C string `json:"crc32c"`
}

// TensorInfo is one saved tensor: its file, safetensors dtype name
// ("F32", "BF16", ...), shape, and placement when sharded.
type TensorInfo struct {
	Name  string `json:"name"`
	File  string `json:"file"`
	DType string `json:"dtype"`
	Shape []int  `json:"shape"`
	Shard *Shard `json:"shard,omitempty"`
}

// Numel is the product of Shape.
func (t TensorInfo) Numel() int64 { return shapeNumel(t.Shape) }

// Bytes sums the sizes of every file of every rank.
func (m *Manifest) Bytes() int64 {
	var n int64
	for _, r := range m.Ranks {
		for _, f := range r.Files {
			n += f.Size
		}
	}
	return n
}

func validFileName(n string) bool {
	return n != "" && n == path.Base(n) && !strings.HasPrefix(n, ".") && n != manifestName && n != latestName && !strings.ContainsAny(n, "/\\")
}

// Validate checks the manifest's internal consistency: format and
// version, one entry per rank in order, file names safe and unique, every
// tensor in a listed file with a known dtype, whole tensors unique, the
// pieces of each sharded tensor agreeing on dtype and size, disjoint and
// covering it, and every parameter inside its source tensor.
func (m *Manifest) Validate() error {
	if m.Format != Format {
		return fmt.Errorf("format %q, want %q", m.Format, Format)
	}
	if m.Version != Version {
		return fmt.Errorf("version %d: this reader understands version %d", m.Version, Version)
	}
	if err := validTag(m.Tag); err != nil {
		return err
	}
	if m.World < 1 || len(m.Ranks) != m.World {
		return fmt.Errorf("world %d with %d rank entries", m.World, len(m.Ranks))
	}
	files := map[string]bool{}
	for i, r := range m.Ranks {
		if r.Rank != i {
			return fmt.Errorf("rank entry %d is for rank %d", i, r.Rank)
		}
		own := map[string]bool{}
		for _, f := range r.Files {
			if !validFileName(f.Name) {
				return fmt.Errorf("rank %d: file name %q is not allowed", i, f.Name)
			}
			if files[f.Name] {
				return fmt.Errorf("rank %d: file %q listed twice", i, f.Name)
			}
			if f.Size < 0 || len(f.CRC32C) != 8 {
				return fmt.Errorf("rank %d: file %q: size %d, crc32c %q", i, f.Name, f.Size, f.CRC32C)
			}
			files[f.Name], own[f.Name] = true, true
		}
		for _, t := range r.Tensors {
			if !own[t.File] {
				return fmt.Errorf("rank %d: tensor %q is in file %q, which the rank does not list", i, t.Name, t.File)
			}
			if _, err := safetensors.ParseDType(t.DType); err != nil {
				return fmt.Errorf("rank %d: tensor %q: %w", i, t.Name, err)
			}
			if !numelFits(t.Shape) {
				return fmt.Errorf("rank %d: tensor %q: shape %v: want dimensions >= 0 and at most 2^63-1 elements", i, t.Name, t.Shape)
			}
			if t.Shard != nil && len(t.Shape) != 1 {
				return fmt.Errorf("rank %d: sharded tensor %q has shape %v, want 1-D", i, t.Name, t.Shape)
			}
		}
	}
	idx, err := buildIndex(m)
	if err != nil {
		return err
	}
	for _, p := range m.Params {
		if err := validParam(p, idx); err != nil {
			return err
		}
	}
	return nil
}

// validParam checks that p's shape is sane, its split (if any) fits that
// shape, and each of its pieces lies inside its source tensor.
func validParam(p ParamRef, idx map[string]*Global) error {
	if !numelFits(p.Shape) {
		return fmt.Errorf("param %q: shape %v: want dimensions >= 0 and at most 2^63-1 elements", p.Name, p.Shape)
	}
	numel := p.Numel()
	if s := p.Split; s != nil {
		if p.Source != "" || p.Offset != 0 {
			return fmt.Errorf("param %q: source %q, offset %d given with tp_split (its shards place it)", p.Name, p.Source, p.Offset)
		}
		if len(s.Shards) == 0 {
			return fmt.Errorf("param %q: tp_split has no shards", p.Name)
		}
		if err := s.Layout().Check(p.Shape, len(s.Shards)); err != nil {
			return fmt.Errorf("param %q: %w", p.Name, err)
		}
		numel /= int64(len(s.Shards))
	}
	for _, r := range p.Pieces() {
		g, ok := idx[r.Source]
		if !ok {
			return fmt.Errorf("param %q: source tensor %q is not in the checkpoint", p.Name, r.Source)
		}
		if r.Offset < 0 || r.Offset > g.Numel || numel > g.Numel-r.Offset {
			return fmt.Errorf("param %q: elements [%d, %d) outside %q of %d elements", p.Name, r.Offset, r.Offset+numel, r.Source, g.Numel)
		}
	}
	return nil
}

// Global is a tensor of the checkpoint as a whole: a whole tensor saved by
// one rank, or a flat vector assembled from every rank's piece.
type Global struct {
	Name    string
	DType   string
	Shape   []int // the whole tensor's shape; [Numel] for a sharded one
	Numel   int64
	Sharded bool
	Pieces  []Piece // by offset
}

// Piece is one rank's part of a Global tensor.
type Piece struct {
	Rank   int
	File   string
	Tensor string // name inside the file
	Offset int64
	Length int64
}

func buildIndex(m *Manifest) (map[string]*Global, error) {
	idx := map[string]*Global{}
	for _, r := range m.Ranks {
		for _, t := range r.Tensors {
			g := idx[t.Name]
			if t.Shard == nil {
				if g != nil {
					return nil, fmt.Errorf("tensor %q: saved whole by rank %d and again by rank %d", t.Name, g.Pieces[0].Rank, r.Rank)
				}
				idx[t.Name] = &Global{Name: t.Name, DType: t.DType, Shape: t.Shape, Numel: t.Numel(),
					Pieces: []Piece{{Rank: r.Rank, File: t.File, Tensor: t.Name, Length: t.Numel()}}}
				continue
			}
			if g == nil {
				g = &Global{Name: t.Name, DType: t.DType, Shape: []int{int(t.Shard.Numel)}, Numel: t.Shard.Numel, Sharded: true}
				idx[t.Name] = g
			}
			if !g.Sharded || g.DType != t.DType || g.Numel != t.Shard.Numel {
				return nil, fmt.Errorf("tensor %q: rank %d's piece (%s, %d elements, sharded %v) disagrees with rank %d's (%s, %d elements, sharded %v)",
					t.Name, r.Rank, t.DType, t.Shard.Numel, true, g.Pieces[0].Rank, g.DType, g.Numel, g.Sharded)
			}
			if t.Shard.Offset < 0 || t.Shard.Numel < 0 || t.Shard.Offset > math.MaxInt64-t.Numel() {
				return nil, fmt.Errorf("tensor %q: rank %d: shard %+v", t.Name, r.Rank, *t.Shard)
			}
			g.Pieces = append(g.Pieces, Piece{Rank: r.Rank, File: t.File, Tensor: t.Name, Offset: t.Shard.Offset, Length: t.Numel()})
		}
	}
	for _, g := range idx {
		if !g.Sharded {
			continue
		}
		slices.SortFunc(g.Pieces, func(a, b Piece) int { return cmp.Compare(a.Offset, b.Offset) })
		var end int64
		for _, p := range g.Pieces {
			if p.Offset < end {
				return nil, fmt.Errorf("tensor %q: rank %d's piece [%d, %d) overlaps the previous one", g.Name, p.Rank, p.Offset, p.Offset+p.Length)
			}
			if p.Offset > end && p.Offset <= g.Numel {
				return nil, fmt.Errorf("tensor %q: elements [%d, %d) are in no rank's piece", g.Name, end, min(p.Offset, g.Numel))
			}
			end = p.Offset + p.Length
		}
		if end < g.Numel {
			return nil, fmt.Errorf("tensor %q: elements [%d, %d) are in no rank's piece", g.Name, end, g.Numel)
		}
	}
	return idx, nil
}
