package deepgo

import (
	"context"
	"errors"
	"fmt"

	"github.com/deepgo-ml/deepgo/config"
	"github.com/deepgo-ml/deepgo/model"
	"github.com/deepgo-ml/deepgo/monitor"
	"github.com/deepgo-ml/deepgo/zero"
)

// Trainer is one rank's training engine, what Initialize returns: the
// data-parallel engine (*Engine), or the pipeline engine (*PipeEngine) when
// the config asks for pipeline stages, which runs whole batches only
// (TrainBatch, EvalBatch and Evaluate; its Forward, Backward and Step say
// they are not supported)
// and saves and loads checkpoints of the whole pipeline. A trainer loop
// needs only these methods; the concrete type offers more (a type
// assertion to *Engine reaches the ZeRO internals, the loss scaler and the
// step counters; to *PipeEngine the stage, the partition and the measured
// bubble).
//
// A Trainer's methods must be called from one goroutine (SaveDone
// excepted), and the collective ones (TrainBatch, EvalBatch, Evaluate, Step at a boundary,
// Save, SaveAsync, Load, Parameters, SaveModel) by every rank of its group in the
// same order.
//
// Cancelling a call's context stops it on every rank promptly: a rank of a
// group goes on to its next collective and, at the first one it has to
// wait in, the group fails on every rank at once, naming the rank that
// cancelled (returning early instead would leave the others waiting out
// the group's timeout). A call stopped part way leaves the group broken
// and the micro-step half done, so every later call refuses; Close the
// Trainer and resume from a checkpoint. A Trainer alone (one rank, no
// tensor parallelism) refuses a call whose context is already done before
// it changes anything.
type Trainer interface {
	// TrainBatch runs one optimizer step over gradient_accumulation_steps
	// micro-batches of this rank and returns the mean loss over the
	// micro-batches and the data-parallel ranks.
	//
	// A micro-batch is checked against train_micro_batch_size_per_gpu
	// only when its Input implements model.Sized (model.TokenBatch does).
	// Any other Input, a plain *tensor.Tensor included, is not checked:
	// the engine cannot tell which of its dimensions holds the samples,
	// and a wrong count trains on a different batch than the config says.
	TrainBatch(ctx context.Context, data []model.MicroBatch) (float64, error)
	// EvalBatch runs the forward pass over data (one or more micro-batches
	// of this rank) with no gradient and returns the mean loss over the
	// micro-batches and the data-parallel ranks (a collective), the same
	// value on every rank of the group: with pipeline stages the last
	// stage's, handed to every stage (DeepSpeed's PipelineEngine.eval_batch
	// with its defaults: reduce_output "avg", bcast_loss; len(data) is its
	// num_micro_batches, any number from 1, the same on every rank).
	//
	// It changes no parameter, gradient, optimizer state, step counter, LR
	// schedule or loss scale, nor the Timers: the next TrainBatch computes
	// what it would have without it. With csv_monitor, tensorboard or a
	// /metrics writer, rank 0 writes the loss as Train/Samples/eval_loss
	// at the global_samples of the steps done (DeepSpeed's eval_batch
	// writes it so; monitor.Monitor.ObserveEval); a writer's error is
	// returned beside the loss, which is valid all the same. Each micro-batch
	// runs forward as in training (ZeRO stage 3 gathers the parameters,
	// checkpointed segments recompute nothing, tensor and sequence
	// parallelism as configured; the pipeline under DeepSpeed's
	// InferenceSchedule, or the interleaved schedule's forward order), and
	// its activations are freed once its loss is known. The loss is the
	// model's Loss, unscaled (no fp16 loss scale).
	//
	// Sizes are checked as TrainBatch checks them: a model.Sized Input must
	// hold train_micro_batch_size_per_gpu samples. Every rank checks its
	// data and agrees with the others before any forward, so empty data, a
	// wrong size or a different number of micro-batches on any rank is an
	// error on every rank, naming the rank, with nothing run. Cancellation
	// and failures are TrainBatch's: a failure part way through the
	// forwards leaves the Trainer refusing every later call but Close.
	EvalBatch(ctx context.Context, data []model.MicroBatch) (float64, error)
	// Evaluate is EvalBatch with DeepSpeed's other eval_batch arguments
	// (EvalOptions): the outputs of the model's last module
	// (return_logits: copied to host memory the caller owns and frees,
	// with EvalResult.Free), no loss (compute_loss=False), the loss of
	// each micro-batch (reduce_output=None). Everything EvalBatch says
	// holds; with no options it returns EvalBatch's loss, bit for bit.
	// The ranks also agree on opts before any forward: options a rank
	// refuses (EvalOptions.NoLoss without Outputs, or with PerMicroBatch)
	// or different options on two ranks are an error on every rank, with
	// nothing run. An output neither a *tensor.Tensor nor a
	// model.HostCopier is a failure part way ("not supported"). See
	// EvalResult for where the outputs are under pipeline, tensor and
	// sequence parallelism.
	Evaluate(ctx context.Context, data []model.MicroBatch, opts EvalOptions) (EvalResult, error)
	// Forward runs one micro-batch through the model and returns its loss
	// on this rank (DeepSpeed's engine(batch)). Its size is checked as
	// TrainBatch checks it: only for a model.Sized Input. A Forward not
	// followed by Backward is an evaluation: it changes no parameter,
	// gradient or step counter, and the next Forward replaces it.
	Forward(ctx context.Context, mb model.MicroBatch) (float64, error)
	// Backward runs the backward pass of the last Forward.
	Backward(ctx context.Context) error
	// Step ends a micro-step; at a gradient-accumulation boundary it steps
	// the optimizer and reports the step to the config's monitors, as
	// TrainBatch does.
	Step(ctx context.Context) error
	// Save writes a checkpoint (a collective; see Engine.Save and
	// PipeEngine.Save).
	Save(ctx context.Context, dir string, opts SaveOptions) error
	// SaveAsync is Save in the background (a collective; see
	// Engine.SaveAsync and PipeEngine.SaveAsync): what involves the
	// training's groups and the copy to host memory are done when it
	// returns, the files are written while training goes on, and they are
	// Save's byte for byte. It returns the previous background save's
	// error if that one failed. WaitSave, the next Save or SaveAsync, Load
	// and Close wait for the save in flight and report its failure, on
	// every rank alike.
	SaveAsync(ctx context.Context, dir string, opts SaveOptions) error
	// WaitSave waits for the background save in flight, if any, and
	// returns its error (not a collective).
	WaitSave() error
	// SaveDone returns a channel closed once the background save in
	// flight when it is called is over (closed already when none is). It
	// alone may be called from any goroutine: a process stopping on a
	// signal waits on it so as not to cut a checkpoint short.
	SaveDone() <-chan struct{}
	// Load restores a checkpoint (a collective; see Engine.Load) and says
	// which one, with this rank's client state. A dir holding no
	// checkpoint yet (no latest file, or no folder) fails on every rank
	// with an error wrapping fs.ErrNotExist, the engine unchanged: a
	// resuming trainer tells a first run from a damaged checkpoint with
	// errors.Is. If it fails before it
	// changes the engine (a damaged or mismatched checkpoint, found while
	// reading and verifying), the engine is as it was. If it fails part
	// way, after it began installing the checkpoint (the re-gather of the
	// parameters, or ranks found to hold different replicas), the error
	// says so and every later call but Load and Close is refused, since
	// counters, schedule, loss scaler, optimizer state and parameters may
	// come from two checkpoints; a Load that succeeds (of a whole
	// checkpoint: not ModuleOnly, SkipOptimizerStates or
	// SkipLRSchedulerStates, which are refused meanwhile) makes it usable
	// again, so a caller may fall back to an older checkpoint.
	Load(ctx context.Context, dir string, opts LoadOptions) (LoadResult, error)
	// Parameters gathers the full fp32 parameters keyed by name (a
	// collective); frozen ones (model.Param.Frozen) are their
	// working-dtype values widened.
	Parameters(ctx context.Context) (map[string][]float32, error)
	// SaveModel writes the trained weights for inference or export, as
	// DeepSpeed's save_16bit_model does: every parameter of the whole
	// model, gathered over ZeRO partitions, pipeline stages and
	// tensor-parallel shards, once each under its model.Param.Name and
	// full shape, in the dtype the model computes in (fp16 or bf16 under
	// mixed precision, the rounded fp32 masters; else fp32), as one
	// safetensors file dir/opts.Name (default DefaultModelFile) that the
	// first rank writes atomically, creating dir. It is a collective: every
	// rank must call it, and every rank returns the writer's error. At
	// ZeRO stage 3 it needs
	// zero_optimization.stage3_gather_16bit_weights_on_model_save true
	// and otherwise writes nothing and returns an error wrapping
	// ErrModelNotGathered, as DeepSpeed saves nothing then. Unlike Save,
	// it keeps no optimizer state: the file cannot resume training.
	SaveModel(ctx context.Context, dir string, opts SaveModelOptions) error
	// BatchSizes is the resolved batch triad and the data-parallel size
	// it was resolved for (config.BatchSizes: TrainBatchSize, MicroBatch,
	// GradAccum, DataParallel, in that order).
	BatchSizes() config.BatchSizes
	// GlobalSteps counts optimizer steps, skipped ones included.
	GlobalSteps() int
	// LR is the learning rate the next optimizer step uses. With a
	// DeepSpeed schedule this follows DeepSpeed: WarmupLR and WarmupDecayLR
	// start at warmup_min_lr (default 0), and the first two steps both use
	// it; WarmupCosineLR's first step uses 0 (DeepSpeed's scheduler writes
	// 0 before it has stepped), so that step leaves the weights unchanged,
	// and its second uses warmup_min_ratio × lr. Without a scheduler it is
	// the optimizer's lr.
	LR() float64
	// LossScale is the current loss scale (1 without fp16).
	LossScale() float64
	// Memory reports this rank's bytes by category.
	Memory() zero.Memory
	// Timers returns the cumulative wall-clock split.
	Timers() Timers
	// Notes lists what the engine did differently from what the config's
	// words alone suggest, for the trainer to log.
	Notes() []string
	// Monitor is the monitor built from the config's csv_monitor,
	// tensorboard and wall_clock_breakdown sections (every rank has one;
	// rank 0 writes): its run directories and warnings, and WriteRunInfo
	// for a trainer that knows more of the run (its data's entropy floor)
	// than the deepgo_run.json the engine writes.
	Monitor() *monitor.Monitor
	// Close waits for background work (a save in flight included) and
	// releases what the engine owns.
	Close() error
}

