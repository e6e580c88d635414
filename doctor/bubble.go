package doctor

import (
	"fmt"
	"math"
	"strconv"

	"github.com/deepgo-ml/deepgo/config"
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
	// the Interleaved schedule runs a multiple of p micro-batches (deepgo
	// train refuses others)
	fits := func(k int, v int) bool { return v == 1 || k%p == 0 }
	need := int(math.Ceil(float64(p-1) * (1 - BubbleTarget) / (BubbleTarget * float64(v))))
	for bubbleShare(p, need, v) >= BubbleTarget || !fits(need, v) {
		need++ // the ceiling can land exactly on the target
	}
	f.Advice = append(f.Advice, Advice{Text: accumAdvice(cfg, p, v, m, need, fits)})
	if v == 1 {
		m2 := m
		for !fits(m2, 2) {
			m2++
		}
		at := fmt.Sprintf("at %d micro-batches", m)
		if m2 != m {
			at = fmt.Sprintf("at gradient_accumulation_steps %d (a multiple of the %d stages, as Interleaved needs)", m2, p)
		}
		f.Advice = append(f.Advice, Advice{Text: fmt.Sprintf(
			"pipeline_schedule.type Interleaved with virtual_stages 2: bubble %s %s, for twice the stage-to-stage sends",
			pct(bubbleShare(p, m2, 2)), at)})
	}
	return checked, f
}

// accumAdvice is the advice to run need or more micro-batches per step
// instead of m. With the micro-batch known it names the smallest count from
// need up that splits a rank's samples per step (micro-batch × m) evenly
// (and fits the schedule), keeping train_batch_size; when none does, it
// says how much train_batch_size grows. (The guide's "raise the micro-batch
// size" helps only when the count of micro-batches does not fall.)
func accumAdvice(cfg *config.Config, p, v, m, need int, fits func(k, v int) bool) string {
	mb := cfg.TrainMicroBatchSizePerGPU
	if mb == nil || *mb < 1 {
		return fmt.Sprintf("gradient_accumulation_steps %d -> %d: bubble %s; keep train_batch_size by lowering train_micro_batch_size_per_gpu where it divides",
			m, need, pct(bubbleShare(p, need, v)))
	}
	samples := *mb * m
	for k := need; k <= samples; k++ {
		if samples%k == 0 && fits(k, v) {
			return fmt.Sprintf("gradient_accumulation_steps %d -> %d with train_micro_batch_size_per_gpu %d -> %d (the same train_batch_size): bubble %s",
				m, k, *mb, samples/k, pct(bubbleShare(p, k, v)))
		}
	}
	return fmt.Sprintf("gradient_accumulation_steps %d -> %d: bubble %s; train_batch_size grows %sx (a rank's %d samples per step, micro-batch %d × %d, do not split into %d micro-batches)",
		m, need, pct(bubbleShare(p, need, v)), strconv.FormatFloat(float64(need)/float64(m), 'g', 3, 64), samples, *mb, m, need)
}

func bubbleShare(p, m, v int) float64 {
	return float64(p-1) / float64(v*m+p-1)
}
