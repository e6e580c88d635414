package tensor

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestFloat16KnownValues(t *testing.T) {
	cases := []struct {
		in   float32
		want uint16
	}{
		{0, 0}, {float32(math.Copysign(0, -1)), 0x8000}, {1, 0x3c00}, {-2, 0xc000},
		{65504, 0x7bff}, {65519.99, 0x7bff}, {65520, 0x7c00}, {1e9, 0x7c00},
		{0x1p-14, 0x0400}, {0x1p-24, 0x0001}, {0x1p-25, 0x0000}, {0x1.8p-25, 0x0001},
		{0x1.002p0, 0x3c00}, {0x1.006p0, 0x3c02}, // ties to even
		{float32(math.Inf(1)), 0x7c00}, {float32(math.Inf(-1)), 0xfc00},
	}
	for _, c := range cases {
		assert.Equal(t, c.want, Float32ToFloat16(c.in), "Float32ToFloat16(%g)", c.in)
	}
	got := Float32ToFloat16(float32(math.NaN()))
	assert.Equal(t, uint16(0x7c00), got&0x7c00, "NaN -> %#04x, want a NaN (exponent all ones)", got)
	assert.NotZero(t, got&0x3ff, "NaN -> %#04x, want a NaN (mantissa not zero)", got)
}

func TestBFloat16KnownValues(t *testing.T) {
	cases := []struct {
		in   float32
		want uint16
	}{
		{1, 0x3f80}, {-1, 0xbf80}, {0x1.01p0, 0x3f80}, {0x1.03p0, 0x3f82}, {0x1.02p0, 0x3f81},
		{math.MaxFloat32, 0x7f80}, {0x1p-133, 0x0001}, {0x1p-134, 0x0000},
		{float32(math.Inf(-1)), 0xff80},
	}
	for _, c := range cases {
		assert.Equal(t, c.want, Float32ToBFloat16(c.in), "Float32ToBFloat16(%g)", c.in)
	}
}

// Every finite half value widens and narrows back to itself.
func TestHalfRoundTripAllPatterns(t *testing.T) {
	for i := 0; i < 1<<16; i++ {
		h := uint16(i)
		if h&0x7c00 != 0x7c00 || h&0x3ff == 0 {
			require.Equal(t, h, Float32ToFloat16(Float16ToFloat32(h)), "f16 %#04x -> %g", h, Float16ToFloat32(h))
		}
		if h&0x7f80 != 0x7f80 || h&0x7f == 0 {
			require.Equal(t, h, Float32ToBFloat16(BFloat16ToFloat32(h)), "bf16 %#04x -> %g", h, BFloat16ToFloat32(h))
		}
	}
}
