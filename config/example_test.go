package config_test

import (
	"fmt"

	"github.com/deepgo-ml/deepgo/config"
)

func ExampleParse() {
	cfg, err := config.Parse([]byte(`{
		// Hjson: comments and trailing commas are fine
		"train_micro_batch_size_per_gpu": 4,
		"gradient_accumulation_steps": 8,
		"zero_optimization": {"stage": 2, "cpu_offload": true},
	}`))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(cfg.ZeroOptimization.Stage, cfg.ZeroOptimization.OffloadOptimizer.Device, cfg.ZeroOptimization.ReduceBucketSize)
	for _, w := range cfg.Warnings {
		fmt.Println("warning:", w)
	}
	// Output:
	// 2 cpu 500000000
	// warning: zero_optimization.cpu_offload: deprecated; mapped to offload_optimizer: {"device": "cpu"}
}

func ExampleConfig_Resolve() {
	cfg, _ := config.Parse([]byte(`{"train_batch_size": 256, "train_micro_batch_size_per_gpu": 4,
		"tensor_model_parallel_size": 2}`))
	b, err := cfg.Resolve(16, 0, 0, 0)
	fmt.Printf("%+v %v\n", b, err)

	cfg, _ = config.Parse([]byte(`{"train_batch_size": 32, "train_micro_batch_size_per_gpu": 3}`))
	_, err = cfg.Resolve(4, 1, 1, 1)
	fmt.Println(err)
	// Output:
	// {TrainBatchSize:256 MicroBatch:4 GradAccum:8 DataParallel:8} <nil>
	// config: train_batch_size: got train_batch_size=32, train_micro_batch_size_per_gpu=3, gradient_accumulation_steps=<absent>; allowed: train_batch_size = train_micro_batch_size_per_gpu × gradient_accumulation_steps × data-parallel size, all > 0; at least one of train_batch_size and train_micro_batch_size_per_gpu (data-parallel size 4 = world 4 / (tp 1 × pp 1 × sp 1); DeepSpeed: AssertionError: Check batch related parameters. train_batch_size is not equal to micro_batch_per_gpu * gradient_acc_step * world_size 32 != 3 * 2 * 4)
}

func ExampleExplain() {
	s, _ := config.Explain("offload_param.buffer_count")
	fmt.Print(s)
	// Output:
	// zero_optimization.offload_param.buffer_count
	//   buffer_count is the number of swap buffers (param: 5, optimizer: 4).
	//   allowed: an integer >= 1
	//   default: 5
	//   origin: DeepSpeed (schema-checked section: DeepSpeed rejects unknown keys here)
	//   "auto": DeepSpeed's default, as DeepSpeed does in this section.
}
