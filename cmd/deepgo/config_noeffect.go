package main

import (
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/deepgo-ml/deepgo/config"
)

// noEffect are keys deepgo loads and validates (DeepSpeed documents them)
// but neither the engine, deepgo train nor the monitor reads: a document
// setting them gets DeepSpeed's behaviour only where deepgo happens to
// match it. A key listed covers its sub-keys. Kept honest by
// TestNoEffectKeysUnread, which fails when a listed key's Go field is read
// outside package config. (flops_profiler and comms_logger are not listed:
// issue 17 adds them.)
var noEffect = map[string]string{
	"dump_state":                           "the engine state is not printed",
	"sparse_gradients":                     "gradients are always dense",
	"dataloader_drop_last":                 "deepgo has no DeepSpeed dataloader",
	"zero_allow_untested_optimizer":        "every deepgo optimizer works with ZeRO",
	"zero_force_ds_cpu_optimizer":          "deepgo's optimizers are its own",
	"seq_parallel_communication_data_type": "the Ulysses all-to-alls always exchange fp32",
	"torch_autocast":                       "no autocast: precision is fp16/bf16/fp32 for the whole model",
	"wandb":                                "nothing is sent to W&B",
	"comet":                                "nothing is sent to Comet",
	"elasticity":                           "deepgo does not run elastic training",
	"fp16.auto_cast":                       "inputs are not cast",
	"fp16.fp16_master_weights_and_grads":   "the master copy is always fp32",
	"bf16.immediate_grad_update":           "gradients are accumulated as configured by data_types.grad_accum_dtype",
	"data_types.param_dtype":               "the parameter dtype follows fp16/bf16",
	"data_types.buffer_dtype":              "models have no buffers",
	"optimizer.legacy_fusion":              "there is one fused implementation",

	"zero_optimization.contiguous_gradients":                   "gradient buckets are always contiguous",
	"zero_optimization.use_multi_rank_bucket_allreduce":        "buckets are reduced one at a time",
	"zero_optimization.allgather_partitions":                   "partitions are always all-gathered after the step",
	"zero_optimization.allgather_bucket_size":                  "the all-gather is not bucketed",
	"zero_optimization.load_from_fp32_weights":                 "Load restores the fp32 master copy when the checkpoint has it",
	"zero_optimization.elastic_checkpoint":                     "checkpoints are not elastic",
	"zero_optimization.stage3_model_persistence_threshold":     "only the per-parameter persistence threshold is used",
	"zero_optimization.stage3_module_granularity_threshold":    "modules are never merged into leaves",
	"zero_optimization.stage3_use_all_reduce_for_fetch_params": "parameters are fetched by all-gather",
	"zero_optimization.stage3_allgather_sequential":            "the all-gather order is fixed",
	"zero_optimization.ignore_unused_parameters":               "every parameter must take part (the module-order check)",
	"zero_optimization.legacy_stage1":                          "there is one stage-1 implementation",
	"zero_optimization.round_robin_gradients":                  "gradients are partitioned by contiguous ranges",
	"zero_optimization.leaf_module":                            "modules are never merged into leaves",
	"zero_optimization.offload_optimizer.fast_init":            "only used by NVMe offload (not supported)",
	"zero_optimization.offload_optimizer.super_offload":        "not implemented",
	"zero_optimization.offload_optimizer.cpuadam_cores_perc":   "the optimizer uses the engine's thread pool",

	"checkpoint.tag_validation":           "tags are always compared across ranks and a mismatch fails every rank (DeepSpeed's \"Fail\"): under \"Warn\" or \"Ignore\" the ranks would write one checkpoint under several tags",
	"checkpoint.load_universal":           "universal checkpoints are not read",
	"checkpoint.use_node_local_storage":   "every rank writes under save_dir",
	"checkpoint.parallel_write":           "the writer layout is deepgo's own",
	"checkpoint.checkpoint_serialization": "deepgo writes safetensors",
	// checkpoint.writer.decoupled has effect: deepgo train saves in the
	// background (Trainer.SaveAsync)
	"checkpoint.writer.type":             "deepgo writes its own safetensors files (package checkpoint)",
	"checkpoint.writer.io_buffer_size":   "files are written through the OS page cache and synced, with no I/O buffer of deepgo's",
	"checkpoint.writer.io_buffer_double": "files are written through the OS page cache and synced, with no I/O buffer of deepgo's",
	"checkpoint.writer.show_statistics":  "the writer prints no statistics (examples/bench-ckpt measures saves)",
	"checkpoint.writer.data_parallel":    "every data-parallel rank writes its own part (TP rank 0 of each under tensor parallelism); there is no writer subset per replica, socket or machine",
	"checkpoint.writer.io_multiplier":    "each rank writes its files with one writer",

	"pipeline.seed_layers":                            "layers are initialised by the model, not seeded per layer",
	"pipeline.pipe_partitioned":                       "activations cross stages whole: there is no tensor-parallel group to split them over",
	"pipeline.grad_partitioned":                       "gradients cross stages whole: there is no tensor-parallel group to split them over",
	"pipeline.use_reentrant":                          "checkpointed blocks recompute explicitly; there is no autograd to re-enter",
	"sequence_parallel.gradient_checkpointing_kwargs": "activation checkpointing takes no kwargs",
}

