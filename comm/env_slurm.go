package comm

import (
	"fmt"
	"strconv"
	"strings"
)

// slurmDefaults fills what srun says less directly than torchrun: this
// node's task count from SLURM_TASKS_PER_NODE when SLURM_NTASKS_PER_NODE
// is absent, and the rendezvous host (MASTER_ADDR still overrides it).
func slurmDefaults(get func(string) string, e *Env) error {
	if get("SLURM_NTASKS_PER_NODE") == "" && get("SLURM_TASKS_PER_NODE") != "" {
		node := 0
		if err := envInt(get, "SLURM_NODEID", &node, false); err != nil {
			return err
		}
		n, err := slurmTasksOnNode(get("SLURM_TASKS_PER_NODE"), node)
		if err != nil {
			return fmt.Errorf("comm: SLURM_TASKS_PER_NODE=%q: %w", get("SLURM_TASKS_PER_NODE"), err)
		}
		e.LocalWorldSize = n
	}
	list := get("SLURM_STEP_NODELIST")
	if list == "" {
		list = get("SLURM_NODELIST")
	}
	switch {
	case list != "":
		h, err := firstSlurmHost(list)
		if err != nil {
			return fmt.Errorf("comm: SLURM_NODELIST=%q: %w", list, err)
		}
		e.MasterAddr = h
	case get("SLURM_LAUNCH_NODE_IPADDR") != "":
		e.MasterAddr = strings.TrimSpace(get("SLURM_LAUNCH_NODE_IPADDR"))
	}
	return nil
}

// slurmTasksOnNode reads Slurm's compressed per-node task counts ("2(x3),1":
// three nodes of 2 then one of 1) and returns node's.
func slurmTasksOnNode(s string, node int) (int, error) {
	seen := 0
	for part := range strings.SplitSeq(s, ",") {
		count, reps := part, "1"
		if i := strings.Index(part, "(x"); i >= 0 && strings.HasSuffix(part, ")") {
			count, reps = part[:i], part[i+2:len(part)-1]
		}
		c, err1 := strconv.Atoi(count)
		r, err2 := strconv.Atoi(reps)
		if err1 != nil || err2 != nil || c < 1 || r < 1 {
			return 0, fmt.Errorf("entry %q: want N or N(xR)", part)
		}
		if node < seen+r {
			return c, nil
		}
		seen += r
	}
	return 0, fmt.Errorf("no entry for node %d (SLURM_NODEID) among %d nodes", node, seen)
}

// firstSlurmHost is the first host of a Slurm host list ("gpu[01-04,07],x"
// gives "gpu01"; "rack[1-2]-n[3-4]" gives "rack1-n3").
func firstSlurmHost(list string) (string, error) {
	list = strings.TrimSpace(list)
	var b strings.Builder
	for i := 0; i < len(list); i++ {
		switch c := list[i]; c {
		case ',':
			return b.String(), nil
		case '[':
			end := strings.IndexByte(list[i:], ']')
			if end < 0 {
				return "", fmt.Errorf("unclosed '['")
			}
			first := list[i+1 : i+end]
			first, _, _ = strings.Cut(first, ",")
			first, _, _ = strings.Cut(first, "-")
			if first == "" {
				return "", fmt.Errorf("empty range")
			}
			b.WriteString(first)
			i += end
		default:
			b.WriteByte(c)
		}
	}
	if b.Len() == 0 {
		return "", fmt.Errorf("no host")
	}
	return b.String(), nil
}
