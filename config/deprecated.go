package config

import "strings"

// deprecated maps deprecated and renamed keys in raw to their replacements,
// with a warning for each, before the schema walk. It mirrors DeepSpeed's
// mechanism: the old value is copied to the new key, and giving both is an error.
func (l *loader) deprecated(raw map[string]any) {
	// "bfloat16" section name -> "bf16".
	l.rename(raw, "", "bfloat16", "bf16", `section "bfloat16" is the legacy name of "bf16"`)

	// "zero_optimization": true/false -> stage 1/0, top-level allgather_size.
	if b, ok := raw["zero_optimization"].(bool); ok {
		stage := int64(0)
		if b {
			stage = 1
		}
		z := map[string]any{"stage": stage}
		if ag, ok := raw["allgather_size"]; ok {
			z["allgather_bucket_size"] = ag
			delete(raw, "allgather_size")
		}
		raw["zero_optimization"] = z
		l.warn("zero_optimization", `boolean form is deprecated; mapped to {"stage": %d}`, stage)
	}
	if z, ok := raw["zero_optimization"].(map[string]any); ok {
		l.zeroDeprecated(z)
	}

	if f, ok := raw["fp16"].(map[string]any); ok {
		// DeepSpeedFP16Config's field name; the documented key is its alias
		l.fieldName(f, "fp16", "master_weights_and_grads", "fp16_master_weights_and_grads")
	}

	if a, ok := raw["aio"].(map[string]any); ok {
		l.rename(a, "aio", "thread_count", "intra_op_parallelism",
			`renamed to intra_op_parallelism in DeepSpeed (Feb 2025), which now silently ignores thread_count; deepgo maps it`)
	}
	l.rename(raw, "", "seq_parallel_comm_data_type", "seq_parallel_communication_data_type",
		"renamed to seq_parallel_communication_data_type")

	if s, ok := raw["communication_data_type"].(string); ok && strings.EqualFold(s, "bfp16") {
		raw["communication_data_type"] = "bf16"
		l.warn("communication_data_type", `"bfp16" is the legacy spelling of "bf16" (newest DeepSpeed rejects it); mapped to "bf16"`)
	}

	// pipeline_schedule shorthand: a string is {"type": string}.
	if s, ok := raw["pipeline_schedule"].(string); ok {
		raw["pipeline_schedule"] = map[string]any{"type": s}
	}
}

func (l *loader) zeroDeprecated(z map[string]any) {
	const zp = "zero_optimization"
	offload := func(old, neu string) {
		v, ok := z[old]
		if !ok {
			return
		}
		delete(z, old)
		b, isBool := v.(bool)
		if !isBool {
			l.fail(zp+"."+old, v, "true or false (deprecated; use "+neu+")", "")
			return
		}
		if !b {
			l.warn(zp+"."+old, `deprecated; false means no offload (use %s)`, neu)
			return
		}
		if _, both := z[neu]; both {
			l.fail(zp+"."+old, v, "only one of "+old+" and "+neu, "the deprecated key and its replacement are both set")
			return
		}
		m := map[string]any{"device": "cpu"}
		if pin, ok := z["cpu_offload_use_pin_memory"].(bool); ok {
			m["pin_memory"] = pin
		}
		z[neu] = m
		l.warn(zp+"."+old, `deprecated; mapped to %s: {"device": "cpu"}`, neu)
	}
	offload("cpu_offload", "offload_optimizer")
	offload("cpu_offload_param", "offload_param")
	if _, ok := z["cpu_offload_use_pin_memory"]; ok {
		delete(z, "cpu_offload_use_pin_memory")
		l.warn(zp+".cpu_offload_use_pin_memory", "deprecated; use pin_memory inside offload_optimizer/offload_param")
	}
	l.rename(z, zp, "stage3_gather_fp16_weights_on_model_save", "stage3_gather_16bit_weights_on_model_save",
		"renamed to stage3_gather_16bit_weights_on_model_save")
	// DeepSpeed's pydantic model names these fields without the stage3_
	// prefix and gives the prefixed key as the alias; with populate_by_name
	// it accepts either spelling, so deepgo reads both (no warning: neither
	// is deprecated). Both at once is an error: which one DeepSpeed keeps is
	// pydantic's detail, not the user's intent.
	for _, name := range stage3FieldNames {
		l.fieldName(z, zp, name, "stage3_"+name)
	}
}

// fieldName moves m[name], a pydantic field name DeepSpeed accepts beside
// its alias (the documented key), to m[alias], silently; both set is an
// error.
func (l *loader) fieldName(m map[string]any, path, name, alias string) {
	l.move(m, path, name, alias, "DeepSpeed's field name and its alias are the same setting")
}

// move moves m[from] to m[to] and reports whether it did; both set is an
// error (why says why they clash) and moves nothing.
func (l *loader) move(m map[string]any, path, from, to, why string) bool {
	v, ok := m[from]
	if !ok {
		return false
	}
	delete(m, from)
	if _, both := m[to]; both {
		l.fail(join(path, from), v, "only one of "+from+" and "+to, why)
		return false
	}
	m[to] = v
	return true
}

// stage3FieldNames are DeepSpeedZeroConfig's field names whose alias (the
// documented key) is "stage3_" + the name.
var stage3FieldNames = []string{
	"prefetch_bucket_size", "param_persistence_threshold", "model_persistence_threshold",
	"max_live_parameters", "max_reuse_distance", "gather_16bit_weights_on_model_save",
	"module_granularity_threshold", "use_all_reduce_for_fetch_params", "allgather_sequential",
}

// rename moves m[old] to m[neu] with a warning; both set is an error.
func (l *loader) rename(m map[string]any, path, old, neu, why string) {
	if l.move(m, path, old, neu, "the deprecated key and its replacement are both set") {
		l.warn(join(path, old), "deprecated: %s; mapped to %s", why, join(path, neu))
	}
}
