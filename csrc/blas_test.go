package csrc

import (
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
)

// TestBLASCoreChoice runs the check in child processes (it happens once per
// process): a forced core is used, "library" keeps the library's, and the
// default never ends below what the CPU supports.
func TestBLASCoreChoice(t *testing.T) {
	if os.Getenv("DG_BLAS_CHILD") != "" {
		b := BLAS()
		s, err := SGEMMSeconds(64, 2)
		if err != nil || s <= 0 {
			t.Fatalf("sgemm: %v s, %v", s, err)
		}
		// the parent parses this line
		t.Logf("CORE library=%s cpu=%s core=%s corrected=%v", b.LibraryCore, b.CPUCore, b.Core, b.Corrected)
		return
	}
	b := BLAS()
	if runtime.GOARCH != "amd64" || !strings.Contains(b.Config, "DYNAMIC_ARCH") {
		t.Skipf("needs a DYNAMIC_ARCH OpenBLAS on x86-64; have %q", b.Config)
	}
	child := func(env ...string) map[string]string {
		cmd := exec.Command(os.Args[0], "-test.run", "^TestBLASCoreChoice$", "-test.v")
		cmd.Env = append(os.Environ(), append([]string{"DG_BLAS_CHILD=1", "OPENBLAS_CORETYPE="}, env...)...)
		cmd.Env = dropEmpty(cmd.Env, "OPENBLAS_CORETYPE")
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s", out)
		_, line, ok := strings.Cut(string(out), "CORE ")
		require.True(t, ok, "%s", out)
		line, _, _ = strings.Cut(line, "\n")
		kv := map[string]string{}
		for _, f := range strings.Fields(line) {
			k, v, _ := strings.Cut(f, "=")
			kv[k] = v
		}
		return kv
	}
	forced := child("DEEPGO_BLAS_CORE=Haswell")
	require.Equal(t, "Haswell", forced["core"], "a forced core is used")
	kept := child("DEEPGO_BLAS_CORE=library")
	require.Equal(t, kept["library"], kept["core"], "library keeps the library's choice")
	require.Equal(t, "false", kept["corrected"])
	auto := child()
	if auto["cpu"] != "" && auto["library"] != auto["cpu"] {
		// the default replaces a lower library choice by the CPU's core;
		// a library that knows the CPU keeps its own
		require.Contains(t, []string{auto["cpu"], auto["library"]}, auto["core"])
		if auto["library"] == "Prescott" {
			require.Equal(t, auto["cpu"], auto["core"], "the generic fallback is corrected")
		}
	}
	byHand := child("OPENBLAS_CORETYPE=SkylakeX")
	require.Equal(t, "SkylakeX", byHand["core"], "OPENBLAS_CORETYPE is respected")
}

// dropEmpty removes name= (empty) entries so the child sees name unset.
func dropEmpty(env []string, name string) []string {
	out := env[:0]
	for _, e := range env {
		if e == name+"=" {
			continue
		}
		out = append(out, e)
	}
	return out
}

