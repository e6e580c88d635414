// Package config reads DeepSpeed configuration files (ds_config.json) the way
// DeepSpeed reads them, fills in the newest DeepSpeed's defaults, checks every
// value, and reports exactly what deepgo will do with each key.
//
// # Reading
//
// Load and Parse accept what DeepSpeed's loader accepts on a file path: Hjson
// (comments, trailing commas, omitted root braces, quoteless strings) with
// duplicate keys rejected (*DuplicateKeyError). Numbers follow hjson-py:
// a literal with a fraction or exponent whose value is integral and below 1e10
// in magnitude is an integer (5e8, 1.0), otherwise a float (1e-8, 1e12).
// Syntax problems are *SyntaxError, except one caused by a value written as
// an unquoted NaN or Infinity (not JSON, though Python's json.dump writes
// it), which Hjson reads as a quoteless string swallowing the rest of its
// line and a closing brace with it: each such value is then a FieldError at
// its path, in an Errors with no *Config. (Alone on its line it parses, as
// the string "NaN", and the field's own check names it.) Every other
// problem is collected into an
// Errors value (a []*FieldError naming the JSON path, the value and what is
// allowed); Parse then still returns the partial *Config so its Warnings can
// be shown, but it is not one to train on: its Validate returns those
// Errors, and deepgo.Initialize refuses it. Validate also re-checks a
// *Config whose fields a program changed after loading. Warnings are data
// (Config.Warnings); the package never prints.
//
// # Defaults, deprecated keys, unknown keys, "auto"
//
// Defaults are DeepSpeed's newest (0.19): for example gradient_clipping 1.0,
// steps_per_print unset, offload pin_memory true, bf16.check_grad_overflow true.
// Config.IsSet tells a value from the document from a default.
//
// Deprecated keys are mapped with a warning: zero_optimization.cpu_offload and
// cpu_offload_param (to offload_optimizer/offload_param {"device": "cpu"}),
// "zero_optimization": true/false (stage 1/0, with top-level allgather_size),
// the "bfloat16" section name, stage3_gather_fp16_weights_on_model_save,
// aio.thread_count (renamed intra_op_parallelism), seq_parallel_comm_data_type,
// communication_data_type "bfp16". Giving a deprecated key together with its
// replacement is an error, as in DeepSpeed. optimizer.params.max_grad_norm is
// an error (use gradient_clipping), as in DeepSpeed.
//
// Unknown keys get a warning with their path and the closest known key ("did
// you mean ..."), saying whether DeepSpeed would ignore them (top level and
// lenient sections) or reject them (schema-checked sections such as
// zero_optimization, fp16, bf16 and the monitors). In a schema-checked
// section a key at most two edits from a known one ("stgae") is an error,
// as DeepSpeed's is: taken for a misspelling, it would otherwise train with
// the default in place of the value written; farther ones there (keys of a
// newer DeepSpeed, such as paro_strategy) warn. WithStrict makes every
// unknown key an error.
// Recognised DeepSpeed sections deepgo does not use (compression_training,
// data_efficiency, hybrid_engine, compile, ...) are kept in Config.Other.
// "amp" is recognised and rejected when enabled; "elasticity" likewise.
//
// "auto" is resolved from what deepgo knows: the batch keys are inferred by
// Resolve from each other and the data-parallel size; fp16/bf16 "enabled"
// become false; gradient_clipping 1.0; reduce_bucket_size,
// stage3_prefetch_bucket_size and stage3_param_persistence_threshold become
// h², 0.9·h² and 10·h given WithModelHidden(h) (as HF Transformers does) and
// DeepSpeed's defaults otherwise; optimizer betas/eps/weight_decay take HF's
// defaults; scheduler warmup_min_lr 0 and warmup_max_lr the optimizer lr; any
// other key of a schema-checked section takes DeepSpeed's default (as DeepSpeed
// does). What cannot be resolved (e.g. optimizer lr, warmup_num_steps,
// total_num_steps) stays "auto" and is listed by path in Config.Unresolved
// with a warning; WithStrict makes those errors.
//
// # Optimizer and scheduler
//
// The "optimizer" and "scheduler" params are checked by ParseOptimizer and
// ParseScheduler, the functions optim.New and optim.NewSchedule build from,
// so Parse and deepgo.Initialize agree on them (an unresolved "auto" aside,
// which Parse leaves to the trainer unless WithStrict). Types deepgo does
// not implement (OneBitAdam, Adagrad, torch.optim classes other than SGD,
// torch lr_schedulers) are errors; unknown params are errors, as they are
// in DeepSpeed, which passes them on as keyword arguments. What DeepSpeed
// only logs (an unknown warmup_type, total_num_steps below
// warmup_num_steps, a negative scheduler learning rate such as
// warmup_max_lr) is a warning; a negative optimizer.params.lr is an error.
//
// # Batch arithmetic
//
// Config.Resolve(world, tp, pp, sp) infers the missing member of
// train_batch_size = train_micro_batch_size_per_gpu × gradient_accumulation_steps
// × data-parallel size, with data-parallel size = world / (tp × pp × sp), by
// DeepSpeed's own rules (floor divisions, then the consistency assertion), and
// returns an error showing the arithmetic when they disagree.
//
// # deepgo keys
//
// deepgo also reads keys DeepSpeed does not have (DeepSpeed would ignore them):
//
//   - tensor_model_parallel_size (default 1): tensor-parallel degree (Megatron's
//     name). pipeline_model_parallel_size (default 1): number of pipeline
//     stages. Together with sequence_parallel_size they must divide the world
//     size; the rest is data parallelism. Pipeline stages > 1 with ZeRO stage 2
//     or 3 is an error, as DeepSpeed's PipelineEngine refuses it.
//   - megatron_sequence_parallel (default false): Megatron's sequence
//     parallelism inside TP (its --sequence-parallel flag; DeepSpeed configs
//     have no key for it, and deepgo's sequence_parallel section is
//     Ulysses'): the LayerNorms and the residual stream between blocks are
//     split along the sequence over the tensor_model_parallel_size ranks,
//     all-gather and reduce-scatter replacing TP's all-reduces. The sequence
//     length must be divisible by tensor_model_parallel_size; with
//     tensor_model_parallel_size 1 it is a warning (nothing to split).
//   - pipeline_schedule: "1F1B" (default; DeepSpeed's TrainSchedule), "GPipe"
//     (all forwards, then all backwards) or "Interleaved" (Megatron's virtual
//     pipeline), written as a string or as {"type": "Interleaved",
//     "virtual_stages": N}. "Interleaved" without virtual_stages uses 2, with a
//     warning; it requires gradient_accumulation_steps to be a multiple of the
//     number of stages. Names are case-insensitive.
//   - checkpoint.zero_checkpoint (default true): each rank saves its own ZeRO
//     shard; false consolidates on rank 0. checkpoint.checkpoint_type:
//     "sharded" (default; several files per rank) or "blob" (one file per rank).
//     checkpoint.save_dir: directory checkpoints are written to ("" = the caller
//     decides). checkpoint.load_path: checkpoint to resume from (null = fresh).
//     checkpoint.keep_n_most_recent and checkpoint.num_checkpoints_to_keep: keep
//     only the N newest checkpoints (unset or 0 = keep all).
//   - sequence_parallel.enabled (default false): shard the sequence across
//     sequence_parallel_size ranks (a warning if that size is 1);
//     sequence_parallel.attention_window_size (default 0 = full attention):
//     sliding attention window in tokens;
//     sequence_parallel.gradient_checkpointing_kwargs.use_reentrant (default
//     true): reentrant activation checkpointing of the attention blocks.
//
// # Conflicts: which wins
//
// keep_n_most_recent and num_checkpoints_to_keep mean the same thing. When a
// document sets both to different values, it loads with a warning naming both
// and the larger value wins (Checkpoint.Keep): deepgo never deletes a
// checkpoint that either key asks to keep. A deprecated key and its
// replacement both set is an error (DeepSpeed's rule), so nothing silently wins.
package config
