/*
 * nn_internal.h — what the nn_*.c kernels share: the argument checks, the
 * grain sizes, and the one-time OpenBLAS setup.
 */
#ifndef DG_NN_INTERNAL_H
#define DG_NN_INTERNAL_H

#include <math.h>
#include <string.h>

#include "dg_internal.h"
#include "dg_nn_math.h"

/* Rows handed to one thread at a time: big enough that one sgemm call per
 * part is efficient, small enough that small batches still split. */
#define DG_NN_ROW_GRAIN ((int64_t)16)
/* Channel ranges for the column reductions (bias, layernorm weights,
 * embedding rows): a multiple of 16 floats keeps parts on cache lines. */
#define DG_NN_COL_GRAIN ((int64_t)16)

/* dg_nn_blas_init pins OpenBLAS to one thread, once per process: the ctx
 * pool is the only source of parallelism, so two ranks sharing a machine
 * never oversubscribe it and a 1-thread ctx really runs on one core. */
void dg_nn_blas_init(void);

static inline int dg_nn_bad_dims(int64_t a, int64_t b) { return a < 0 || b < 0; }

#endif /* DG_NN_INTERNAL_H */
