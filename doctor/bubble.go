package doctor

import (
	"fmt"
	"math"
)

// checkBubble is §4.2's 流水线气泡率高 row against §2.2's 15% target: the
// idle share of a pipeline step, (p-1)/(v·m + p-1) for p stages, m
// micro-batches per step and v model chunks per stage (interleaved), from
// the config.
func checkBubble(in Input) (string, *Finding) {
	cfg := in.Config
	if cfg == nil {
		return "not checked: no config", nil
	}
	p := cfg.PipelineModelParallelSize
	if p <= 1 {
		return "no pipeline (pipeline_model_parallel_size 1)", nil
	}
	m := in.gradAccum()
	v := 1
	if cfg.PipelineSchedule.Type == "Interleaved" {
		v = max(cfg.PipelineSchedule.VirtualStages, 1)
	}
	bubble := bubbleShare(p, m, v)
	checked := fmt.Sprintf("%d stages, %d micro-batches per step: bubble %s (target < %s)", p, m, pct(bubble), pct(BubbleTarget))
	if bubble < BubbleTarget {
		return checked, nil
	}
	f := &Finding{Title: "pipeline bubble (流水线气泡率高)", Evidence: []string{fmt.Sprintf(
		"pipeline_model_parallel_size %d, %d micro-batches per step (gradient_accumulation_steps), %s schedule (%d chunks per stage): bubble (p-1)/(v*m+p-1) = %d/%d = %s; target < %s",
		p, m, cfg.PipelineSchedule.Type, v, p-1, v*m+p-1, pct(bubble), pct(BubbleTarget))}}
	need := int(math.Ceil(float64(p-1) * (1 - BubbleTarget) / (BubbleTarget * float64(v))))
	for bubbleShare(p, need, v) >= BubbleTarget {
		need++ // the ceiling can land exactly on the target
	}
	f.Advice = append(f.Advice, Advice{Text: fmt.Sprintf(
		"gradient_accumulation_steps %d -> %d: bubble %s; keep train_batch_size by lowering train_micro_batch_size_per_gpu (the guide's \"raise the micro-batch size\" helps only when the count of micro-batches does not fall)",
		m, need, pct(bubbleShare(p, need, v)))})
	if v == 1 {
		f.Advice = append(f.Advice, Advice{Text: fmt.Sprintf(
			"pipeline_schedule.type Interleaved with virtual_stages 2: bubble %s at %d micro-batches, for twice the stage-to-stage sends",
			pct(bubbleShare(p, m, 2)), m)})
	}
	return checked, f
}

func bubbleShare(p, m, v int) float64 {
	return float64(p-1) / float64(v*m+p-1)
}