var _ Trainer = (*Engine)(nil)

// Initialize builds the Trainer that cfg (a loaded config.Config) asks
// for, like deepspeed.initialize. It first checks cfg with cfg.Validate: a
// *Config that config.Parse returned together with errors, or one with a
// field set out of range after loading, is refused with errors naming each
// JSON path. With pipeline stages (PipelineStages) it builds a pipeline
// engine (*PipeEngine), otherwise the data-parallel ZeRO engine (*Engine;
// see its documentation for what it sets up). It copies every model.Param's
// initial value into engine memory and rebinds the Param there; the
// initial tensors stay the caller's, free to free once Initialize returns,
// except those a Param donates (model.Param.Donate), which it frees.
//
// ZeRO++ hpZ (zero_hpz_partition_size > 1) and qwZ (zero_quantized_weights)
// run at stage 3 as DeepSpeed's do (at stages 0-2 the keys are ignored with
// a config warning, as in DeepSpeed); qgZ (zero_quantized_gradients) loads
// with a warning that gradients are reduced unquantized. Not supported yet
// (an error naming the key): ZeRO++'s zero_quantized_nontrainable_weights,
// hpZ with offload_param, MiCS, apex amp, Ulysses sequence parallelism with
// Megatron's (megatron_sequence_parallel), and ZeRO stages 2-3 with
// pipeline stages. Either engine runs on the CPU backend or a device
// (WithDevice), tensor and sequence parallelism included. Tensor
// parallelism runs with either engine (WithTensorParallel; see
// TensorParallelGroups and PipeTensorParallelGroup), and so does Ulysses
// sequence parallelism (WithSequenceParallel; see SequenceParallelGroups
// and PipeSequenceParallelGroup), with tensor parallelism too
// (TensorSequenceParallelGroups).
func Initialize(ctx context.Context, cfg *config.Config, net model.Model, opts ...Option) (Trainer, error) {
	if cfg == nil {
		return nil, errors.New("deepgo.Initialize: cfg is nil")
	}
	if net == nil {
		return nil, errors.New("deepgo.Initialize: model is nil")
	}
	// a *Config that came back from config.Parse with errors holds defaults
	// in place of its bad values, and one changed in Go after loading was
	// never checked: either would train a job other than the one asked for
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("deepgo.Initialize: the config is not valid: %w", err)
	}
	var o options
	for _, f := range opts {
		f(&o)
	}
	if pp, err := PipelineStages(cfg); err != nil || pp > 1 {
		if err != nil {
			return nil, err
		}
		pe, err := newPipeEngine(ctx, cfg, net, o)
		if err != nil {
			return nil, err // a nil *PipeEngine must not become a non-nil Trainer
		}
		return pe, nil
	}
	e, err := newEngine(ctx, cfg, net, o)
	if err != nil {
		return nil, err // a nil *Engine must not become a non-nil Trainer
	}
	return e, nil
}
