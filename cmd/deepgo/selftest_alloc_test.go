package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/deepgo-ml/deepgo/tensor"
)

// TestSelftestAlloc: a case's first failed allocation is kept as its error
// and later ones are not attempted; free frees what was made.
func TestSelftestAlloc(t *testing.T) {
	var a stAlloc
	x := a.vals(tensor.Float32, []float32{1, 2})
	require.NoError(t, a.err)
	require.NotNil(t, x)
	assert.Nil(t, a.empty(tensor.Float32, -1))
	require.ErrorContains(t, a.err, "set-up")
	first := a.err
	assert.Nil(t, a.empty(tensor.Float32, 4))
	assert.Nil(t, a.vals(tensor.BFloat16, []float32{1}))
	assert.Same(t, first, a.err)
	a.free()
	_, err := x.Float32s()
	assert.ErrorIs(t, err, tensor.ErrFreed)
}
