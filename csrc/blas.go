package csrc

/*
#include "deepgo.h"
*/
import "C"

// BLASEnv names the environment variable that chooses the BLAS of the nn
// products: unset for OpenBLAS (with the Linear layer's float32 products on
// deepgo's own AVX-512 sgemm on Intel CPUs: BLASInfo.Linear), "openblas"
// for OpenBLAS for every product, "mkl" for Intel MKL's
// libmkl_rt from the loader's search path, or the path of a libmkl_rt file
// (`make mkl` fetches one into ~/.cache/deepgo/mkl and prints its path).
// See deepgo.h, "BLAS".
const BLASEnv = "DEEPGO_BLAS"

// BLASInfo says which BLAS runs the nn products and, for OpenBLAS, with
// which kernels (see deepgo.h, "BLAS").
type BLASInfo struct {
	Library     string // "OpenBLAS", or MKL's version string
	Error       string // why BLASEnv could not be honoured ("" when it was)
	Config      string // openblas_get_config(): version, build options
	LibraryCore string // the core OpenBLAS chose when it loaded
	CPUCore     string // the best core this CPU supports ("" if unknown)
	Core        string // the core in use
	Reason      string // why that core
	Corrected   bool   // Core differs from LibraryCore
	// Linear says what runs the Linear layer's float32 products (forward,
	// input and weight gradients), and why: "deepgo AVX-512 (nn_gemm.c)", or
	// "the BLAS: " and the reason (no AVX-512, not an Intel CPU,
	// BLASEnv naming a BLAS).
	Linear string
}

// BLAS loads the BLAS that BLASEnv asks for and checks OpenBLAS's core
// against the CPU, once per process, reselecting it when the library fell
// below what the CPU supports, and reports the outcome. The nn products
// call it before their first sgemm.
func BLAS() BLASInfo {
	var in C.dg_blas_info
	C.dg_blas_get_info(&in)
	return BLASInfo{
		Library:     C.GoString(&in.library[0]),
		Error:       C.GoString(&in.error[0]),
		Config:      C.GoString(&in.config[0]),
		LibraryCore: C.GoString(&in.library_core[0]),
		CPUCore:     C.GoString(&in.cpu_core[0]),
		Core:        C.GoString(&in.core[0]),
		Reason:      C.GoString(&in.reason[0]),
		Corrected:   in.corrected != 0,
		Linear:      C.GoString(&in.linear[0]),
	}
}

// SGEMMSeconds times reps single-threaded n×n×n sgemms on random data after
// one warm-up call: 2n³·reps/seconds is the GFLOP rate.
func SGEMMSeconds(n, reps int) (float64, error) {
	var s C.double
	if err := check("dg_blas_sgemm_seconds", C.dg_blas_sgemm_seconds(C.int64_t(n), C.int64_t(reps), &s)); err != nil {
		return 0, err
	}
	return float64(s), nil
}
