//go:build cuda

package cuda

/*
#include "deepgo_cuda.h"
*/
import "C"

import (
	"github.com/deepgo-ml/deepgo/backend"
	"github.com/deepgo-ml/deepgo/tensor"
)

// The Backend is a backend.VocabParallel: nn_vocab.cu's kernels on its
// stream, with the CPU's bits (no log enters), so a tensor-parallel GPT's
// logits never leave the device for the cross-entropy. An empty call (n
// == 0) does nothing.

// VocabXentMax writes each row's largest logit (backend.VocabParallel).
func (b *Backend) VocabXentMax(maxes, logits *tensor.Tensor, n, v int) error {
	if err := backend.CheckVocabXentMax(b.Device(), maxes, logits, n, v); err != nil || n == 0 {
		return err
	}
	return b.run("dg_cuda_nn_vocab_xent_max", func(ctx *C.dg_cuda_ctx) C.dg_status {
		return C.dg_cuda_nn_vocab_xent_max(ctx, fptr(maxes.Ptr()), fptr(logits.Ptr()), c64(n), c64(v))
	})
}

// VocabXentExp writes the weights, their row sums and the target logits
// (backend.VocabParallel). It waits for the stream (the target check).
func (b *Backend) VocabXentExp(logits, sums, tlogits, maxes, targets *tensor.Tensor, n, v, lo, vocab int) error {
	const op = "VocabXentExp"
	if err := backend.CheckVocabXentExp(b.Device(), logits, sums, tlogits, maxes, targets, n, v, lo, vocab); err != nil || n == 0 {
		return err
	}
	return b.runStaged("dg_cuda_nn_vocab_xent_exp", nil, backend.IDOutOfRange(op, "targets", vocab),
		func(ctx *C.dg_cuda_ctx, bad *C.int) C.dg_status {
			return C.dg_cuda_nn_vocab_xent_exp(ctx, fptr(logits.Ptr()), fptr(sums.Ptr()), fptr(tlogits.Ptr()), fptr(maxes.Ptr()),
				iptr(targets.Ptr()), c64(n), c64(v), c64(lo), c64(vocab), bad)
		})
}

// VocabXentGrad turns the weights into the gradient in place
// (backend.VocabParallel).
func (b *Backend) VocabXentGrad(logits, sums, targets *tensor.Tensor, d float32, n, v, lo int) error {
	if err := backend.CheckVocabXentGrad(b.Device(), logits, sums, targets, n, v, lo); err != nil || n == 0 {
		return err
	}
	return b.run("dg_cuda_nn_vocab_xent_grad", func(ctx *C.dg_cuda_ctx) C.dg_status {
		return C.dg_cuda_nn_vocab_xent_grad(ctx, fptr(logits.Ptr()), fptr(sums.Ptr()), iptr(targets.Ptr()), C.float(d), c64(n), c64(v), c64(lo))
	})
}

// VocabClearRows zeroes the rows of tokens another rank holds
// (backend.VocabParallel).
func (b *Backend) VocabClearRows(x, ids *tensor.Tensor, n, c, lo, v int) error {
	if err := backend.CheckVocabClearRows(b.Device(), x, ids, n, c, lo, v); err != nil || n*c == 0 {
		return err
	}
	return b.run("dg_cuda_nn_vocab_clear_rows", func(ctx *C.dg_cuda_ctx) C.dg_status {
		return C.dg_cuda_nn_vocab_clear_rows(ctx, fptr(x.Ptr()), iptr(ids.Ptr()), c64(n), c64(c), c64(lo), c64(v))
	})
}
