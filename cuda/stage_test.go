//go:build cuda

package cuda

import (
	"context"
	"math/rand/v2"
	"testing"

	"github.com/deepgo-ml/deepgo/tensor"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// HostEmpty is page-locked host memory, and CopyAsync round-trips through
// the device after the kernels queued before it, from pinned and pageable
// host memory, sizes 0 to 1<<20+3.
func TestHostEmptyCopyAsync(t *testing.T) {
	_, gpu := setup(t)
	ctx := context.Background()
	r := rand.New(rand.NewPCG(3, 4))
	for _, n := range sizes {
		for _, pinned := range []bool{true, false} {
			src := hostRand(t, r, tensor.Float32, n, true)
			h := src
			if pinned {
				var err error
				h, err = gpu.HostEmpty(tensor.Float32, n)
				require.NoError(t, err)
				assert.True(t, h.Device().IsCPU())
				require.NoError(t, gpu.Copy(h, src)) // host to host
			}
			d, err := gpu.Empty(tensor.Float32, n)
			require.NoError(t, err)
			up, err := gpu.CopyAsync(d, h)
			require.NoError(t, err)
			require.NoError(t, up.Wait(ctx))
			require.NoError(t, gpu.Scale([]*tensor.Tensor{d}, 2)) // queued before the copy down
			out, err := gpu.HostEmpty(tensor.Float32, n)
			require.NoError(t, err)
			down, err := gpu.CopyAsync(out, d)
			require.NoError(t, err)
			require.NoError(t, down.Wait(ctx))
			assert.True(t, down.Done())
			want, _ := src.Float32s()
			got, _ := out.Float32s()
			for i := range want {
				require.Equal(t, 2*want[i], got[i], "n %d pinned %v element %d", n, pinned, i)
			}
			for _, x := range []*tensor.Tensor{out, d, src} {
				x.Free()
			}
			if pinned {
				h.Free()
			}
		}
	}
}
