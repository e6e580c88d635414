package safetensors

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"sort"
)

// ReadHeader reads and validates the header of a file of size bytes.
func ReadHeader(r io.ReaderAt, size int64) (*Header, error) {
	var pre [8]byte
	if size < 8 {
		return nil, fmt.Errorf("%w: file of %d bytes is shorter than the 8-byte header length", ErrFormat, size)
	}
	if _, err := r.ReadAt(pre[:], 0); err != nil {
		return nil, fmt.Errorf("safetensors: reading header length: %w", err)
	}
	n := binary.LittleEndian.Uint64(pre[:])
	if n > MaxHeader {
		return nil, fmt.Errorf("%w: header length %d exceeds %d", ErrFormat, n, MaxHeader)
	}
	if int64(n) > size-8 {
		return nil, fmt.Errorf("%w: header length %d exceeds the %d bytes after it", ErrFormat, n, size-8)
	}
	buf := make([]byte, n)
	if _, err := r.ReadAt(buf, 8); err != nil {
		return nil, fmt.Errorf("safetensors: reading header: %w", err)
	}
	return DecodeHeader(buf, size)
}

// DecodeHeader validates the JSON header hdr (without the length prefix)
// of a file of size bytes.
func DecodeHeader(hdr []byte, size int64) (*Header, error) {
	h := &Header{DataOffset: 8 + int64(len(hdr))}
	h.DataSize = size - h.DataOffset
	if h.DataSize < 0 {
		return nil, fmt.Errorf("%w: header of %d bytes exceeds the file of %d bytes", ErrFormat, len(hdr), size)
	}
	if len(bytes.TrimRight(hdr, " ")) == 0 || hdr[0] != '{' {
		return nil, fmt.Errorf("%w: header does not start with a JSON object", ErrFormat)
	}
	dec := json.NewDecoder(bytes.NewReader(hdr))
	dec.UseNumber()
	if _, err := dec.Token(); err != nil {
		return nil, fmt.Errorf("%w: header: %v", ErrFormat, err)
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("%w: header: %v", ErrFormat, err)
		}
		name := tok.(string)
		if seen[name] {
			return nil, fmt.Errorf("%w: header: key %q appears twice", ErrFormat, name)
		}
		seen[name] = true
		if name == "__metadata__" {
			if err := strict(dec, &h.Metadata); err != nil {
				return nil, fmt.Errorf("%w: header: __metadata__: %v", ErrFormat, err)
			}
			continue
		}
		var e jsonEntry
		if err := strict(dec, &e); err != nil {
			return nil, fmt.Errorf("%w: header: tensor %q: %v", ErrFormat, name, err)
		}
		dt, err := ParseDType(e.DType)
		if err != nil {
			return nil, fmt.Errorf("tensor %q: %w", name, err)
		}
		if e.Shape == nil {
			return nil, fmt.Errorf("%w: header: tensor %q has no shape", ErrFormat, name)
		}
		info := Info{Name: name, DType: dt, Shape: e.Shape, Begin: e.DataOffsets[0], End: e.DataOffsets[1]}
		for _, d := range e.Shape {
			if d < 0 {
				return nil, fmt.Errorf("%w: header: tensor %q: shape %v has a negative dimension", ErrFormat, name, e.Shape)
			}
		}
		n, ok := byteSize(e.Shape, dt.Size())
		if !ok {
			return nil, fmt.Errorf("%w: header: tensor %q: shape %v of %v holds more than 2^63 bytes", ErrFormat, name, e.Shape, dt)
		}
		if info.Begin < 0 || info.End < info.Begin || info.End-info.Begin != n {
			return nil, fmt.Errorf("%w: header: tensor %q: data_offsets [%d, %d] do not hold %v%v (%d bytes)", ErrFormat, name, info.Begin, info.End, dt, e.Shape, n)
		}
		h.Tensors = append(h.Tensors, info)
	}
	if _, err := dec.Token(); err != nil {
		return nil, fmt.Errorf("%w: header: %v", ErrFormat, err)
	}
	if rest := bytes.TrimRight(hdr[dec.InputOffset():], " "); len(rest) != 0 {
		return nil, fmt.Errorf("%w: header: %d bytes after the JSON object", ErrFormat, len(rest))
	}
	sort.SliceStable(h.Tensors, func(a, b int) bool { return h.Tensors[a].Begin < h.Tensors[b].Begin })
	var end int64
	for _, t := range h.Tensors {
		if t.Begin != end {
			return nil, fmt.Errorf("%w: tensor %q starts at data offset %d, want %d (gap or overlap)", ErrFormat, t.Name, t.Begin, end)
		}
		end = t.End
	}
	if end != h.DataSize {
		return nil, fmt.Errorf("%w: tensors end at data offset %d but the data region has %d bytes", ErrFormat, end, h.DataSize)
	}
	return h, nil
}

// byteSize is the size of a tensor of shape with elements of size bytes,
// and false when it does not fit an int64: an overflowing product could
// otherwise wrap to the size of the bytes actually there.
func byteSize(shape []int, size int) (int64, bool) {
	n := int64(size)
	for _, d := range shape {
		if d != 0 && n > math.MaxInt64/int64(d) {
			return 0, false
		}
		n *= int64(d)
	}
	return n, true
}

// strict decodes the next JSON value into v, rejecting unknown fields.
func strict(dec *json.Decoder, v any) error {
	var raw json.RawMessage
	if err := dec.Decode(&raw); err != nil {
		return err
	}
	d := json.NewDecoder(bytes.NewReader(raw))
	d.DisallowUnknownFields()
	return d.Decode(v)
}
