// Package launch plans a job of many processes the way DeepSpeed's launcher
// does: the hosts and slots (a DeepSpeed hostfile, --include/--exclude,
// --num_nodes/--num_gpus), the place of every process in the world (the
// variables torchrun sets), and the command each launcher mode runs. It
// only computes: starting processes is package launch/proc's job, and the
// remote modes' commands are run by cmd/deepgo.
package launch

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// Host is one machine of a job and the slots (device indices) the job uses
// on it, in increasing order.
type Host struct {
	Name  string
	Slots []int
}

// count returns the slots 0..n-1.
func count(n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = i
	}
	return s
}

// ParseHostfile reads a DeepSpeed (and Open MPI) hostfile: one "host
// slots=N" per line, "#" comments, blank lines ignored. name is the file's
// name in errors. A host named twice, a line of another shape or a slot
// count that is not a positive integer is an error naming the line.
func ParseHostfile(r io.Reader, name string) ([]Host, error) {
	var hosts []Host
	seen := map[string]int{}
	sc := bufio.NewScanner(r)
	for ln := 1; sc.Scan(); ln++ {
		line := sc.Text()
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		bad := func(why string) error {
			return fmt.Errorf("launch: hostfile %s line %d %q: %s", name, ln, strings.TrimSpace(sc.Text()), why)
		}
		if len(f) != 2 || !strings.HasPrefix(f[1], "slots=") {
			return nil, bad(`want "HOST slots=N"`)
		}
		n, err := strconv.Atoi(strings.TrimPrefix(f[1], "slots="))
		if err != nil || n < 1 {
			return nil, bad("slots must be an integer >= 1")
		}
		if prev, dup := seen[f[0]]; dup {
			return nil, bad(fmt.Sprintf("host %s is already defined on line %d", f[0], prev))
		}
		seen[f[0]] = ln
		hosts = append(hosts, Host{Name: f[0], Slots: count(n)})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("launch: hostfile %s: %w", name, err)
	}
	if len(hosts) == 0 {
		return nil, fmt.Errorf("launch: hostfile %s names no host", name)
	}
	return hosts, nil
}

// ReadHostfile is ParseHostfile of the file at path.
func ReadHostfile(path string) ([]Host, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("launch: --hostfile: %w", err)
	}
	defer f.Close()
	return ParseHostfile(f, path)
}
