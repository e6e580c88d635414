/* alloc.c — aligned, zeroed host buffers. */
#define _DEFAULT_SOURCE /* madvise, MADV_HUGEPAGE */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "dg_internal.h"

/* A transparent huge page on x86-64 Linux. Buffers of at least this size
 * asked for with DG_ALLOC_HUGE start on such a boundary so that the kernel
 * can back them with whole huge pages. */
#define DG_HUGE_PAGE ((size_t)2 << 20)

dg_status dg_alloc(size_t bytes, size_t align, int flags, void **out)
{
	if (out == NULL)
		return DG_ERR_INVALID;
	*out = NULL;
	if (align < 64 || (align & (align - 1)) != 0)
		return DG_ERR_ALIGN;
	if ((flags & ~DG_ALLOC_HUGE) != 0)
		return DG_ERR_INVALID;
	/* one byte for bytes == 0 so every call returns a distinct pointer */
	size_t sz = bytes == 0 ? 1 : bytes;
	int huge = (flags & DG_ALLOC_HUGE) != 0 && sz >= DG_HUGE_PAGE;
	if (huge && align < DG_HUGE_PAGE)
		align = DG_HUGE_PAGE;
	void *p = NULL;
	if (posix_memalign(&p, align, sz) != 0 || p == NULL)
		return DG_ERR_NOMEM;
#ifdef MADV_HUGEPAGE
	/* Before the first touch, or the pages are already 4 KiB ones. A
	 * streaming kernel over 4 KiB pages takes a TLB miss every 4 KiB on every
	 * stream and the hardware prefetchers stop at each page's end; the fused
	 * AdamW step runs 10-30% faster on huge pages (docs/design.md, "The cgo
	 * rule"). The advice is only advice: a kernel with THP off, or one
	 * with no huge page free, gives 4 KiB pages and nothing fails.
	 * Only the whole huge pages: a huge page for the tail of a 2.3 MiB
	 * tensor (a 768x768 float32 weight) would nearly double its memory.
	 * Two costs of the advice: under THP defrag "madvise" a fault in an
	 * advised range waits for the kernel to compact memory when no huge
	 * page is free, so a large allocation can stall under memory pressure
	 * (DEEPGO_HUGEPAGES=0 is the way out); and glibc serves buffers below
	 * its mmap threshold (raised up to 32 MiB by earlier frees) from its
	 * heap, where pages touched before keep 4 KiB until khugepaged merges
	 * them, and where the advice outlives the buffer. */
	if (huge)
		(void)madvise(p, sz & ~(DG_HUGE_PAGE - 1), MADV_HUGEPAGE);
#endif
	memset(p, 0, sz);
	*out = p;
	return DG_OK;
}

void dg_free(void *p) { free(p); }
