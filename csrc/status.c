/* status.c — names for statuses and sizes of dtypes; pure tables. */
#include "dg_internal.h"

const char *dg_strerror(dg_status s)
{
	switch (s) {
	case DG_OK: return "ok";
	case DG_ERR_INVALID: return "invalid argument";
	case DG_ERR_NOMEM: return "out of memory";
	case DG_ERR_DTYPE: return "unsupported dtype";
	case DG_ERR_ALIGN: return "bad alignment";
	case DG_ERR_SIZE: return "size mismatch or out of range";
	case DG_ERR_UNSUPPORTED: return "unsupported";
	case DG_ERR_IO: return "i/o error";
	case DG_ERR_CUDA: return "cuda error";
	case DG_ERR_INTERNAL: return "internal error";
	}
	return "unknown status";
}

size_t dg_dtype_size(dg_dtype t)
{
	switch (t) {
	case DG_F32: return 4;
	case DG_F16: return 2;
	case DG_BF16: return 2;
	case DG_I32: return 4;
	case DG_I64: return 8;
	case DG_U8: return 1;
	case DG_BOOL: return 1;
	case DG_F64: return 8;
	}
	return 0;
}

dg_status dg_check_list(const void *const *ptrs, const int64_t *ns, int count, int64_t *total)
{
	if (count < 0)
		return DG_ERR_INVALID;
	if (count > 0 && (ptrs == NULL || ns == NULL))
		return DG_ERR_INVALID;
	int64_t sum = 0;
	for (int i = 0; i < count; i++) {
		if (ns[i] < 0 || (ns[i] > 0 && ptrs[i] == NULL))
			return DG_ERR_INVALID;
		if (ns[i] > INT64_MAX - sum)
			return DG_ERR_SIZE;
		sum += ns[i];
	}
	*total = sum;
	return DG_OK;
}
