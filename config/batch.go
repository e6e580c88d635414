package config

import "fmt"

// BatchSizes is the resolved batch triad for one run (train_batch_size,
// train_micro_batch_size_per_gpu, gradient_accumulation_steps) and the
// data-parallel size that ties them together.
type BatchSizes struct {
	// TrainBatchSize is the global batch: MicroBatch × GradAccum × DataParallel.
	TrainBatchSize int
	// MicroBatch is train_micro_batch_size_per_gpu.
	MicroBatch int
	// GradAccum is gradient_accumulation_steps.
	GradAccum int
	// DataParallel is the data-parallel size: world / (tp × pp × sp).
	DataParallel int
}

// Resolve infers the missing member of train_batch_size =
// micro × accumulation × data-parallel size exactly as DeepSpeed does, for a
// run of world ranks with tensor-parallel size tp, pipeline size pp and
// sequence-parallel size sp. A zero tp, pp or sp takes the config's
// tensor_model_parallel_size, pipeline_model_parallel_size or
// sequence_parallel_size. Errors (type Errors) show the arithmetic.
func (c *Config) Resolve(world, tp, pp, sp int) (BatchSizes, error) {
	if tp == 0 {
		tp = max(c.TensorModelParallelSize, 1)
	}
	if pp == 0 {
		pp = max(c.PipelineModelParallelSize, 1)
	}
	if sp == 0 {
		sp = max(c.SequenceParallelSize, 1)
	}
	var errs Errors
	if world < 1 || tp < 1 || pp < 1 || sp < 1 {
		errs = append(errs, &FieldError{Path: "", Value: fmt.Sprintf("world=%d tp=%d pp=%d sp=%d", world, tp, pp, sp),
			Allowed: "positive sizes"})
		return BatchSizes{}, errs
	}
	model := tp * pp * sp
	if world%model != 0 {
		errs = append(errs, &FieldError{Path: "tensor_model_parallel_size", Value: fmt.Sprint(tp),
			Allowed: fmt.Sprintf("tp × pp × sp dividing the world size %d", world),
			Msg:     fmt.Sprintf("tp %d × pp %d × sp %d = %d does not divide world %d", tp, pp, sp, model, world)})
		return BatchSizes{}, errs
	}
	dp := world / model
	toAny := func(p *int) any {
		if p == nil {
			return nil
		}
		return int64(*p)
	}
	tb, mb, gas, perr := pyBatch(toAny(c.TrainBatchSize), toAny(c.TrainMicroBatchSizePerGPU), toAny(c.GradientAccumulationSteps), int64(dp))
	if perr != nil {
		errs = append(errs, batchError(c, perr, world, tp, pp, sp, dp))
		return BatchSizes{}, errs
	}
	b := BatchSizes{TrainBatchSize: int(tb.(int64)), MicroBatch: int(mb.(int64)), GradAccum: int(gas.(int64)), DataParallel: dp}
	if c.PipelineSchedule.Type == "Interleaved" && pp > 1 && b.GradAccum%pp != 0 {
		errs = append(errs, &FieldError{Path: "gradient_accumulation_steps", Value: fmt.Sprint(b.GradAccum),
			Allowed: fmt.Sprintf("a multiple of the pipeline size %d with the Interleaved schedule", pp),
			Msg:     "the interleaved schedule needs the number of micro-batches divisible by the number of stages"})
		return b, errs
	}
	return b, nil
}

func batchError(c *Config, e *pyError, world, tp, pp, sp, dp int) *FieldError {
	show := func(p *int, auto bool) string {
		switch {
		case p != nil:
			return fmt.Sprint(*p)
		case auto:
			return `"auto"`
		}
		return "<absent>"
	}
	given := fmt.Sprintf("train_batch_size=%s, train_micro_batch_size_per_gpu=%s, gradient_accumulation_steps=%s",
		show(c.TrainBatchSize, c.isAuto("train_batch_size")),
		show(c.TrainMicroBatchSizePerGPU, c.isAuto("train_micro_batch_size_per_gpu")),
		show(c.GradientAccumulationSteps, c.isAuto("gradient_accumulation_steps")))
	path := "train_batch_size"
	switch {
	case e.Phase == "derivation" && e.Type == "AssertionError":
		path = "train_micro_batch_size_per_gpu"
	case e.Type == "ZeroDivisionError" || c.TrainMicroBatchSizePerGPU == nil && c.TrainBatchSize != nil:
		path = "train_micro_batch_size_per_gpu"
	}
	return &FieldError{
		Path:    path,
		Value:   given,
		Allowed: "train_batch_size = train_micro_batch_size_per_gpu × gradient_accumulation_steps × data-parallel size, all > 0; at least one of train_batch_size and train_micro_batch_size_per_gpu",
		Msg: fmt.Sprintf("data-parallel size %d = world %d / (tp %d × pp %d × sp %d); DeepSpeed: %s: %s",
			dp, world, tp, pp, sp, e.Type, e.Message),
	}
}

func (c *Config) isAuto(path string) bool {
	for _, p := range c.AutoPaths {
		if p == path {
			return true
		}
	}
	return false
}
