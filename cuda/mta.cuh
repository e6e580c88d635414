/*
 * mta.cuh — multi-tensor apply, in the manner of apex's
 * csrc/multi_tensor_apply.cuh: one launch walks many tensors. The host fills
 * a table of (pointers, element count) per tensor plus (tensor, chunk) per
 * block, passes it BY VALUE as a kernel parameter, and each block applies an
 * op to one chunk of one tensor.
 *
 * Defines: DG_CUDA_CHUNK, DG_CU_ILP, DG_MTA_BLOCKS, MtaTable<D>, mta_apply<D>(),
 * and the op contract:
 *     __device__ void op(void *const *p, int64_t lo, int64_t hi, int64_t chunk)
 * p[d] is the tensor's pointer in list d, [lo, hi) the chunk's element range,
 * chunk the chunk's index counted over the whole call (all tensors in list
 * order, zero-size tensors have none) — reductions index their partials by it.
 *
 * NOTE [chunking constants]
 * - DG_CUDA_CHUNK = 65536 elements per block-chunk. Big enough that a block
 *   streams 128-256 KiB (launch and block start-up are amortised; 512
 *   threads x ILP 4 = 2048 elements per step, 32 steps), small enough that a
 *   4097-element tensor is one block and a 1 GiB tensor is 4096-16384 blocks
 *   spread over every SM. It is also the sum-of-squares blocking: partials
 *   are per chunk, so the result bits do not depend on how the list was cut
 *   into launches.
 * - DG_MTA_BLOCKS = 320 blocks per launch and MtaMax<D>::tensors tensors
 *   per table keep the table under the classic 4 KiB kernel-parameter limit
 *   (static_assert below), with room for the op's own parameters. CUDA 12.1+
 *   allows 32 KiB on Volta and later, but that costs launch latency on every
 *   launch and needs a driver check; 320 chunks of 64Ki elements is already
 *   20M elements (80 MB of f32) per launch, i.e. tens of microseconds of HBM
 *   traffic against a few microseconds of launch cost.
 * - A tensor that does not fit in the current launch continues in the next
 *   one: it is copied into slot 0 of the fresh table (apex does the same).
 * - Tensors are counted in uint8_t per block: MtaMax<D>::tensors <= 255.
 */
#ifndef DG_CUDA_MTA_CUH
#define DG_CUDA_MTA_CUH

#include "internal.cuh"

#define DG_CUDA_CHUNK ((int64_t)65536)
#define DG_CU_ILP 4
#define DG_MTA_BLOCKS 320

template <int D> struct MtaMax;
template <> struct MtaMax<1> {
	enum { tensors = 80 };
};
template <> struct MtaMax<2> {
	enum { tensors = 60 };
};
/* the bf16-master Adam step: param, grad, exp_avg, exp_avg_sq (optim_bf16.cu) */
template <> struct MtaMax<4> {
	enum { tensors = 40 };
};
/* the optimizer steps: param, grad, exp_avg, exp_avg_sq, copy, aux (optim.cu) */
template <> struct MtaMax<6> {
	enum { tensors = 31 };
};

template <int D> struct MtaTable {
	void *ptr[D][MtaMax<D>::tensors];
	int64_t n[MtaMax<D>::tensors];
	int64_t chunk_base[MtaMax<D>::tensors]; /* call-wide index of the tensor's first chunk */
	int32_t block_chunk[DG_MTA_BLOCKS];     /* chunk of its tensor */
	uint8_t block_tensor[DG_MTA_BLOCKS];    /* slot in this table */
};
static_assert(sizeof(MtaTable<1>) <= 3584, "table must leave room for op params in 4 KiB");
static_assert(sizeof(MtaTable<2>) <= 3584, "table must leave room for op params in 4 KiB");
static_assert(sizeof(MtaTable<4>) <= 3584, "table must leave room for op params in 4 KiB");
static_assert(sizeof(MtaTable<6>) <= 3584, "table must leave room for op params in 4 KiB");

/* __grid_constant__: the table stays in the parameter bank even though
 * blocks index it with run-time values (no copy to local memory). */
template <int D, class Op>
__global__ void __launch_bounds__(DG_CU_BLOCK) mta_kernel(const __grid_constant__ MtaTable<D> tab, const Op op)
{
	int t = tab.block_tensor[blockIdx.x];
	int64_t c = tab.block_chunk[blockIdx.x];
	int64_t lo = c * DG_CUDA_CHUNK;
	int64_t hi = min(tab.n[t], lo + DG_CUDA_CHUNK);
	void *p[D];
#pragma unroll
	for (int d = 0; d < D; d++)
		p[d] = tab.ptr[d][t];
	op(p, lo, hi, tab.chunk_base[t] + c);
}

/* mta_apply runs op over lists[0..D) (count tensors, ns[i] elements each) on
 * ctx's stream and sets *nchunks to the number of chunks (blocks) it used. */
template <int D, class Op>
dg_status mta_apply(dg_cuda_ctx *ctx, const void *const *const lists[D], const int64_t *ns, int count, const Op &op,
		    int64_t *nchunks)
{
	static_assert(MtaMax<D>::tensors <= 255, "block_tensor is a uint8_t");
	MtaTable<D> tab;
	int nt = 0, nb = 0;
	int64_t base = 0;
	for (int i = 0; i < count; i++) {
		int64_t n = ns[i];
		if (n == 0)
			continue;
		int64_t chunks = (n + DG_CUDA_CHUNK - 1) / DG_CUDA_CHUNK;
		for (int d = 0; d < D; d++)
			tab.ptr[d][nt] = (void *)lists[d][i];
		tab.n[nt] = n;
		tab.chunk_base[nt] = base;
		nt++;
		for (int64_t c = 0; c < chunks; c++) {
			tab.block_tensor[nb] = (uint8_t)(nt - 1);
			tab.block_chunk[nb] = (int32_t)c;
			nb++;
			int last = c == chunks - 1;
			if (nb == DG_MTA_BLOCKS || (last && nt == MtaMax<D>::tensors)) {
				DG_CU_LAUNCH(ctx, (mta_kernel<D, Op>), nb, DG_CU_BLOCK, tab, op);
				nb = 0;
				if (last) {
					nt = 0;
				} else { /* the tensor goes on in the next launch, from slot 0 */
					for (int d = 0; d < D; d++)
						tab.ptr[d][0] = tab.ptr[d][nt - 1];
					tab.n[0] = tab.n[nt - 1];
					tab.chunk_base[0] = tab.chunk_base[nt - 1];
					nt = 1;
				}
			}
		}
		base += chunks;
	}
	if (nb > 0) {
		DG_CU_LAUNCH(ctx, (mta_kernel<D, Op>), nb, DG_CU_BLOCK, tab, op);
	}
	if (nchunks)
		*nchunks = base;
	return DG_OK;
}

/* A thread walks its elements of [lo, hi) in steps of BLOCK*ILP (DG_FOR_STEPS);
 * within step b it owns DG_STEP_INDEX(b, k) for k = 0..ILP-1, consecutive
 * threads on consecutive elements (coalesced). Ops load all k first, then
 * compute and store, so ILP loads are in flight at once: the compiler could
 * not hoist them itself, since the stores may alias the loads. */
#define DG_FOR_STEPS(lo, hi, b) for (int64_t b = (lo); b < (hi); b += (int64_t)DG_CU_BLOCK * DG_CU_ILP)
#define DG_STEP_INDEX(b, k) ((b) + threadIdx.x + (int64_t)(k)*DG_CU_BLOCK)

#endif /* DG_CUDA_MTA_CUH */
