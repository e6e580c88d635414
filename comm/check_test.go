package comm_test

import (
	"errors"
	"testing"

	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/tensor"
	"github.com/stretchr/testify/require"
)

func TestChecks(t *testing.T) {
	mk := func(dt tensor.DType, n int) *tensor.Tensor {
		x, err := tensor.Empty(dt, n)
		require.NoError(t, err)
		t.Cleanup(func() { x.Free() })
		return x
	}
	big := mk(tensor.Float32, 12)
	mine, _ := big.Slice(4, 4) // chunk 1 of 3
	other, _ := big.Slice(2, 4)
	for _, tc := range []struct {
		name string
		err  func() error
		want error // nil: valid
	}{
		{"chunked ok", func() error {
			_, e := comm.CheckChunked(comm.OpReduceScatter, mk(tensor.Float32, 4), big, "dst", "src", 1, 3)
			return e
		}, nil},
		{"chunked in place", func() error { _, e := comm.CheckChunked(comm.OpAllGather, mine, big, "src", "dst", 1, 3); return e }, nil},
		{"chunked bad overlap", func() error { _, e := comm.CheckChunked(comm.OpAllGather, other, big, "src", "dst", 1, 3); return e }, comm.ErrInvalid},
		{"chunked count", func() error {
			_, e := comm.CheckChunked(comm.OpAllGather, mk(tensor.Float32, 5), big, "src", "dst", 1, 3)
			return e
		}, comm.ErrInvalid},
		{"chunked dtype", func() error {
			_, e := comm.CheckChunked(comm.OpAllGather, mk(tensor.Int32, 4), big, "src", "dst", 1, 3)
			return e
		}, comm.ErrInvalid},
		{"alltoall ok", func() error { _, e := comm.CheckAllToAll(mk(tensor.Float32, 6), mk(tensor.Float32, 6), 3); return e }, nil},
		{"alltoall not a multiple", func() error { _, e := comm.CheckAllToAll(mk(tensor.Float32, 7), mk(tensor.Float32, 7), 3); return e }, comm.ErrInvalid},
		{"alltoall overlap", func() error { _, e := comm.CheckAllToAll(big, mine, 2); return e }, comm.ErrInvalid},
		{"p2p ok", func() error { _, e := comm.CheckP2P(comm.OpSend, mine, 0, 1, 3); return e }, nil},
		{"p2p self", func() error { _, e := comm.CheckP2P(comm.OpRecv, mine, 1, 1, 3); return e }, comm.ErrInvalid},
		{"p2p range", func() error { _, e := comm.CheckP2P(comm.OpRecv, mine, 3, 1, 3); return e }, comm.ErrInvalid},
		{"p2p nil", func() error { _, e := comm.CheckP2P(comm.OpSend, nil, 0, 1, 3); return e }, comm.ErrInvalid},
		{"rank negative", func() error { return comm.CheckRank("root", -1, 3) }, comm.ErrInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.err()
			if tc.want == nil {
				require.NoError(t, err)
				return
			}
			require.True(t, errors.Is(err, tc.want), "%v: want %v", err, tc.want)
		})
	}
	call, err := comm.CheckP2P(comm.OpSend, mine, 2, 1, 3)
	require.NoError(t, err)
	require.Equal(t, comm.Call{Op: comm.OpSend, DType: tensor.Float32, Count: 4, Root: 2}, call)
}
