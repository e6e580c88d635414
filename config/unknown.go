package config

import (
	"fmt"
	"reflect"
	"strings"
)

// otherSections are top-level DeepSpeed sections and keys deepgo recognises
// but does not model; they are kept verbatim in Config.Other.
var otherSections = map[string]bool{
	"compression_training": true, "quantize_training": true, "data_efficiency": true,
	"curriculum_learning": true, "progressive_layer_drop": true, "eigenvalue": true,
	"sparse_attention": true, "autotuning": true, "hybrid_engine": true,
	"tensor_parallel": true, "expert_parallel": true, "compile": true, "nebula": true,
	"datastates_ckpt": true, "weight_quantization": true, "timers": true,
	"disable_allgather": true, "vocabulary_size": true, "data_parallel_size": true,
	"log_level": true, "use_data_before_expert_parallelism": true,
	"graph_harvesting": true, "managed_gradient_accumulation": true,
	"deepcompile": true, "fp8": true, "moe": true,
	"aws_s3": true, "checkpoint_engine": true,
}

// checkedSections are the section types DeepSpeed validates with pydantic
// (extra="forbid"): DeepSpeed rejects unknown keys inside them.
var checkedSections = map[reflect.Type]string{
	reflect.TypeOf(ZeroConfig{}):  "zero_optimization",
	reflect.TypeOf(Offload{}):     "offload config",
	reflect.TypeOf(LeafModule{}):  "leaf_module",
	reflect.TypeOf(FP16{}):        "fp16",
	reflect.TypeOf(BF16{}):        "bf16",
	reflect.TypeOf(Monitor{}):     "monitor",
	reflect.TypeOf(Wandb{}):       "wandb",
	reflect.TypeOf(Comet{}):       "comet",
	reflect.TypeOf(CommsLogger{}): "comms_logger",
}

// unknown reports a key that is not part of its section.
func (l *loader) unknown(p string, v any, s *section, kind string) {
	cands := s.names(kind)
	if s.typ == reflect.TypeOf(Config{}) {
		for k := range otherSections {
			cands = append(cands, k)
		}
	}
	key := p[strings.LastIndex(p, ".")+1:]
	hint, typo := "", false
	if sug := suggest(key, cands); sug != "" {
		hint = fmt.Sprintf("; did you mean %q?", sug)
		typo = levenshtein(strings.ToLower(key), strings.ToLower(sug)) <= maxTypoEdits
	}
	ds := "DeepSpeed ignores it"
	_, checked := checkedSections[s.typ]
	if checked {
		ds = "DeepSpeed rejects it (extra keys are not permitted in this section)"
	}
	switch {
	case checked && typo:
		// "stgae": 2 would otherwise train at the default stage 0
		l.fail(p, v, "a known key"+hint, "unknown key, a misspelling ("+ds+")")
	case l.o.strict:
		l.fail(p, v, "a known key"+hint, "unknown key ("+ds+"); strict mode")
	default:
		l.warn(p, "unknown key, ignored (%s)%s", ds, hint)
	}
}

// maxTypoEdits is how close (in edits) an unknown key of a section DeepSpeed
// validates must be to a known one to be taken for its misspelling, an
// error: DeepSpeed rejects the document, and going on would train with the
// default in place of the value the user wrote. Farther keys there (keys of
// newer DeepSpeed versions deepgo does not model, such as paro_strategy and
// sdma_allgather) are warnings: the DeepSpeed that knows them accepts the
// document.
const maxTypoEdits = 2

// suggest returns the candidate closest to key, or "" if none is close.
func suggest(key string, cands []string) string {
	best, bestD := "", 1<<30
	lk := strings.ToLower(key)
	for _, c := range cands {
		d := levenshtein(lk, strings.ToLower(c))
		if d < bestD || d == bestD && c < best {
			best, bestD = c, d
		}
	}
	limit := len(key)/3 + 1
	if limit < 2 {
		limit = 2
	}
	if bestD <= limit {
		return best
	}
	return ""
}

func levenshtein(a, b string) int {
	if len(a) > 200 || len(b) > 200 {
		return 1 << 20
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			c := prev[j-1]
			if a[i-1] != b[j-1] {
				c++
			}
			c = min(c, prev[j]+1, cur[j-1]+1)
			cur[j] = c
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

func equalFold(a, b string) bool { return strings.EqualFold(a, b) }

func sprintf(format string, args ...any) string {
	if len(args) == 0 {
		return format
	}
	return fmt.Sprintf(format, args...)
}
