package config

import (
	"fmt"
	"reflect"
	"sort"
	"strings"
)

// keyInfo is one documented key of the schema.
type keyInfo struct {
	path   string
	f      *field
	parent reflect.Type
	kind   string
}

// allKeys lists every key deepgo knows, depth first, with full dotted paths.
func allKeys() []keyInfo {
	var out []keyInfo
	var rec func(prefix string, t reflect.Type, kind string)
	rec = func(prefix string, t reflect.Type, kind string) {
		s := sectionOf(t)
		for _, f := range s.fields {
			if f.only != "" && f.only != kind {
				continue
			}
			p := join(prefix, f.name)
			out = append(out, keyInfo{p, f, t, kind})
			if isSection(f.typ) {
				rec(p, base(f.typ), f.kind)
			}
		}
	}
	rec("", reflect.TypeOf(Config{}), "")
	return out
}

// deprecatedDocs explains keys deepgo maps to newer ones.
var deprecatedDocs = map[string]string{
	"bfloat16":                                                   `Legacy name of the "bf16" section; mapped to bf16 with a warning.`,
	"allgather_size":                                             `Legacy top-level key used with "zero_optimization": true; mapped to zero_optimization.allgather_bucket_size.`,
	"zero_optimization.cpu_offload":                              `true is mapped to offload_optimizer {"device": "cpu"} with a warning.`,
	"zero_optimization.cpu_offload_param":                        `true is mapped to offload_param {"device": "cpu"} with a warning.`,
	"zero_optimization.cpu_offload_use_pin_memory":               `its value is copied to pin_memory of offloads created from cpu_offload*; otherwise warned and ignored.`,
	"zero_optimization.stage3_gather_fp16_weights_on_model_save": `Renamed to stage3_gather_16bit_weights_on_model_save; mapped with a warning.`,
	"aio.thread_count":                                           `Renamed to aio.intra_op_parallelism (newest DeepSpeed silently ignores thread_count); deepgo maps it with a warning.`,
	"seq_parallel_comm_data_type":                                `Renamed to seq_parallel_communication_data_type; mapped with a warning.`,
	"optimizer.params.max_grad_norm":                             `Rejected (as DeepSpeed does): use the top-level gradient_clipping.`,
}

// autoDocs explains how deepgo resolves "auto" for a rule.
var autoDocs = map[string]string{
	"batch":    `"auto": left unset and inferred by Resolve from the other batch keys and the data-parallel size.`,
	"false":    `"auto": resolved to false (set it explicitly to enable).`,
	"gradclip": `"auto": resolved to 1.0 (HF's max_grad_norm default).`,
	"hidden2":  `"auto": hidden² with WithModelHidden (as HF), else the default.`,
	"hidden09": `"auto": 0.9·hidden² with WithModelHidden (as HF), else the default.`,
	"hidden10": `"auto": 10·hidden with WithModelHidden (as HF), else the default.`,
}

