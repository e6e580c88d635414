package benchdev

import (
	"testing"

	"github.com/deepgo-ml/deepgo/cuda"
	"github.com/deepgo-ml/deepgo/tensor"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestOpen(t *testing.T) {
	b, err := Open(tensor.Sim(0), 1)
	require.NoError(t, err)
	assert.Equal(t, tensor.Sim(0), b.Device())
	assert.Contains(t, b.Name(), "max delay 0s", "no delays, whatever DEEPGO_SIM_DELAY says")
	require.NoError(t, b.Close())

	_, err = Open(tensor.CPU, 1)
	assert.ErrorContains(t, err, "-device cpu: not a device")
	if !cuda.Available() {
		_, err = Open(tensor.CUDA(0), 1)
		assert.ErrorContains(t, err, "-device cuda:0")
	}
}
