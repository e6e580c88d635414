package rundir

import (
	"fmt"
	"strings"
)

// InfoFile is deepgo's one file in a run directory, beside the csv_monitor
// and tensorboard files: Info, as JSON.
const InfoFile = "deepgo_run.json"

// The tags of the run-directory contract. DeepSpeed's engine writes the
// Train/Samples ones (the elapsed times only with wall_clock_breakdown or the
// flops profiler); deepgo adds Train/deepgo and, where a GPU driver answers,
// Train/GPU. Every value is per optimizer step. The x value a value is
// written at (csv_monitor's step column, tensorboard's step) is XAxis.X:
// DeepSpeed's global_samples for the Train/Samples tags, the global
// optimizer step (1-based) for the others.
const (
	TagLoss             = "Train/Samples/train_loss"
	TagLR               = "Train/Samples/lr"
	TagLossScale        = "Train/Samples/loss_scale"
	TagForwardMS        = "Train/Samples/elapsed_time_ms_forward"
	TagBackwardMS       = "Train/Samples/elapsed_time_ms_backward"
	TagBackwardInnerMS  = "Train/Samples/elapsed_time_ms_backward_inner"
	TagBackwardReduceMS = "Train/Samples/elapsed_time_ms_backward_allreduce"
	TagStepMS           = "Train/Samples/elapsed_time_ms_step"
	// TagEvalLoss is an evaluation's mean loss (the engines' EvalBatch,
	// DeepSpeed's PipelineEngine.eval_batch), written at the global_samples
	// of the optimizer steps done before it: 0 for an evaluation before
	// the first step, so its series may hold step 0.
	TagEvalLoss        = "Train/Samples/eval_loss"
	TagGradNorm        = "Train/deepgo/grad_norm"
	TagSkippedSteps    = "Train/deepgo/skipped_steps"
	TagOverflow        = "Train/deepgo/overflow"
	TagTokensPerS      = "Train/deepgo/tokens_per_s"
	TagStepTimeMS      = "Train/deepgo/step_time_ms"
	TagCommTimeMS      = "Train/deepgo/comm_time_ms"
	TagOptimizerTimeMS = "Train/deepgo/optimizer_time_ms"
	TagMemoryHost      = "Train/deepgo/memory_host_bytes"
	TagMemoryDevice    = "Train/deepgo/memory_device_bytes"
	TagMemoryPeak      = "Train/deepgo/memory_peak_bytes"
	TagRSS             = "Train/deepgo/rss_bytes"
	TagNonfiniteParams = "Train/deepgo/nonfinite_params"
	// With activation_checkpointing.profile: the step's recompute time and
	// the boundary bytes kept on the device and in host memory.
	TagCheckpointRecomputeMS = "Train/deepgo/checkpoint_recompute_ms"
	TagCheckpointSavedBytes  = "Train/deepgo/checkpoint_saved_bytes"
	TagCheckpointHostBytes   = "Train/deepgo/checkpoint_saved_host_bytes"
	TagGPUMemoryUsed         = "Train/GPU/memory_used_bytes"
	TagGPUMemoryTotal        = "Train/GPU/memory_total_bytes"
	TagGPUUtilization        = "Train/GPU/utilization_pct"
	TagGPUPower              = "Train/GPU/power_w"
	TagGPUTemperature        = "Train/GPU/temperature_c"
	// SamplesPrefix starts the tags DeepSpeed logs at global_samples.
	SamplesPrefix        = "Train/Samples/"
	csvExt               = ".csv"
	csvStepHeader        = "step"
	tagSeparator         = "/"
	fileNameTagSeparator = "_"
)

