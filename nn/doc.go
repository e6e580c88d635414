// Package nn holds deepgo's reference layers: Linear, Embedding, LayerNorm,
// GELU, causal multi-head self-attention (optionally windowed), pre-LN
// transformer blocks, softmax cross-entropy, and a GPT-2 style model built
// from them, with activation checkpointing.
//
// Every layer is a forward/backward pair in llm.c's style (shapes in the
// comments, explicit buffers, no autograd) that computes through a
// backend.NN, the layer kernels of a compute backend: on the CPU backend the
// C core (csrc/nn_*.c) on the backend's thread pool, the matrix products on
// OpenBLAS sgemm kept single-threaded per call, the pool splitting the rows.
// Parameters and their gradients may be float32, float16 or bfloat16;
// activations and the arithmetic are float32 (a half weight is widened
// inside the kernel, a half gradient gets one rounding per element per
// call). Every call checks the parameters bound to it before calling the
// backend. GPT's modules take the backend an engine hands them in their
// context (backend.FromContext), else the one given to UseBackend.
//
// Parameters are declared, not owned: a layer lists its parameters (Param:
// name, shape) and whoever trains the model binds each one to a value and a
// gradient tensor, typically views of the flat buffers a ZeRO engine
// partitions (see Bind and NewParamBuffers). Backward passes accumulate into
// the gradients (+=), so a parameter used twice — the tied token embedding
// and output head of GPT — receives the sum of both uses, and gradient
// accumulation over micro-batches is the caller zeroing the gradients only
// at a boundary.
//
// Tensor parallelism is Megatron's (GPTConfig.TP, tp.go): Linear knows
// its in/out features, so a column or row shard is a Linear with Out/world
// or In/world features; attention takes its heads as a parameter, so a
// head shard is an Attention with Heads/world heads; the vocabulary is cut
// across the ranks too (tp_vocab.go), and Megatron's sequence parallelism
// is an option (tp_seq.go). The ranks of a tensor-parallel group must be
// given the same micro-batches: each computes its shard of the same tokens.
//
// Mixture of experts is DeepSpeed's MoE layer at expert parallel size 1
// (GPTConfig.MoE, moe_*.go): the TopKGate's routing in Go (Route, golden
// against DeepSpeed's top1gating/top2gating), GPT-MLP experts, PR-MoE's
// residual, and the aux loss in the GPT's Loss.
package nn
