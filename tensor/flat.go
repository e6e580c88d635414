package tensor

import "fmt"

// ParamSpec names one parameter and its shape, in model order.
type ParamSpec struct {
	Name  string
	Shape []int
}

// Slot is where one parameter lives in a Flat buffer.
type Slot struct {
	Name   string
	Shape  []int
	Offset int // element offset in the flat buffer
	Numel  int
}

// Flat is one contiguous 1-D buffer holding many parameters back to back,
// each at an offset aligned to Align elements, the total padded to a multiple
// of Pad elements (the data-parallel world, so that it splits evenly into
// equal shards). This is the layout ZeRO partitions and buckets walk.
type Flat struct {
	Data  *Tensor
	Slots []Slot
	Align int
	Pad   int
}

// FlatLayout computes offsets for specs with each start aligned to align
// elements and the total padded to a multiple of pad (both >= 1). It returns
// the slots and the padded total.
func FlatLayout(specs []ParamSpec, align, pad int) ([]Slot, int, error) {
	if align < 1 {
		return nil, 0, fmt.Errorf("tensor.FlatLayout: align = %d: must be >= 1", align)
	}
	if pad < 1 {
		return nil, 0, fmt.Errorf("tensor.FlatLayout: pad = %d: must be >= 1", pad)
	}
	slots := make([]Slot, len(specs))
	off := 0
	for i, s := range specs {
		n, err := numel(s.Shape)
		if err != nil {
			return nil, 0, fmt.Errorf("tensor.FlatLayout: specs[%d] (%s): %w", i, s.Name, err)
		}
		off = (off + align - 1) / align * align
		slots[i] = Slot{Name: s.Name, Shape: append([]int(nil), s.Shape...), Offset: off, Numel: n}
		off += n
	}
	total := (off + pad - 1) / pad * pad
	return slots, total, nil
}

// NewFlat allocates a zeroed host flat buffer for specs.
func NewFlat(dt DType, specs []ParamSpec, align, pad int) (*Flat, error) {
	slots, total, err := FlatLayout(specs, align, pad)
	if err != nil {
		return nil, err
	}
	data, err := Empty(dt, total)
	if err != nil {
		return nil, err
	}
	return &Flat{Data: data, Slots: slots, Align: align, Pad: pad}, nil
}

// View returns slot i as a tensor of its own shape sharing the flat storage.
func (f *Flat) View(i int) (*Tensor, error) {
	if i < 0 || i >= len(f.Slots) {
		return nil, fmt.Errorf("tensor.Flat.View: index %d out of range [0, %d)", i, len(f.Slots))
	}
	s := f.Slots[i]
	v, err := f.Data.Slice(s.Offset, s.Numel)
	if err != nil {
		return nil, err
	}
	return v.Reshape(s.Shape...)
}

// Numel is the padded total number of elements.
func (f *Flat) Numel() int { return f.Data.Numel() }

// Shard views the r-th of n equal parts of the flat buffer (n must divide the
// padded total: use the world size as Pad).
func (f *Flat) Shard(r, n int) (*Tensor, error) {
	if n < 1 || r < 0 || r >= n {
		return nil, fmt.Errorf("tensor.Flat.Shard: rank %d of %d: need 0 <= rank < n", r, n)
	}
	total := f.Numel()
	if total%n != 0 {
		return nil, fmt.Errorf("tensor.Flat.Shard: %d elements do not split into %d equal shards (pad the layout to a multiple of %d)", total, n, n)
	}
	return f.Data.Slice(r*total/n, total/n)
}

// Free releases the buffer.
func (f *Flat) Free() error { return f.Data.Free() }
