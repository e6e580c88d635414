/*
 * dg_cuda_err.h — keeping the CUDA runtime's per-thread "last error" clean,
 * for the .cu files and for package nccl's shim (plain C).
 *
 * Every runtime call that fails also records its error in a per-thread slot,
 * which cudaGetLastError returns (and resets) and which a kernel launch is
 * checked with. Nothing resets the slot when the code handles the failure
 * itself (a failed cudaMalloc returned as an error, cudaErrorNotReady from
 * a stream or event query, which is an answer, not a failure). And Go runs
 * goroutines on shared OS threads, so the next launch checked on that
 * thread, from any goroutine, would report the old error. Hence: the slot is
 * cleared after every error handled here (dg_cu_handled, dg_cu_query), and
 * before every launch (DG_CU_LAUNCH, internal.cuh).
 *
 * Clearing never hides a real fault: an error that corrupts the context (an
 * illegal address in a kernel, ...) is sticky, so cudaGetLastError cannot
 * reset it and every later call reports it again.
 */
#ifndef DG_CUDA_ERR_H
#define DG_CUDA_ERR_H

#include <cuda_runtime_api.h>

/* dg_cu_handled returns e after clearing the thread's last error when e is
 * one: the caller returns or records e itself. */
static inline cudaError_t dg_cu_handled(cudaError_t e)
{
	if (e != cudaSuccess)
		(void)cudaGetLastError();
	return e;
}

/* dg_cu_query turns the result e of cudaStreamQuery or cudaEventQuery into
 * *done (1: all work complete) and an error: cudaErrorNotReady is *done = 0
 * and cudaSuccess, with the slot cleared. */
static inline cudaError_t dg_cu_query(cudaError_t e, int *done)
{
	*done = e == cudaSuccess;
	if (e == cudaErrorNotReady) {
		(void)cudaGetLastError();
		return cudaSuccess;
	}
	return dg_cu_handled(e);
}

#endif /* DG_CUDA_ERR_H */
