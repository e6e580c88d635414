package safetensors

import (
	"bytes"
	"math/bits"
	"testing"

	"github.com/deepgo-ml/deepgo/tensor"
	"github.com/stretchr/testify/require"
)

// FuzzReadHeader feeds arbitrary files to ReadHeader. It must never panic,
// and a header it accepts must describe the file exactly: tensors tiling
// the data region in order, each holding exactly the bytes its dtype and
// shape need, counted without overflow. The committed corpus is in
// testdata/fuzz/FuzzReadHeader.
func FuzzReadHeader(f *testing.F) {
	f.Add(file(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}`, 4))
	f.Add(file(`{"__metadata__":{"k":"v"}}`, 0))
	f.Add(file(`{"a":{"dtype":"I64","shape":[4611686018427387904,4],"data_offsets":[0,0]}}`, 0))
	f.Add(file(`{"b":{"dtype":"BF16","shape":[2,0,3],"data_offsets":[0,0]},"a":{"dtype":"U8","shape":[],"data_offsets":[0,1]}}`, 1))
	f.Add(writeAll(f))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := ReadHeader(bytes.NewReader(b), int64(len(b)))
		if err != nil {
			return
		}
		var end int64
		for _, ti := range h.Tensors {
			n, ok := exactBytes(ti.Shape, ti.DType.Size())
			require.True(t, ok && ti.Begin == end && ti.End-ti.Begin == n,
				"accepted tensor %q %v%v at [%d, %d): needs %d bytes (fits int64: %v)", ti.Name, ti.DType, ti.Shape, ti.Begin, ti.End, n, ok)
			end = ti.End
		}
		require.Equal(t, int64(len(b)), h.DataOffset+end, "accepted header not covering the file")
	})
}

// exactBytes is the byte size of a tensor of shape and element size,
// and whether it fits an int64.
func exactBytes(shape []int, size int) (int64, bool) {
	n := uint64(size)
	for _, d := range shape {
		if d < 0 {
			return 0, false
		}
		hi, lo := bits.Mul64(n, uint64(d))
		if hi != 0 || lo > 1<<63-1 {
			return 0, false
		}
		n = lo
	}
	return int64(n), true
}

// writeAll is a file Write produced holding one tensor of every dtype.
func writeAll(t testing.TB) []byte {
	var named []Named
	for i, dt := range []tensor.DType{tensor.Uint8, tensor.Float16, tensor.Float32, tensor.BFloat16, tensor.Int32, tensor.Int64, tensor.Bool, tensor.Float64} {
		x, err := tensor.Empty(dt, i%3+1, 2)
		require.NoError(t, err)
		defer x.Free()
		named = append(named, Named{Name: "t_" + dt.String(), Tensor: x})
	}
	var buf bytes.Buffer
	_, err := Write(&buf, named, map[string]string{"format": "pt"})
	require.NoError(t, err)
	return buf.Bytes()
}
