package local

import (
	"fmt"
	"testing"

	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/tensor"
)

func BenchmarkAllReduce(b *testing.B) {
	for _, n := range []int{2, 4, 8} {
		for _, length := range []int{1, 40009, 1 << 20} {
			b.Run(fmt.Sprintf("n=%d/len=%d", n, length), func(b *testing.B) {
				w := newWorld(b, n, testTimeout)
				bufs := make([]*tensor.Tensor, n)
				for r := range bufs {
					bufs[r] = newTensor(b, tensor.Float32, length)
				}
				b.SetBytes(int64(4 * length))
				b.ResetTimer()
				mustAll(b, w.Comms(), func(c comm.Comm) error {
					for range b.N {
						if err := c.AllReduce(ctxBG, bufs[c.Rank()], comm.Sum); err != nil {
							return err
						}
					}
					return nil
				})
			})
		}
	}
}
