package safetensors

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"testing"

	"github.com/deepgo-ml/deepgo/tensor"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRoundTripAllDTypes(t *testing.T) {
	var named []Named
	for _, dt := range []tensor.DType{tensor.Uint8, tensor.Float16, tensor.Float32, tensor.BFloat16, tensor.Int32, tensor.Int64, tensor.Bool, tensor.Float64} {
		x, err := tensor.Empty(dt, 3, 1)
		require.NoError(t, err)
		defer x.Free()
		b, _ := x.RawBytes()
		for i := range b {
			b[i] = byte(i + int(dt))
		}
		named = append(named, Named{Name: "t_" + dt.String(), Tensor: x})
	}
	var buf bytes.Buffer
	h, err := Write(&buf, named, map[string]string{"format": "pt"})
	require.NoError(t, err)
	require.Zero(t, h.DataOffset%8, "data starts at %d, not 8-aligned", h.DataOffset)
	got, err := ReadHeader(bytes.NewReader(buf.Bytes()), int64(buf.Len()))
	require.NoError(t, err)
	require.Equal(t, "pt", got.Metadata["format"], "header %+v", got)
	require.Len(t, got.Tensors, len(named), "header %+v", got)
	for _, info := range got.Tensors {
		assert.Zero(t, (h.DataOffset+info.Begin)%int64(info.DType.Size()), "%s at %d not aligned", info.Name, h.DataOffset+info.Begin)
		for _, n := range named {
			if n.Name == info.Name {
				want, _ := n.Tensor.RawBytes()
				assert.Equal(t, want, buf.Bytes()[got.DataOffset+info.Begin:got.DataOffset+info.End], "%s: bytes differ", info.Name)
			}
		}
	}
}

func file(header string, data int) []byte {
	b := make([]byte, 8, 8+len(header)+data)
	binary.LittleEndian.PutUint64(b, uint64(len(header)))
	b = append(b, header...)
	return append(b, make([]byte, data)...)
}

func TestMalformed(t *testing.T) {
	for _, tc := range []struct {
		name string
		file []byte
	}{
		{"short", []byte{1, 2, 3}},
		{"huge header length", binary.LittleEndian.AppendUint64(nil, 1<<40)},
		{"header past end", append(binary.LittleEndian.AppendUint64(nil, 100), "{}"...)},
		{"not an object", file(`[1,2]   `, 0)},
		{"unknown dtype", file(`{"a":{"dtype":"Q8","shape":[1],"data_offsets":[0,1]}}`, 1)},
		{"wrong size", file(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}}`, 4)},
		{"gap", file(`{"a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}`, 2)},
		{"overlap", file(`{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"b":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}`, 2)},
		{"trailing data", file(`{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}`, 2)},
		{"duplicate", file(`{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}`, 2)},
		{"unknown field", file(`{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1],"x":1}}`, 1)},
		{"negative shape", file(`{"a":{"dtype":"U8","shape":[-1],"data_offsets":[0,0]}}`, 0)},
		{"bad metadata", file(`{"__metadata__":{"a":1}}`, 0)},
		{"garbage after object", file(`{} x`, 0)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ReadHeader(bytes.NewReader(tc.file), int64(len(tc.file)))
			require.Error(t, err, "accepted")
			if tc.name != "short" {
				require.ErrorIs(t, err, ErrFormat, "wrong error")
			}
		})
	}
}

func TestPlanRejects(t *testing.T) {
	for _, specs := range [][]Spec{
		{{Name: "", DType: tensor.Float32}},
		{{Name: "a", DType: tensor.Float32}, {Name: "a", DType: tensor.Uint8}},
		{{Name: "a", DType: tensor.DType(99)}},
		{{Name: "a", DType: tensor.Float32, Shape: []int{-2}}},
	} {
		_, _, err := Plan(specs, nil)
		assert.Error(t, err, "Plan(%+v) accepted", specs)
	}
}

func ExampleWrite() {
	x, _ := tensor.FromFloat32([]float32{1, 2, 3, 4, 5, 6}, 2, 3)
	defer x.Free()
	var buf bytes.Buffer
	h, _ := Write(&buf, []Named{{Name: "weight", Tensor: x}}, map[string]string{"format": "pt"})
	back, _ := ReadHeader(bytes.NewReader(buf.Bytes()), int64(buf.Len()))
	fmt.Println(h.Size() == int64(buf.Len()), back.Tensors[0].Name, DTypeName(back.Tensors[0].DType), back.Tensors[0].Shape)
	// Output: true weight F32 [2 3]
}
