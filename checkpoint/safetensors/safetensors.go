// Package safetensors reads and writes the safetensors format of Hugging
// Face (https://github.com/huggingface/safetensors), the tensor container
// of deepgo checkpoints:
//
//	8 bytes    N, the header length, little-endian uint64
//	N bytes    a JSON object, padded with spaces to a multiple of 8 bytes:
//	           {"__metadata__": {string: string}, NAME: {"dtype": "F32",
//	            "shape": [2, 3], "data_offsets": [BEGIN, END]}, ...}
//	rest       the tensors' bytes, little-endian, row-major; BEGIN and END
//	           are relative to the start of this region, tensors are
//	           contiguous and cover it exactly
//
// Writers order tensors by decreasing element size, so that with the
// 8-byte header padding every tensor is naturally aligned in the file (and
// in a buffer holding the file), as Python's safetensors does. Readers
// check everything Python's reader checks: the header is a JSON object
// under 100 MB, every dtype is known, offsets match shape and dtype, the
// tensors tile the data region without gap or overlap, and names are unique.
package safetensors

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"

	"github.com/deepgo-ml/deepgo/tensor"
)

// MaxHeader is the largest header accepted, as in Python's safetensors.
const MaxHeader = 100_000_000

// ErrFormat is wrapped by every error about a malformed file.
var ErrFormat = errors.New("safetensors: malformed")

var names = map[tensor.DType]string{
	tensor.Float32:  "F32",
	tensor.Float16:  "F16",
	tensor.BFloat16: "BF16",
	tensor.Int32:    "I32",
	tensor.Int64:    "I64",
	tensor.Uint8:    "U8",
	tensor.Bool:     "BOOL",
	tensor.Float64:  "F64",
}

// DTypeName is safetensors' name of dt ("F32", "BF16", ...), "" if dt has
// none.
func DTypeName(dt tensor.DType) string { return names[dt] }

// ParseDType maps a safetensors dtype name to deepgo's dtype.
func ParseDType(s string) (tensor.DType, error) {
	for dt, n := range names {
		if n == s {
			return dt, nil
		}
	}
	return 0, fmt.Errorf("%w: dtype %q is not one of F32, F16, BF16, I32, I64, U8, BOOL, F64", ErrFormat, s)
}

// Info describes one tensor of a file. Begin and End are byte offsets
// relative to the data region.
type Info struct {
	Name  string
	DType tensor.DType
	Shape []int
	Begin int64
	End   int64
}

// Numel is the number of elements.
func (i Info) Numel() int64 {
	n := int64(1)
	for _, d := range i.Shape {
		n *= int64(d)
	}
	return n
}

// Header is a parsed file header.
type Header struct {
	// Metadata is the __metadata__ map (nil when absent).
	Metadata map[string]string
	// Tensors are in data order.
	Tensors []Info
	// DataOffset is where the data region starts in the file: 8 + N.
	DataOffset int64
	// DataSize is the size of the data region.
	DataSize int64
}

// Find returns the tensor called name.
func (h *Header) Find(name string) (Info, bool) {
	for _, t := range h.Tensors {
		if t.Name == name {
			return t, true
		}
	}
	return Info{}, false
}

// Size is the size of the whole file.
func (h *Header) Size() int64 { return h.DataOffset + h.DataSize }

// Spec is what Plan needs to know of a tensor.
type Spec struct {
	Name  string
	DType tensor.DType
	Shape []int
}

type jsonEntry struct {
	DType       string   `json:"dtype"`
	Shape       []int    `json:"shape"`
	DataOffsets [2]int64 `json:"data_offsets"`
}

// Plan lays out specs: it returns the encoded header (length prefix,
// JSON, padding) and the header it describes, whose Tensors are in data
// order (decreasing element size, then the order of specs).
func Plan(specs []Spec, meta map[string]string) ([]byte, *Header, error) {
	order := make([]int, len(specs))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool {
		return specs[order[a]].DType.Size() > specs[order[b]].DType.Size()
	})
	h := &Header{Metadata: meta}
	seen := make(map[string]bool, len(specs))
	var buf bytes.Buffer
	buf.WriteString("{")
	if len(meta) > 0 {
		m, err := json.Marshal(meta)
		if err != nil {
			return nil, nil, fmt.Errorf("safetensors: metadata: %w", err)
		}
		buf.WriteString(`"__metadata__":`)
		buf.Write(m)
	}
	var off int64
	for _, i := range order {
		s := specs[i]
		if s.Name == "" || s.Name == "__metadata__" {
			return nil, nil, fmt.Errorf("safetensors: tensor %d: name %q is not allowed", i, s.Name)
		}
		if seen[s.Name] {
			return nil, nil, fmt.Errorf("safetensors: tensor name %q appears twice", s.Name)
		}
		seen[s.Name] = true
		dn := names[s.DType]
		if dn == "" {
			return nil, nil, fmt.Errorf("safetensors: tensor %q: dtype %v has no safetensors name", s.Name, s.DType)
		}
		info := Info{Name: s.Name, DType: s.DType, Shape: slices.Clone(s.Shape), Begin: off}
		for _, d := range s.Shape {
			if d < 0 {
				return nil, nil, fmt.Errorf("safetensors: tensor %q: shape %v has a negative dimension", s.Name, s.Shape)
			}
		}
		if info.Shape == nil {
			info.Shape = []int{}
		}
		off += info.Numel() * int64(s.DType.Size())
		info.End = off
		h.Tensors = append(h.Tensors, info)
		name, _ := json.Marshal(s.Name)
		ent, _ := json.Marshal(jsonEntry{DType: dn, Shape: info.Shape, DataOffsets: [2]int64{info.Begin, info.End}})
		if buf.Len() > 1 {
			buf.WriteByte(',')
		}
		buf.Write(name)
		buf.WriteByte(':')
		buf.Write(ent)
	}
	buf.WriteByte('}')
	for buf.Len()%8 != 0 {
		buf.WriteByte(' ')
	}
	if buf.Len() > MaxHeader {
		return nil, nil, fmt.Errorf("safetensors: header of %d bytes exceeds %d", buf.Len(), MaxHeader)
	}
	out := make([]byte, 8+buf.Len())
	binary.LittleEndian.PutUint64(out, uint64(buf.Len()))
	copy(out[8:], buf.Bytes())
	h.DataOffset = int64(len(out))
	h.DataSize = off
	return out, h, nil
}

// Named is a tensor and its name, for Write.
type Named struct {
	Name   string
	Tensor *tensor.Tensor
}

// Write writes ts (contiguous host tensors) as one safetensors file to w
// and returns its header.
func Write(w io.Writer, ts []Named, meta map[string]string) (*Header, error) {
	specs := make([]Spec, len(ts))
	byName := make(map[string]*tensor.Tensor, len(ts))
	for i, t := range ts {
		specs[i] = Spec{Name: t.Name, DType: t.Tensor.DType(), Shape: t.Tensor.Shape()}
		byName[t.Name] = t.Tensor
	}
	hdr, h, err := Plan(specs, meta)
	if err != nil {
		return nil, err
	}
	if _, err := w.Write(hdr); err != nil {
		return nil, err
	}
	for _, info := range h.Tensors {
		t := byName[info.Name]
		if t.Numel() == 0 {
			continue
		}
		b, err := t.RawBytes()
		if err != nil {
			return nil, fmt.Errorf("safetensors: tensor %q: %w", info.Name, err)
		}
		if _, err := w.Write(b); err != nil {
			return nil, err
		}
	}
	return h, nil
}