// Tags lists every tag of the contract, so that a file name (which loses the
// difference between "/" and "_") maps back to its tag.
var Tags = []string{
	TagLoss, TagEvalLoss, TagLR, TagLossScale, TagForwardMS, TagBackwardMS, TagBackwardInnerMS,
	TagBackwardReduceMS, TagStepMS, TagGradNorm, TagSkippedSteps, TagOverflow,
	TagTokensPerS, TagStepTimeMS, TagCommTimeMS, TagOptimizerTimeMS, TagMemoryHost,
	TagMemoryDevice, TagMemoryPeak, TagRSS, TagNonfiniteParams, TagGPUMemoryUsed,
	TagGPUMemoryTotal, TagGPUUtilization, TagGPUPower, TagGPUTemperature,
	TagCheckpointRecomputeMS, TagCheckpointSavedBytes, TagCheckpointHostBytes,
}

// IsSamplesTag reports whether tag is one DeepSpeed logs at global_samples
// (a Train/Samples/ tag), not at the optimizer step.
func IsSamplesTag(tag string) bool { return strings.HasPrefix(tag, SamplesPrefix) }

// XAxis is how a run counts the x values of its Train/Samples tags:
// DeepSpeed's global_samples, the samples consumed so far, TrainBatchSize
// per optimizer step. lr, loss_scale and the elapsed times are written
// after the step's update has added its batch, at step × TrainBatchSize.
// train_loss depends on the engine: DeepSpeed's data-parallel engine of
// earlier releases wrote it in backward(), before the update, at (step-1) ×
// TrainBatchSize, where deepgo's data-parallel engine keeps it (DeepSpeed
// 0.19.8's writes no train_loss at all); its PipelineEngine writes it once
// train_batch's step has run, at step × TrainBatchSize like lr
// (LossAfterStep). eval_loss goes at the samples of the steps done before
// the evaluation, step × TrainBatchSize with step 0 allowed (an evaluation
// before training). deepgo's own tags (Train/deepgo, Train/GPU) go at the
// step.
type XAxis struct {
	TrainBatchSize int64
	LossAfterStep  bool
}

// X is the x value step's value of tag is written at.
func (a XAxis) X(tag string, step int64) int64 {
	switch {
	case !IsSamplesTag(tag):
		return step
	case tag == TagLoss && !a.LossAfterStep:
		return (step - 1) * a.TrainBatchSize
	}
	return step * a.TrainBatchSize
}

// Step inverts X: the optimizer step whose value of tag is written at x.
// An x that is not a multiple of TrainBatchSize, or that maps to a step
// below 1, is an error.
func (a XAxis) Step(tag string, x int64) (int64, error) {
	if !IsSamplesTag(tag) {
		return x, nil
	}
	if a.TrainBatchSize < 1 {
		return 0, fmt.Errorf("train_batch_size %d: want >= 1", a.TrainBatchSize)
	}
	if x%a.TrainBatchSize != 0 {
		return 0, fmt.Errorf("step %d: not a multiple of train_batch_size %d (want global_samples, as DeepSpeed writes %s)", x, a.TrainBatchSize, tag)
	}
	step := x / a.TrainBatchSize
	if tag == TagLoss && !a.LossAfterStep {
		step++
	}
	if step < 1 && (tag != TagEvalLoss || step < 0) {
		return 0, fmt.Errorf("step %d: global_samples %d is before the first step for %s (train_batch_size %d)", x, x, tag, a.TrainBatchSize)
	}
	return step, nil
}

// FileName is the CSV file name DeepSpeed's csv_monitor gives a tag: "/" and
// " " become "_", plus ".csv".
func FileName(tag string) string {
	return strings.NewReplacer(tagSeparator, fileNameTagSeparator, " ", fileNameTagSeparator).Replace(tag) + csvExt
}

// Header is the value column's header csv_monitor writes for a tag: its last
// "/" component.
func Header(tag string) string {
	return tag[strings.LastIndex(tag, tagSeparator)+1:]
}

// tagOfFile maps a CSV file name back to its tag: a contract tag when one has
// that file name, else the file's stem (a tag this package does not know).
func tagOfFile(name string) string {
	for _, t := range Tags {
		if FileName(t) == name {
			return t
		}
	}
	return strings.TrimSuffix(name, csvExt)
}
