//go:build cuda

package cuda

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/deepgo-ml/deepgo/internal/gputest"
	"github.com/stretchr/testify/require"
)

// What DeviceCount says about the driver, on any machine, GPU or not: the
// test runs itself again with a fake libcuda.so.1 (testdata/fakecuda.c,
// built here with the C compiler cgo uses) first on the loader's path, so
// the statically linked CUDA runtime meets a driver that is absent or older
// than itself. No driver is "no GPU" (0, nil); an old one is an error
// naming both versions, never "no GPU".
func TestDriverVersions(t *testing.T) {
	lib := fakeDriver(t)
	for _, tc := range []struct {
		driver string
		want   string // what the child prints
	}{
		{"0", "devices 0, no error"},
		{"12020", "driver too old: the driver supports CUDA 12.2, this build's runtime is CUDA " +
			cudaVersion(RuntimeVersion())},
	} {
		t.Run("driver"+tc.driver, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestDriverVersionsChild$", "-test.v")
			cmd.Env = append(os.Environ(), "DEEPGO_FAKE_CUDA_DRIVER="+tc.driver,
				"LD_LIBRARY_PATH="+lib+string(os.PathListSeparator)+os.Getenv("LD_LIBRARY_PATH"))
			out, err := cmd.CombinedOutput()
			require.NoError(t, err, "child\n%s", out)
			require.Contains(t, string(out), "DeviceCount: "+tc.want, "child with a fake driver %s", tc.driver)
		})
	}
}

// TestDriverVersionsChild reports DeviceCount under the fake driver; it
// does nothing in a plain run (not a skip: gpu-check fails on skips).
func TestDriverVersionsChild(t *testing.T) {
	if os.Getenv("DEEPGO_FAKE_CUDA_DRIVER") == "" {
		return
	}
	n, err := DeviceCount()
	switch {
	case errors.Is(err, ErrDriverTooOld):
		msg := err.Error()
		fmt.Printf("DeviceCount: driver too old: %s\n", msg[strings.Index(msg, "the driver supports"):])
	case err != nil:
		require.NoError(t, err, "DeviceCount")
	default:
		fmt.Printf("DeviceCount: devices %d, no error\n", n)
	}
}

// fakeDriver builds testdata/fakecuda.c as libcuda.so.1 in a temporary
// folder and returns the folder.
func fakeDriver(t *testing.T) string {
	t.Helper()
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "gcc"
	}
	if _, err := exec.LookPath(cc); err != nil {
		gputest.Unavailable(t, "no C compiler (%s) to build the fake driver: %v", cc, err)
	}
	dir := t.TempDir()
	out, err := exec.Command(cc, "-shared", "-fPIC", "-o", filepath.Join(dir, "libcuda.so.1"),
		filepath.Join("testdata", "fakecuda.c")).CombinedOutput()
	require.NoError(t, err, "building the fake driver\n%s", out)
	return dir
}

// needDevice ends t (a skip, or a failure under gpu-check: internal/gputest)
// unless device 0 can be used, saying why not.
func needDevice(t *testing.T) {
	t.Helper()
	n, err := DeviceCount()
	if err != nil {
		gputest.Unavailable(t, "no usable CUDA device: %v", err)
	} else if n == 0 {
		gputest.Unavailable(t, "no CUDA device on this machine")
	}
}
