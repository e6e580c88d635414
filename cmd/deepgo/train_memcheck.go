package main

import (
	"fmt"

	"github.com/deepgo-ml/deepgo/config"
	"github.com/deepgo-ml/deepgo/nn"
)

// trainShape is what checkMicroBatchMemory needs of a deepgo train run.
type trainShape struct {
	gpt        nn.GPTConfig // the model, Layers for the whole pipeline
	world      int          // ranks in all
	inProc     int          // ranks in this process: world, or 1 in a launched job
	tp, pp, sp int
	device     string // cpu, sim or cuda: cpu and sim keep activations in host memory
	flagMicro  int    // --micro-batch, for a config without a batch size
	// flagMicroGiven: --micro-batch was on the command line, so it also
	// fills a micro-batch train_batch_size would fix (fillTrainerAutos)
	flagMicroGiven bool
}

// microBatchFrom is the micro-batch each rank trains on as the engine
// resolves it (fillTrainerAutos puts --micro-batch in a config giving
// neither batch size), the config key or flag it comes from, and the
// gradient accumulation steps; ok is false when the batch triad does not
// resolve (Initialize reports that).
func microBatchFrom(cfg *config.Config, s trainShape) (b config.BatchSizes, from string, ok bool) {
	c := *cfg
	from = "train_micro_batch_size_per_gpu"
	switch {
	case c.TrainMicroBatchSizePerGPU == nil && (c.TrainBatchSize == nil || s.flagMicroGiven):
		mb := s.flagMicro
		c.TrainMicroBatchSizePerGPU = &mb
		from = "--micro-batch"
	case c.TrainMicroBatchSizePerGPU == nil:
		from = "train_batch_size"
	}
	b, err := c.Resolve(s.world, s.tp, s.pp, s.sp)
	return b, from, err == nil && b.MicroBatch > 0
}

// sampleBytes is a lower bound of the memory this process needs per
// sequence of the micro-batch: on each in-process rank, the sampler's index
// and the input and target ids (int32) of each of the step's
// gradient-accumulation micro-batches, made before the step; on a host
// device also the residual stream every block of its stage keeps for
// backward (checkpointed or not), and without a pipeline the logits, both
// float32 and counted over the rank's share of the tokens (T / (tp × sp)).
// The attention scores, MLP activations, gradients and model states come
// on top: the true need is several times this.
func sampleBytes(s trainShape, gas int) int64 {
	g := s.gpt
	T := int64(g.SeqLen)
	perRank := int64(gas) * (8 + 2*4*T)
	if s.device == "cpu" || s.device == "sim" {
		tokens := max(1, T/int64(max(1, s.tp*s.sp)))
		width := int64(g.Width) * int64(max(1, g.Layers/max(1, s.pp)))
		if s.pp <= 1 {
			width += int64(g.Vocab)
		}
		perRank += tokens * 4 * width
	}
	return perRank * int64(max(1, s.inProc))
}

// checkMicroBatchMemory refuses, before any rank starts, a micro-batch
// whose buffers alone (sampleBytes, a lower bound) exceed total, the
// machine's memory: such a run would only end in an out-of-memory crash
// while making its first batch.
func checkMicroBatchMemory(cfg *config.Config, s trainShape, total uint64) error {
	b, from, ok := microBatchFrom(cfg, s)
	if !ok || total == 0 {
		return nil
	}
	per := sampleBytes(s, b.GradAccum)
	need := float64(per) * float64(b.MicroBatch)
	if need <= float64(total) {
		return nil
	}
	value := fmt.Sprint(b.MicroBatch)
	switch from {
	case "train_batch_size":
		value = fmt.Sprintf("%d (a micro-batch of %d per rank: %d x %d accumulation steps x %d data-parallel ranks)", b.TrainBatchSize, b.MicroBatch, b.MicroBatch, b.GradAccum, b.DataParallel)
	case "--micro-batch":
		from = "--micro-batch (the config gives no batch size)"
	}
	where := "token buffers"
	if s.device == "cpu" || s.device == "sim" {
		where = "token buffers and activations"
	}
	return fmt.Errorf("%s %s: a micro-batch of %d sequences x %d tokens needs at least %s of %s on %d in-process rank(s), more than this machine's %s of memory; allowed: a micro-batch of at most %d here",
		from, value, b.MicroBatch, s.gpt.SeqLen, gibBytes(need), where, max(1, s.inProc), gibBytes(float64(total)), total/uint64(per))
}

// gibBytes writes n bytes in GiB and in bytes.
func gibBytes(n float64) string { return fmt.Sprintf("%.1f GiB (%.0f bytes)", n/(1<<30), n) }
