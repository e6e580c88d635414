package nn_test

import (
	"fmt"

	"github.com/deepgo-ml/deepgo/backend"
	"github.com/deepgo-ml/deepgo/nn"
)

// A tiny GPT trained standalone (no engine): own parameter buffers, plain
// SGD on the flat buffers, activation checkpointing on every block.
func Example() {
	be, _ := backend.NewCPU(1)
	defer be.Close()
	g, _ := nn.NewGPT(nn.GPTConfig{Layers: 2, Heads: 2, Width: 16, Vocab: 8, SeqLen: 8,
		Checkpointing: nn.Checkpointing{Enabled: true}})
	pb, _ := nn.NewParamBuffers(g)
	defer pb.Free()
	defer g.Free()
	g.Init(1)
	// the sequence 0 1 2 ... 7 0 1 ...: the next token is a function of this one
	in, tg := make([]int32, 8), make([]int32, 8)
	for i := range in {
		in[i], tg[i] = int32(i), int32((i+1)%8)
	}
	var first, loss float32
	for step := 0; step < 200; step++ {
		pb.ZeroGrads()
		loss, _ = g.Forward(be, in, tg, 1, 8)
		if step == 0 {
			first = loss
		}
		g.Backward(be)
		w, _ := pb.Values.Data.Float32s()
		d, _ := pb.Grads.Data.Float32s()
		for i := range w {
			w[i] -= 0.5 * d[i]
		}
	}
	fmt.Printf("params %d, loss %.1f -> below 0.1: %v, checkpointed blocks %d\n",
		nn.NumParams(g), first, loss < 0.1, g.ActivationStats().Checkpointed)
	// Output: params 6848, loss 2.1 -> below 0.1: true, checkpointed blocks 2
}
