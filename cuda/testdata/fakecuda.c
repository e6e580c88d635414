/*
 * fakecuda.c — a stand-in libcuda.so.1 for TestDriverVersions: the CUDA
 * runtime (linked statically) dlopens libcuda.so.1 and fetches the driver's
 * entry points through cuGetProcAddress; this one offers only what the
 * runtime asks for before it compares versions, and reports the CUDA
 * version in $DEEPGO_FAKE_CUDA_DRIVER (e.g. 12020 for CUDA 12.2). With 0 it
 * offers nothing, which the runtime takes as no usable driver.
 *
 * Built by the test: cc -shared -fPIC -o DIR/libcuda.so.1 fakecuda.c
 */
#include <stdlib.h>
#include <string.h>

static int version(void)
{
	const char *v = getenv("DEEPGO_FAKE_CUDA_DRIVER");
	return v ? atoi(v) : 0;
}

int cuInit(unsigned flags)
{
	(void)flags;
	return 0;
}

int cuDriverGetVersion(int *v)
{
	*v = version();
	return 0;
}

/* cuGetProcAddress (v2 ABI): CUDA_SUCCESS = 0, CUDA_ERROR_NOT_FOUND = 500;
 * status 0 is CU_GET_PROC_ADDRESS_SUCCESS, 1 SYMBOL_NOT_FOUND */
int cuGetProcAddress_v2(const char *sym, void **fn, int cuda_version, unsigned long long flags, int *status)
{
	(void)cuda_version, (void)flags;
	*fn = NULL;
	if (version() > 0) {
		if (strcmp(sym, "cuInit") == 0)
			*fn = (void *)cuInit;
		else if (strcmp(sym, "cuDriverGetVersion") == 0)
			*fn = (void *)cuDriverGetVersion;
		else if (strcmp(sym, "cuGetProcAddress") == 0)
			*fn = (void *)cuGetProcAddress_v2;
	}
	if (status)
		*status = *fn ? 0 : 1;
	return *fn ? 0 : 500;
}
