package csrc

import (
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"

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