// Explain returns what a key does, its type, allowed values and default.
// key is a dotted JSON path ("zero_optimization.offload_param.device") or
// any unique suffix of one ("offload_param.device", "stage3_prefetch_bucket_size");
// an optimizer or scheduler param is named by its full path
// ("optimizer.params.betas", "scheduler.params.warmup_num_steps"), with the
// types that take it and their defaults.
func Explain(key string) (string, error) {
	key = strings.TrimSpace(key)
	if out, ok, err := explainParam(key); ok {
		return out, err
	}
	for p, d := range deprecatedDocs {
		if p == key || strings.HasSuffix(p, "."+key) {
			return p + "\n  deprecated: " + d + "\n", nil
		}
	}
	if otherSections[key] {
		return key + "\n  A DeepSpeed section deepgo recognises but does not use; kept verbatim in Config.Other.\n", nil
	}
	keys := allKeys()
	var hits []keyInfo
	for _, k := range keys {
		if k.path == key {
			hits = []keyInfo{k}
			break
		}
		if strings.HasSuffix(k.path, "."+key) {
			hits = append(hits, k)
		}
	}
	switch len(hits) {
	case 0:
		var names []string
		full := map[string]string{}
		for _, k := range keys {
			names = append(names, k.path)
			if _, dup := full[k.f.name]; !dup {
				names = append(names, k.f.name)
				full[k.f.name] = k.path
			}
		}
		msg := fmt.Sprintf("config: unknown key %q", key)
		if s := suggest(key, names); s != "" {
			if p, ok := full[s]; ok {
				s = p
			}
			msg += fmt.Sprintf("; did you mean %q?", s)
		}
		return "", fmt.Errorf("%s", msg)
	case 1:
	default:
		var ps []string
		for _, h := range hits {
			ps = append(ps, h.path)
		}
		sort.Strings(ps)
		return "", fmt.Errorf("config: %q is ambiguous: %s", key, strings.Join(ps, ", "))
	}
	k := hits[0]
	var b strings.Builder
	fmt.Fprintf(&b, "%s\n", k.path)
	if doc := fieldDocs[base(k.parent).Name()][k.f.name]; doc != "" {
		fmt.Fprintf(&b, "  %s\n", doc)
	}
	fmt.Fprintf(&b, "  allowed: %s\n", k.f.allowed())
	if d, ok := k.f.defaultValue(k.kind); ok {
		fmt.Fprintf(&b, "  default: %s\n", render(d))
	} else if isSection(k.f.typ) {
		fmt.Fprintf(&b, "  default: section defaults (see its keys)\n")
	} else {
		fmt.Fprintf(&b, "  default: unset\n")
	}
	switch {
	case k.f.deepgo || deepgoSection(k.path):
		fmt.Fprintf(&b, "  origin: deepgo extension (DeepSpeed has no such key); see package doc\n")
	default:
		origin := "DeepSpeed"
		if _, checked := checkedSections[k.parent]; checked {
			origin += " (schema-checked section: DeepSpeed rejects unknown keys here)"
		}
		fmt.Fprintf(&b, "  origin: %s\n", origin)
	}
	if a := autoDocs[k.f.auto]; a != "" {
		fmt.Fprintf(&b, "  %s\n", a)
	} else if _, checked := checkedSections[k.parent]; checked && !isSection(k.f.typ) {
		fmt.Fprintf(&b, "  \"auto\": DeepSpeed's default, as DeepSpeed does in this section.\n")
	}
	if n := extraDocs[k.path]; n != "" {
		fmt.Fprintf(&b, "  note: %s\n", n)
	}
	return b.String(), nil
}

