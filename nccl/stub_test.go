//go:build !cuda

package nccl

import (
	"context"
	"testing"

	"github.com/deepgo-ml/deepgo/comm"
	"github.com/stretchr/testify/require"
)

func TestNoCUDA(t *testing.T) {
	_, err := New(context.Background(), UniqueID{}, 0, 1, 0, Options{})
	var ce *comm.Error
	require.ErrorAs(t, err, &ce, "New")
	require.ErrorIs(t, err, ErrNoCUDA, "New")
	require.ErrorIs(t, err, comm.ErrUnsupported, "New")
	_, err = GetUniqueID()
	require.ErrorIs(t, err, ErrNoCUDA, "GetUniqueID")
	_, err = NewFromStore(context.Background(), nil, 0, 1, 0, Options{})
	require.ErrorIs(t, err, ErrNoCUDA, "NewFromStore")

}
