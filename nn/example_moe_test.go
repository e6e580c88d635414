package nn_test

import (
	"fmt"

	"github.com/deepgo-ml/deepgo/backend"
	"github.com/deepgo-ml/deepgo/nn"
)

// A GPT whose second block's MLP is a mixture of 4 experts, top-2
// (DeepSpeed's MoE at ep_size 1, Megatron-DeepSpeed's --expert-interval
// 2), trained standalone with plain SGD: its loss includes 0.01 × l_aux,
// and MoEStats reports each MoE layer's l_aux and expert counts.
func ExampleMoEConfig() {
	be, _ := backend.NewCPU(1)
	defer be.Close()
	g, _ := nn.NewReadyGPT(nn.GPTConfig{Layers: 2, Heads: 2, Width: 16, Vocab: 8, SeqLen: 8,
		MoE: nn.MoEConfig{Experts: 4, K: 2, CapacityFactor: 1, DropTokens: true, LossCoeff: 0.01, EveryN: 2}}, be, 1)
	defer g.Free()
	ps := g.Params()
	for _, p := range ps {
		if p.Name == "transformer.h.1.mlp.deepspeed_moe.gate.wg.weight" || p.Name == "transformer.h.1.mlp.deepspeed_moe.experts.deepspeed_experts.3.c_proj.bias" {
			fmt.Println(p.Name, p.Shape)
		}
	}
	in, tg := make([]int32, 16), make([]int32, 16)
	for i := range in {
		in[i], tg[i] = int32(i%8), int32((i+1)%8)
	}
	var first, loss float32
	for step := 0; step < 300; step++ {
		for _, p := range ps {
			d, _ := p.Grad.Float32s()
			clear(d)
		}
		loss, _ = g.Forward(be, in, tg, 2, 8)
		if step == 0 {
			first = loss
		}
		g.Backward(be)
		for _, p := range ps {
			w, _ := p.Data.Float32s()
			d, _ := p.Grad.Float32s()
			for i := range w {
				w[i] -= 0.5 * d[i]
			}
		}
	}
	st := g.MoEStats()[0]
	routes := 0
	for _, c := range st.ExpCounts {
		routes += int(c)
	}
	fmt.Printf("params %d, loss %.1f -> below 0.2: %v; layer %d: %d routes for 16 tokens, l_aux %.2f\n",
		nn.NumParams(g), first, loss < 0.2, st.Layer, routes, st.LAux)
	// Output:
	// transformer.h.1.mlp.deepspeed_moe.gate.wg.weight [4 16]
	// transformer.h.1.mlp.deepspeed_moe.experts.deepspeed_experts.3.c_proj.bias [16]
	// params 13296, loss 2.1 -> below 0.2: true; layer 1: 32 routes for 16 tokens, l_aux 1.00
}