// extraDocs adds rules that involve other keys.
var extraDocs = map[string]string{
	"checkpoint.keep_n_most_recent":                         "if num_checkpoints_to_keep is also set, the larger of the two wins (with a warning naming both).",
	"checkpoint.num_checkpoints_to_keep":                    "if keep_n_most_recent is also set, the larger of the two wins (with a warning naming both).",
	"checkpoint.writer.decoupled":                           "deepgo train with checkpoint.save_dir and decoupled true saves each checkpoint in the background (Trainer.SaveAsync): the state is copied to host memory (under tensor parallelism collected on TP rank 0) before training goes on, the files, byte for byte those of a synchronous save, are written meanwhile; each save waits for the one before, and the run's end and an interrupt (SIGINT, SIGTERM) wait for the one in flight (a second signal exits at once and loses it; latest keeps naming the one before). A Go trainer chooses Save or SaveAsync itself. The other writer keys have no effect.",
	"zero_optimization.offload_param.nvme_path":             `required when device is "nvme".`,
	"zero_optimization.offload_optimizer.nvme_path":         `required when device is "nvme".`,
	"zero_optimization.zero_hpz_partition_size":             "above 1 (ZeRO++ hpZ), stage 3 also keeps a 1/N secondary partition per group of N consecutive data-parallel ranks and gathers from it after the first gather since a step, bit-identical to plain stage 3; N must divide the data-parallel size (world / (tp × pp × sp)); modules below stage3_param_persistence_threshold stay gathered and have no secondary (deepgo.Engine.Notes says when none has one); no effect (a warning) at stages 0-2; refused with offload_param.",
	"zero_optimization.zero_quantized_weights":              "true (ZeRO++ qwZ): stage-3 gathers move int8 values with one float32 scale per group (DeepSpeed's quantizer and grouping) and dequantize into the gathered weights; masters and gradients stay exact; no effect (a warning) at stages 0-2.",
	"zero_optimization.zero_quantized_nontrainable_weights": "true is refused at stage 3 (not supported yet: deepgo keeps frozen parameters, model.Param.Frozen or deepgo train --freeze, whole on every data-parallel rank (a TP rank holds its shard) in the working dtype, neither partitioned nor quantized); no effect (a warning) at stages 0-2, as in DeepSpeed.",
	"zero_optimization.zeropp_loco_param":                   "removed from DeepSpeed (0.19.8 refuses it); loads with a warning and has no effect.",
	"zero_optimization.zero_quantized_gradients":            "no effect (a warning): gradients are reduced unquantized; DeepSpeed's qgZ quantizes them only between nodes.",
	"zero_optimization.stage":                               "stages 2 and 3 are refused with pipeline_model_parallel_size > 1, as DeepSpeed's PipelineEngine does.",
	"fp16.enabled":                                          "fp16 and bf16 cannot both be enabled.",
	"bf16.enabled":                                          "fp16 and bf16 cannot both be enabled.",
	"bf16.bf16_master_weights_and_grads":                    "true keeps the ZeRO master weights and gradient partitions in bf16 (half the model-state memory of fp32 masters); the step is DeepSpeedCPUAdam's, bit for bit: widened to fp32, updated, rounded to nearest even, so an update smaller than half a bf16 step of the weight (2^-9 to 2^-8 of its magnitude) is lost, as in DeepSpeed: at lr 1e-3 weights near 1 (LayerNorm gains) stop moving. Needs bf16.enabled, ZeRO stage 1-3, an Adam/AdamW optimizer, data_types.grad_accum_dtype bf16 or unset, and, unless bf16_optimizer_states is true, offload_optimizer cpu or nvme (the fp32 moments live on the host, as DeepSpeed requires). Without offload the step runs on the device (CUDA too, a kernel sharing the C step's math; its bit test has not run on a GPU yet). Checkpoints store masters and moments as fp32 (exact), so they load into fp32 or bf16 masters alike.",
	"bf16.bf16_optimizer_states":                            "true (with bf16_master_weights_and_grads) keeps the Adam moments in bf16 too (DeepSpeedCPUAdam fp32_optimizer_states=False); works without offload (the step on the backend, CPU or simulated device) or with offload_optimizer cpu; refused with nvme.",
	"pipeline_schedule":                                     `a string ("1F1B", "GPipe", "Interleaved") or {"type": ..., "virtual_stages": N}; "Interleaved" without virtual_stages uses 2.`,
	"train_batch_size":                                      "train_batch_size = train_micro_batch_size_per_gpu × gradient_accumulation_steps × data-parallel size (world / (tp × pp × sp)).",
	"tensor_model_parallel_size":                            "tp × pp × sequence_parallel_size must divide the world size.",
	"pipeline_model_parallel_size":                          "tp × pp × sequence_parallel_size must divide the world size.",
	"amp":                                                   "recognised; enabled=true is an error (apex is not supported).",
	"elasticity.enabled":                                    "recognised; true is an error (elastic training is not supported).",
}

// deepgoSection reports whether path lies in a section that is a deepgo
// extension as a whole (sequence_parallel): its keys are deepgo's too.
func deepgoSection(path string) bool {
	top, _, nested := strings.Cut(path, ".")
	if !nested {
		return false
	}
	f, ok := sectionOf(reflect.TypeOf(Config{})).byName[top]
	return ok && f.deepgo
}
