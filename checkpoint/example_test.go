package checkpoint_test

import (
	"context"
	"fmt"
	"os"

	"github.com/deepgo-ml/deepgo/checkpoint"
	"github.com/deepgo-ml/deepgo/tensor"
)

// A one-rank save and load: rank pieces of a flat vector (Shard) and a
// whole tensor, then a read of any range of the flat vector.
func Example() {
	dir, _ := os.MkdirTemp("", "ckpt")
	defer os.RemoveAll(dir)
	flat, _ := tensor.FromFloat32([]float32{1, 2, 3, 4, 5, 0}) // 5 elements + padding
	defer flat.Free()
	st := &checkpoint.State{Step: 10, Tensors: []checkpoint.Entry{
		{Name: "fp32", File: "optim", Data: flat, Shard: &checkpoint.Shard{Numel: 5}},
	}}
	st.SetMeta("scaler", map[string]float64{"scale": 1024})
	ctx := context.Background()
	if _, err := checkpoint.Save(ctx, checkpoint.Options{Dir: dir, Keep: 2}, st); err != nil {
		fmt.Println(err)
		return
	}
	ck, err := checkpoint.Open(nil, dir, "") // the tag latest names
	if err != nil {
		fmt.Println(err)
		return
	}
	defer ck.Close()
	part, _ := tensor.Empty(tensor.Float32, 3)
	defer part.Free()
	if err := ck.ReadRange(ctx, "fp32", 3, part); err != nil { // elements 3..5, 5 is padding
		fmt.Println(err)
		return
	}
	v, _ := part.Float32s()
	scaler, _ := ck.Meta(0, "scaler")
	fmt.Println(ck.Tag, v, string(scaler), ck.Verify(ctx))
	// Output: global_step10 [4 5 0] {"scale":1024} <nil>
}
