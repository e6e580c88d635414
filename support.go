package deepgo

import (
	"errors"
	"fmt"

	"github.com/deepgo-ml/deepgo/config"
)

// Unsupported reports every key of cfg that deepgo cannot train yet, as
// one error per key joined (nil when there is none): ZeRO++
// (zero_quantized_nontrainable_weights; hpZ, zero_hpz_partition_size > 1,
// with offload_param at stage 3; qwZ, zero_quantized_weights, and hpZ
// otherwise are supported, and qgZ, zero_quantized_gradients, loads with a
// warning that it has no effect), MiCS
// (mics_shard_size), apex amp, and Ulysses sequence_parallel_size > 1
// with megatron_sequence_parallel (Megatron-DeepSpeed refuses that pair
// too). Initialize refuses each of
// these with the same words; deepgo config check reports them all before
// a job is submitted, as DeepSpeed would load such a config. The errors
// carry no prefix: each caller says who refuses.
func Unsupported(cfg *config.Config) error {
	z := cfg.ZeroOptimization
	var errs []error
	ns := func(format string, a ...any) {
		errs = append(errs, fmt.Errorf(format+": not supported yet", a...))
	}
	if z.ZeroQuantizedNontrainableWeights && z.Stage == 3 {
		ns("zero_optimization.zero_quantized_nontrainable_weights (ZeRO++)")
	}
	if h := z.ZeroHPZPartitionSize; h > 1 && z.Stage == 3 && z.OffloadParam != nil && z.OffloadParam.Device != "none" {
		ns("zero_optimization.zero_hpz_partition_size %d (ZeRO++ hpZ) with zero_optimization.offload_param.device %q", h, z.OffloadParam.Device)
	}
	if z.MicsShardSize > 0 {
		ns("zero_optimization.mics_shard_size (MiCS)")
	}
	if cfg.AMP.Enabled() {
		ns("amp.enabled (apex)")
	}
	if sp, tp := cfg.SequenceParallelSize, cfg.TensorModelParallelSize; sp > 1 && tp > 1 && cfg.MegatronSequenceParallel {
		// Megatron-DeepSpeed refuses --ds-sequence-parallel-size > 1 with
		// --sequence-parallel: both split the sequence
		errs = append(errs, fmt.Errorf("sequence_parallel_size %d (Ulysses) with megatron_sequence_parallel (tensor_model_parallel_size %d): not supported: both split the sequence; set one of them", sp, tp))
	}
	return errors.Join(errs...)
}

// zeroPPNotes says when ZeRO++'s stage-3 keys reach no gather: every
// module with parameters is persistent (onDemand 0), so none is gathered
// on demand, the only gathers hpZ serves from secondary partitions, and
// qwZ quantizes only each module's first gather.
func zeroPPNotes(cfg *config.Config, onDemand int) []string {
	z := cfg.ZeroOptimization
	if z.Stage != 3 || onDemand > 0 {
		return nil
	}
	why := fmt.Sprintf("every module with parameters is persistent (at most stage3_param_persistence_threshold=%d elements, or model.Resident), so none is gathered on demand", z.Stage3ParamPersistenceThreshold)
	var notes []string
	if z.ZeroHPZPartitionSize > 1 {
		notes = append(notes, "zero_optimization.zero_hpz_partition_size: no effect: "+why+" and no secondary partition is kept; lower the threshold to use hpZ")
	}
	if z.ZeroQuantizedWeights {
		notes = append(notes, "zero_optimization.zero_quantized_weights: "+why+": only each module's first gather is quantized (persistent modules are re-gathered unquantized after every step, as in DeepSpeed); lower the threshold to quantize every gather")
	}
	return notes
}
