//go:build cuda

package cuda

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"
)

// The cuBLAS the matmuls load is named after the cuBLAS headers the library
// was compiled with (build-cuda.sh links them as build/cuda/include/cuda),
// not a fixed CUDA 13, and build-cuda.sh's link in build/cuda/lib has that
// name and loads. No GPU needed: loading cuBLAS does not touch the driver.
func TestCuBLASSoname(t *testing.T) {
	h, err := os.ReadFile(filepath.Join("..", "build", "cuda", "include", "cuda", "cublas_api.h"))
	require.NoError(t, err, "the headers build-cuda.sh compiled with")
	m := regexp.MustCompile(`(?m)^#define CUBLAS_VER_MAJOR ([0-9]+)`).FindSubmatch(h)
	require.NotNil(t, m, "no CUBLAS_VER_MAJOR in cublas_api.h")
	want := "libcublas.so." + string(m[1])
	require.Equal(t, want, CuBLASSoname(), "CuBLASSoname(): the headers say otherwise")
	require.NoError(t, loadCuBLAS(), "loading %s", want)
	require.Equal(t, want, filepath.Base(CuBLASPath()), "CuBLASPath() = %q", CuBLASPath())

}