// TestBLASLibraryChoice runs DEEPGO_BLAS's choices in child processes: unset
// and "openblas" keep OpenBLAS, "openblas" for the Linear products too
// (unset may give them to nn_gemm.c, which then agrees with OpenBLAS to
// float32 rounding); a missing file and a library that is not MKL are
// errors naming the variable, with OpenBLAS still in place; with
// DEEPGO_TEST_MKL (the path of a libmkl_rt, as `make mkl` makes) MKL runs
// the products and agrees with OpenBLAS to float32 rounding.
func TestBLASLibraryChoice(t *testing.T) {
	if os.Getenv("DG_BLAS_LIB_CHILD") != "" {
		b := BLAS()
		x, err := NewCtx(1)
		require.NoError(t, err)
		defer x.Close()
		s, err := SGEMMSeconds(64, 1)
		require.NoError(t, err)
		require.Positive(t, s)
		// the parent parses this line
		fmt.Printf("LIB %q %q %q %s\n", b.Library, b.Error, b.Linear, sgemmProbe(t, x))
		return
	}
	child := func(blas string) (library, errMsg, linear, probe string) {
		cmd := exec.Command(os.Args[0], "-test.run", "^TestBLASLibraryChoice$")
		cmd.Env = append(os.Environ(), "DG_BLAS_LIB_CHILD=1", BLASEnv+"="+blas)
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s", out)
		_, line, ok := strings.Cut(string(out), "LIB ")
		require.True(t, ok, "%s", out)
		line, _, _ = strings.Cut(line, "\n")
		_, err = fmt.Sscanf(line, "%q %q %q %s", &library, &errMsg, &linear, &probe)
		require.NoError(t, err, "%s", line)
		return library, errMsg, linear, probe
	}
	near := func(ref, probe string) {
		var a, b [4]float32
		_, err := fmt.Sscanf(strings.ReplaceAll(ref, ",", " "), "%g %g %g %g", &a[0], &a[1], &a[2], &a[3])
		require.NoError(t, err)
		_, err = fmt.Sscanf(strings.ReplaceAll(probe, ",", " "), "%g %g %g %g", &b[0], &b[1], &b[2], &b[3])
		require.NoError(t, err)
		for i := range a {
			require.InDelta(t, a[i], b[i], 1e-4*(1+math.Abs(float64(a[i]))), "element %d", i)
		}
	}
	lib, msg, linear, ref := child("")
	require.Equal(t, "OpenBLAS", lib)
	require.Empty(t, msg)
	if linear != ownLinear {
		require.True(t, strings.HasPrefix(linear, "the BLAS: "), "unset: %q", linear)
	}
	lib, msg, blasLinear, probe := child("openblas")
	require.Equal(t, "OpenBLAS", lib)
	require.Empty(t, msg)
	require.Equal(t, "the BLAS: DEEPGO_BLAS=openblas", blasLinear)
	if linear == ownLinear {
		near(ref, probe)
	} else {
		require.Equal(t, ref, probe, "the same library, the same bits")
	}

	missing := filepath.Join(t.TempDir(), "libmkl_rt.so.3")
	lib, msg, linear2, probe := child(missing)
	require.Equal(t, "OpenBLAS", lib, "a failed load leaves OpenBLAS")
	require.Contains(t, msg, BLASEnv+"="+missing+": cannot load MKL")
	require.Equal(t, linear, linear2)
	require.Equal(t, ref, probe)
	if runtime.GOOS == "linux" {
		// a loadable library that is not MKL: libc exports no MKL service
		_, msg, _, _ = child("libc.so.6")
		require.Contains(t, msg, BLASEnv+"=libc.so.6: not Intel MKL's runtime library")
	}
	mkl := os.Getenv("DEEPGO_TEST_MKL")
	if mkl == "" {
		t.Skip("DEEPGO_TEST_MKL unset: the MKL path is not exercised (make mkl fetches it)")
	}
	lib, msg, linear, probe = child(mkl)
	require.Empty(t, msg)
	require.Contains(t, lib, "Math Kernel Library")
	require.Equal(t, "the BLAS: DEEPGO_BLAS chose MKL", linear)
	near(ref, probe)
}

// ownLinear is BLASInfo.Linear when nn_gemm.c runs the Linear products.
const ownLinear = "deepgo AVX-512 (nn_gemm.c)"

// sgemmProbe runs a 96x80x72 Linear forward through the ctx (the nn path to
// the BLAS) and prints four of its outputs, comma-separated.
func sgemmProbe(t *testing.T, x *Ctx) string {
	const n, c, oc = 96, 72, 80
	mk := func(k int, f func(i int) float32) unsafe.Pointer {
		p, err := Alloc(4*k, 64)
		require.NoError(t, err)
		s := unsafe.Slice((*float32)(p), k)
		for i := range s {
			s[i] = f(i)
		}
		return p
	}
	in := mk(n*c, func(i int) float32 { return float32(i%13)*0.1 - 0.6 })
	w := mk(oc*c, func(i int) float32 { return float32(i%7)*0.05 - 0.15 })
	out := mk(n*oc, func(int) float32 { return 0 })
	defer Free(in)
	defer Free(w)
	defer Free(out)
	require.NoError(t, x.MatmulForwardMixed(out, in, F32, w, nil, n, c, oc))
	o := unsafe.Slice((*float32)(out), n*oc)
	return fmt.Sprintf("%g,%g,%g,%g", o[0], o[777], o[n*oc/2], o[n*oc-1])
}
