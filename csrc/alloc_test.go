package csrc

import (
	"bufio"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// anonHugeKB returns the AnonHugePages of the mapping holding addr, from
// /proc/self/smaps.
func anonHugeKB(t *testing.T, addr uintptr) int {
	f, err := os.Open("/proc/self/smaps")
	require.NoError(t, err)
	defer f.Close()
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 {
			continue
		}
		if lo, hi, ok := strings.Cut(fields[0], "-"); ok && !strings.HasSuffix(fields[0], ":") {
			a, err1 := strconv.ParseUint(lo, 16, 64)
			b, err2 := strconv.ParseUint(hi, 16, 64)
			if err1 == nil && err2 == nil {
				in = uint64(addr) >= a && uint64(addr) < b
				continue
			}
		}
		if in && fields[0] == "AnonHugePages:" && len(fields) >= 2 {
			kb, err := strconv.Atoi(fields[1])
			require.NoError(t, err)
			return kb
		}
	}
	require.NoError(t, sc.Err())
	t.Fatalf("no mapping in /proc/self/smaps holds %#x", addr)
	return 0
}

// TestAllocHugePages runs Alloc in child processes (HugePagesEnv is read
// once per process): by default an 8 MiB buffer starts on a 2 MiB boundary
// and, where the kernel gives huge pages on request, is backed by them,
// while the part of a 3 MiB buffer past its first 2 MiB is not; "0" gives
// 4 KiB pages; any other value is an error naming the variable.
func TestAllocHugePages(t *testing.T) {
	const size = 8 << 20
	if os.Getenv("DG_ALLOC_CHILD") != "" {
		p, err := Alloc(size, 64)
		if err != nil {
			t.Logf("ALLOC err=%v", err)
			return
		}
		defer Free(p)
		// a buffer ending in a part of a huge page gets none for that part
		q, err := Alloc(3<<20+100, 64)
		if err != nil {
			t.Logf("ALLOC err=%v", err)
			return
		}
		defer Free(q)
		addr, tail := uintptr(p), uintptr(q)+2<<20
		t.Logf("ALLOC aligned2m=%v hugekb=%d tailkb=%d", addr%(2<<20) == 0, anonHugeKB(t, addr), anonHugeKB(t, tail))
		return
	}
	if _, err := os.Stat("/proc/self/smaps"); err != nil {
		t.Skipf("no /proc/self/smaps: %v", err)
	}
	thp, _ := os.ReadFile("/sys/kernel/mm/transparent_hugepage/enabled")
	onRequest := strings.Contains(string(thp), "[always]") || strings.Contains(string(thp), "[madvise]")
	child := func(v string) string {
		cmd := exec.Command(os.Args[0], "-test.run", "^TestAllocHugePages$", "-test.v")
		cmd.Env = append(os.Environ(), "DG_ALLOC_CHILD=1", HugePagesEnv+"="+v)
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s", out)
		_, line, ok := strings.Cut(string(out), "ALLOC ")
		require.True(t, ok, "child printed no ALLOC line: %s", out)
		line, _, _ = strings.Cut(line, "\n")
		return line
	}
	for _, v := range []string{"", "1"} {
		got := child(v)
		require.Contains(t, got, "aligned2m=true", "%s=%q", HugePagesEnv, v)
		if onRequest {
			require.NotContains(t, got, "hugekb=0", "%s=%q: THP is %q, yet the buffer has no huge page", HugePagesEnv, v, thp)
		}
	}
	if strings.Contains(string(thp), "[madvise]") {
		require.Contains(t, child("0"), "hugekb=0", "%s=0 under THP madvise", HugePagesEnv)
		require.Contains(t, child(""), "tailkb=0", "the last, partial huge page of a buffer under THP madvise")
	}
	got := child("yes")
	require.Contains(t, got, "err=")
	require.Contains(t, got, `DEEPGO_HUGEPAGES="yes"`)
}
