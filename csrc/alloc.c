/* alloc.c — aligned, zeroed host buffers. */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <string.h>

#include "dg_internal.h"

dg_status dg_alloc(size_t bytes, size_t align, void **out)
{
	if (out == NULL)
		return DG_ERR_INVALID;
	*out = NULL;
	if (align < 64 || (align & (align - 1)) != 0)
		return DG_ERR_ALIGN;
	/* one byte for bytes == 0 so every call returns a distinct pointer */
	size_t sz = bytes == 0 ? 1 : bytes;
	void *p = NULL;
	if (posix_memalign(&p, align, sz) != 0 || p == NULL)
		return DG_ERR_NOMEM;
	memset(p, 0, sz);
	*out = p;
	return DG_OK;
}

void dg_free(void *p) { free(p); }