// removedByDeepSpeed are the recognised sections DeepSpeed itself has
// removed: 0.19.8 refuses a config that holds one
// (runtime/config.py _REMOVED_TOP_LEVEL_CONFIG_KEYS), saying what a
// leftover block would have meant. deepgo keeps loading them (Config.Other)
// so that older configs run, and its note says so.
var removedByDeepSpeed = map[string]string{
	"compression_training":   "the model trains unquantized and unpruned",
	"quantize_training":      "the model trains unquantized (MoQ)",
	"eigenvalue":             "no eigenvalue-based quantization schedule",
	"sparse_attention":       "attention stays dense",
	"progressive_layer_drop": "every layer runs at every step",
	"curriculum_learning":    "the legacy top-level curriculum is not applied (data_efficiency.data_sampling.curriculum_learning is its place in DeepSpeed)",
	"nebula":                 "checkpoints are deepgo's own files",
	"graph_harvesting":       "no CUDA graph harvesting",
}

// otherWhy is the note of a recognised section deepgo keeps but does not
// model (Config.Other).
func otherWhy(key string) string {
	if why, ok := removedByDeepSpeed[key]; ok {
		return "removed from DeepSpeed (0.19.8 refuses a config holding it); deepgo loads it and ignores it: " + why
	}
	return "recognised DeepSpeed section, kept but not modelled"
}

// explainNoEffect is the line deepgo config explain adds to the
// explanation s (whose first line is the key's full path) when the key,
// or a section above it, has no effect in deepgo: the schema's doc says
// what DeepSpeed does with it, and a user reading it must not take that
// for deepgo's behaviour.
func explainNoEffect(s string) string {
	key, _, _ := strings.Cut(s, "\n")
	for k := key; k != ""; {
		if why, ok := noEffect[k]; ok {
			return fmt.Sprintf("  deepgo: no effect (%s): %s\n", k, why)
		}
		if _, ok := removedByDeepSpeed[k]; ok {
			return "  deepgo: " + otherWhy(k) + "\n"
		}
		i := strings.LastIndexByte(k, '.')
		if i < 0 {
			break
		}
		k = k[:i]
	}
	return ""
}

// noEffectKey is one key of a config document that loads but has no
// effect in deepgo, and why.
type noEffectKey struct {
	Key, Why string
}

// noEffectList lists the keys cfg's document set that have no effect in
// deepgo, sorted by key: the noEffect keys and the recognised sections kept
// verbatim (Config.Other). A key under one already listed (wandb.enabled
// under wandb) is left out: the listed one covers it.
func noEffectList(cfg *config.Config) []noEffectKey {
	found := map[string]string{}
	for p := range cfg.Explicit {
		for k := p; k != ""; {
			if why, ok := noEffect[k]; ok {
				found[p] = why
				break
			}
			i := strings.LastIndexByte(k, '.')
			if i < 0 {
				break
			}
			k = k[:i]
		}
	}
	for k := range cfg.Other {
		found[k] = otherWhy(k)
	}
	var out []noEffectKey
	for p, why := range found {
		covered := false
		for k := p; !covered; {
			i := strings.LastIndexByte(k, '.')
			if i < 0 {
				break
			}
			k = k[:i]
			_, covered = found[k]
		}
		if !covered {
			out = append(out, noEffectKey{Key: p, Why: why})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}

// noEffectKeys is noEffectList as "key: why" lines.
func noEffectKeys(cfg *config.Config) []string {
	var out []string
	for _, k := range noEffectList(cfg) {
		out = append(out, k.Key+": "+k.Why)
	}
	return out
}

// printNoEffect writes the keys of noEffectKeys under a heading.
func printNoEffect(w io.Writer, cfg *config.Config) {
	keys := noEffectKeys(cfg)
	if len(keys) == 0 {
		return
	}
	fmt.Fprintf(w, "%d key(s) load but have no effect in deepgo:\n", len(keys))
	for _, k := range keys {
		fmt.Fprintf(w, "  no effect: %s\n", k)
	}
}

// trainNoEffectNotes are deepgo train's notes on cfg's keys without effect
// ("<key>: no effect: <why>"), leaving out a key that one of said (the
// notes and warnings train prints already) names: the engine's own note on
// it says more.
func trainNoEffectNotes(cfg *config.Config, said []string) []string {
	var out []string
	for _, k := range noEffectList(cfg) {
		named := false
		for _, s := range said {
			if mentionsKey(s, k.Key) {
				named = true
				break
			}
		}
		if !named {
			out = append(out, k.Key+": no effect: "+k.Why)
		}
	}
	return out
}

// mentionsKey reports whether s names the config key (or one of its
// sub-keys) as a word of its own: wandb in "(wandb.enabled)", not in
// "wandb_x".
func mentionsKey(s, key string) bool {
	for i := 0; ; {
		j := strings.Index(s[i:], key)
		if j < 0 {
			return false
		}
		j += i
		end := j + len(key)
		before := j == 0 || !keyByte(s[j-1])
		after := end == len(s) || !keyByte(s[end]) || s[end] == '.'
		if before && after {
			return true
		}
		i = j + 1
	}
}

// keyByte reports whether b can be part of a config key path.
func keyByte(b byte) bool {
	return b == '_' || b == '.' || b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9'
}
