package optim_test

import (
	"fmt"

	"github.com/deepgo-ml/deepgo/backend"
	"github.com/deepgo-ml/deepgo/optim"
	"github.com/deepgo-ml/deepgo/tensor"
)

// ExampleNew builds DeepSpeed's default "Adam" (decoupled weight decay) from
// a config block and steps one shard whose grads carry a loss scale of 1024.
func ExampleNew() {
	be, _ := backend.NewCPU(1)
	defer be.Close()
	o, err := optim.New("Adam", map[string]any{"lr": 0.1, "weight_decay": 0.0}, be)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer o.Close()
	p, _ := tensor.FromFloat32([]float32{1, -1})
	g, _ := tensor.FromFloat32([]float32{1024, -2048})
	defer p.Free()
	defer g.Free()
	shard := optim.ParamGroup{Name: "rank0", Params: []*tensor.Tensor{p}, Grads: []*tensor.Tensor{g}}
	if err := o.Step(shard, 0.1, 1024); err != nil {
		fmt.Println(err)
		return
	}
	v, _ := p.Float32s()
	fmt.Printf("%.4f %.4f steps=%d state=%v\n", v[0], v[1], o.Steps("rank0"), o.StateNames())

	_, err = optim.New("AdamW", map[string]any{"betas": []any{0.9, 1.5}}, be)
	fmt.Println(err)
	// Output:
	// 0.9000 -0.9000 steps=1 state=[exp_avg exp_avg_sq]
	// optimizer.params.betas[1]: 1.5: must be in [0, 1)
}
