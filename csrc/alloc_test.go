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
		fallback := thpFallbacks()
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
		t.Logf("ALLOC aligned2m=%v hugekb=%d tailkb=%d fellback=%v", addr%(2<<20) == 0, anonHugeKB(t, addr),
			anonHugeKB(t, tail), thpFallbacks() != fallback)
		return
	}
	if _, err := os.Stat("/proc/self/smaps"); err != nil {
		t.Skipf("no /proc/self/smaps: %v", err)
	}
	onRequest, why := thpOnRequest()
	child := func(v string) string {
		cmd := exec.Command(os.Args[0], "-test.run", "^TestAllocHugePages$", "-test.v")
		// glibc's own huge-page and mmap tunables would decide for it
		for _, e := range os.Environ() {
			if !strings.HasPrefix(e, "GLIBC_TUNABLES=") && !strings.HasPrefix(e, "MALLOC_") {
				cmd.Env = append(cmd.Env, e)
			}
		}
		cmd.Env = append(cmd.Env, "DG_ALLOC_CHILD=1", HugePagesEnv+"="+v)
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
		switch {
		case !onRequest:
			t.Logf("huge pages not checked: %s", why)
		case strings.Contains(got, "fellback=true"):
			t.Logf("huge pages not checked: the kernel fell back to 4 KiB pages (thp_fault_fallback rose; memory fragmented or limited)")
		default:
			require.NotContains(t, got, "hugekb=0", "%s=%q: %s, yet the buffer has no huge page", HugePagesEnv, v, why)
		}
	}
	if onRequest && strings.Contains(why, "[madvise]") {
		require.Contains(t, child("0"), "hugekb=0", "%s=0 under THP madvise", HugePagesEnv)
		require.Contains(t, child(""), "tailkb=0", "the last, partial huge page of a buffer under THP madvise")
	}
	got := child("yes")
	require.Contains(t, got, "err=")
	require.Contains(t, got, `DEEPGO_HUGEPAGES="yes"`)
}

// thpOnRequest says whether this process gets 2 MiB transparent huge pages
// when it asks (madvise), and why or why not.
func thpOnRequest() (bool, string) {
	mode, err := os.ReadFile("/sys/kernel/mm/transparent_hugepage/enabled")
	if err != nil {
		return false, "no THP in this kernel: " + err.Error()
	}
	m := strings.TrimSpace(string(mode))
	if !strings.Contains(m, "[always]") && !strings.Contains(m, "[madvise]") {
		return false, "THP is " + m
	}
	if b, err := os.ReadFile("/sys/kernel/mm/transparent_hugepage/hpage_pmd_size"); err == nil &&
		strings.TrimSpace(string(b)) != "2097152" {
		return false, "the huge page size is " + strings.TrimSpace(string(b)) + " bytes, not 2 MiB"
	}
	if b, err := os.ReadFile("/sys/kernel/mm/transparent_hugepage/hugepages-2048kB/enabled"); err == nil &&
		strings.Contains(string(b), "[never]") {
		return false, "2 MiB THP is never"
	}
	if b, err := os.ReadFile("/proc/self/status"); err == nil && strings.Contains(string(b), "THP_enabled:\t0") {
		return false, "THP is disabled for this process (prctl PR_SET_THP_DISABLE)"
	}
	return true, "THP is " + m
}

// thpFallbacks is the kernel's count of huge-page faults that fell back to
// 4 KiB pages (/proc/vmstat thp_fault_fallback), -1 if unknown.
func thpFallbacks() int {
	b, err := os.ReadFile("/proc/vmstat")
	if err != nil {
		return -1
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "thp_fault_fallback "); ok {
			n, err := strconv.Atoi(v)
			if err != nil {
				return -1
			}
			return n
		}
	}
	return -1
}
