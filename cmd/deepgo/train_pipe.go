package main

import (
	"fmt"
	"strings"

	"github.com/deepgo-ml/deepgo"
	"github.com/deepgo-ml/deepgo/config"
)

// What deepgo train does differently with pipeline stages: the world is
// pipeline_model_parallel_size × the data-parallel ranks (--ranks counts the
// latter), the stages of one data-parallel rank read the same batches, and
// the GPT gets at least one block per virtual stage.

// pipeShape is the config's pipeline depth (pipeline_model_parallel_size
// or pipeline.stages) and virtual stages per stage:
// 1 and 1 without a pipeline or for a nil cfg (one that did not load: train
// reports that error itself).
func pipeShape(cfg *config.Config) (pp, virtual int) {
	if cfg == nil {
		return 1, 1
	}
	pp, err := deepgo.PipelineStages(cfg)
	if err != nil || pp <= 1 {
		return 1, 1 // Initialize reports the error
	}
	return pp, max(1, cfg.PipelineSchedule.VirtualStages)
}

// pipeLayers is the GPT depth for a pipeline of pp stages of virtual
// chunks each: the model's own, or one block per virtual stage when that
// is more, so that partitioning leaves no virtual stage without a module.
func pipeLayers(layers, pp, virtual int) int {
	if pp <= 1 {
		return layers
	}
	return max(layers, pp*virtual)
}

// dataRank is world rank's data-parallel rank and the data-parallel size
// on the pipe × data × model grid (model fastest, pipe outermost; the
// layout of both engines), for the sampler: every stage of a pipe and
// every TP rank draws the same windows.
func dataRank(rank, world, pp, tp int) (r, n int) {
	n = world / (pp * tp)
	return (rank / tp) % n, n
}

// pipeBanner says how the run is split: stages, data-parallel ranks per
// stage, the schedule and its virtual stages, and gas, the resolved
// gradient accumulation steps: the micro-batches of each step.
func pipeBanner(cfg *config.Config, pp, dp, gas int) string {
	v := max(1, cfg.PipelineSchedule.VirtualStages)
	return fmt.Sprintf("pipeline: %s x %s, schedule %s, %s per stage, %s per step",
		plural(pp, "stage"), plural(dp, "data-parallel rank"), cfg.PipelineSchedule.Type, plural(v, "virtual stage"), plural(gas, "micro-batch"))
}

// plural is "1 stage", "2 stages", "3 micro-batches".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	if strings.HasSuffix(noun, "ch") || strings.HasSuffix(noun, "s") {
		return fmt.Sprintf("%d %ses", n, noun)
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
