package pipeline_test

import (
	"fmt"

	"github.com/deepgo-ml/deepgo/pipeline"
)

// A two-stage pipeline running two micro-batches per optimizer step: the
// instruction stream the second (last) stage executes under 1F1B.
func ExampleNewTrainSchedule() {
	s, err := pipeline.NewTrainSchedule(2, 2, 1)
	if err != nil {
		panic(err)
	}
	fmt.Println("buffers:", s.NumPipeBuffers())
	for i, step := range s.Steps() {
		fmt.Println(i, step)
	}
	// Output:
	// buffers: 2
	// 0 []
	// 1 [RecvActivation(buffer_id=0) LoadMicroBatch(buffer_id=0) ForwardPass(buffer_id=0)]
	// 2 [BackwardPass(buffer_id=0)]
	// 3 [SendGrad(buffer_id=0) RecvActivation(buffer_id=1) LoadMicroBatch(buffer_id=1) ForwardPass(buffer_id=1)]
	// 4 [BackwardPass(buffer_id=1)]
	// 5 [SendGrad(buffer_id=1) ReduceTiedGrads() ReduceGrads() OptimizerStep()]
}

// Splitting six layers over two stages by parameter count.
func ExamplePartitionLayers() {
	layers := []pipeline.Layer{
		{Kind: pipeline.LayerSpec, Type: "Embedding", TrainableParams: 800},
		{Kind: pipeline.LayerSpec, Type: "TransformerLayer", TrainableParams: 2160},
		{Kind: pipeline.LayerSpec, Type: "TransformerLayer", TrainableParams: 2160},
		{Kind: pipeline.LayerSpec, Type: "TransformerLayer", TrainableParams: 2160},
		{Kind: pipeline.LayerFunction, Type: "fp16_to_fp32"},
		{Kind: pipeline.LayerSpec, Type: "LMHead", TrainableParams: 800},
	}
	p, err := pipeline.PartitionLayers("parameters", layers, 2)
	if err != nil {
		panic(err)
	}
	for stage := range len(p.Parts) - 1 {
		start, stop := p.StageBounds(stage)
		fmt.Printf("stage %d: layers [%d, %d)\n", stage, start, stop)
	}
	// Output:
	// stage 0: layers [0, 3)
	// stage 1: layers [3, 6)
}
