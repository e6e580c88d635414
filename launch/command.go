package launch

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Remote is what the commands of the non-local modes need beyond the plan.
type Remote struct {
	// Self is the deepgo binary on every host (ssh and pdsh run a local
	// launch of each node through it).
	Self string
	// Dir is the working directory on every host.
	Dir string
	// Exports are "KEY=value" pairs every process gets (the job secret, the
	// timeout, the user's DEEPGO_/NCCL_/GLOO_ variables).
	Exports []string
	// NodeArgs are flags each node's local launch gets (--grace, --timeout,
	// --max_restarts), before the "--".
	NodeArgs []string
	// Program is the command every process runs.
	Program []string
}

// Command is one command to run on this machine: for ssh one per host,
// else one.
type Command struct {
	Host string // the host it reaches ("" : every host)
	Argv []string
}

// world is the job's layout as a node's local launch receives it
// (--world_info, base64 of this JSON, like DeepSpeed's).
type world struct {
	Hosts []Host `json:"hosts"`
	GPUs  bool   `json:"gpus"`
}

// EncodeWorld is the --world_info value of p.
func (p *Plan) EncodeWorld() string {
	b, _ := json.Marshal(world{Hosts: p.Hosts, GPUs: p.GPUs})
	return base64.URLEncoding.EncodeToString(b)
}

// DecodeWorld reads a --world_info value: the hosts and whether they run
// GPUs.
func DecodeWorld(s string) ([]Host, bool, error) {
	b, err := base64.URLEncoding.DecodeString(s)
	var w world
	if err == nil {
		err = json.Unmarshal(b, &w)
	}
	if err == nil && len(w.Hosts) == 0 {
		err = fmt.Errorf("no host")
	}
	if err != nil {
		return nil, false, fmt.Errorf("launch: --world_info %q: %w", s, err)
	}
	return w.Hosts, w.GPUs, nil
}

// Commands are what p's mode runs on this machine to start the job: nothing
// for local (the launcher spawns its node's processes itself).
func (p *Plan) Commands(r Remote) ([]Command, error) {
	if len(r.Program) == 0 {
		return nil, fmt.Errorf("launch: no program to run (deepgo launch [flags] -- PROGRAM ARGS...)")
	}
	switch p.Mode {
	case SSH:
		var cmds []Command
		for i, h := range p.Hosts {
			cmds = append(cmds, Command{Host: h.Name, Argv: []string{"ssh", h.Name, p.nodeScript(r, strconv.Itoa(i))}})
		}
		return cmds, nil
	case PDSH:
		// pdsh puts each host's index in -w's order in place of %n.
		return []Command{{Argv: []string{"pdsh", "-S", "-f", "1024", "-w", p.hostList(), p.nodeScript(r, "%n")}}}, nil
	case MPIRun:
		return p.mpirun(r)
	case Slurm:
		return p.srun(r)
	}
	return nil, nil
}

func (p *Plan) hostList() string {
	names := make([]string, len(p.Hosts))
	for i, h := range p.Hosts {
		names[i] = h.Name
	}
	return strings.Join(names, ",")
}

// nodeScript is the shell line that starts node's processes on its host:
// a local launch of that node.
func (p *Plan) nodeScript(r Remote, node string) string {
	var b strings.Builder
	if r.Dir != "" {
		fmt.Fprintf(&b, "cd %s; ", Quote(r.Dir))
	}
	for _, e := range r.Exports {
		k, v, _ := strings.Cut(e, "=")
		fmt.Fprintf(&b, "export %s=%s; ", k, Quote(v))
	}
	argv := []string{r.Self, "launch", "--world_info", p.EncodeWorld(), "--node_rank", node,
		"--master_addr", p.MasterAddr, "--master_port", strconv.Itoa(p.MasterPort)}
	argv = append(append(append(argv, r.NodeArgs...), "--"), r.Program...)
	for i, a := range argv {
		if i > 0 {
			b.WriteByte(' ')
		}
		if a == "%n" {
			b.WriteString(a)
			continue
		}
		b.WriteString(Quote(a))
	}
	return b.String()
}

// uniformSlots says whether every host uses the slots 0..k-1 (ok), and
// otherwise the one slot list every host shares (nil when they differ).
func (p *Plan) uniformSlots() (ok bool, shared []int) {
	ok = true
	shared = p.Hosts[0].Slots
	for _, h := range p.Hosts {
		ok = ok && slices.Equal(h.Slots, count(len(h.Slots)))
		if !slices.Equal(h.Slots, shared) {
			shared = nil
		}
	}
	return ok, shared
}

func (p *Plan) jobExports(r Remote) []string {
	return append([]string{"MASTER_ADDR=" + p.MasterAddr, "MASTER_PORT=" + strconv.Itoa(p.MasterPort)}, r.Exports...)
}

// mpirun: Open MPI starts the processes and sets OMPI_COMM_WORLD_*; the
// rendezvous variables travel with -x.
func (p *Plan) mpirun(r Remote) ([]Command, error) {
	argv := []string{"mpirun", "-n", strconv.Itoa(p.WorldSize()), "--host"}
	hosts := make([]string, len(p.Hosts))
	for i, h := range p.Hosts {
		hosts[i] = h.Name + ":" + strconv.Itoa(len(h.Slots))
	}
	argv = append(argv, strings.Join(hosts, ","))
	exports := p.jobExports(r)
	if ok, shared := p.uniformSlots(); p.GPUs && !ok {
		if shared == nil {
			return nil, fmt.Errorf("launch: not supported: --launcher mpirun passes one CUDA_VISIBLE_DEVICES to every host, but the hosts use different slots (%s); use --launcher pdsh or ssh", p.slotSummary())
		}
		exports = append(exports, "CUDA_VISIBLE_DEVICES="+joinInts(shared, ","))
	}
	for _, e := range exports {
		argv = append(argv, "-x", e)
	}
	return []Command{{Argv: append(argv, r.Program...)}}, nil
}

// srun: Slurm starts the processes and sets SLURM_PROCID and the rest.
func (p *Plan) srun(r Remote) ([]Command, error) {
	per := len(p.Hosts[0].Slots)
	for _, h := range p.Hosts {
		if len(h.Slots) != per {
			return nil, fmt.Errorf("launch: not supported: --launcher slurm runs the same number of tasks on every node, but the hosts have %s; use --launcher pdsh or ssh", p.slotSummary())
		}
	}
	if ok, _ := p.uniformSlots(); p.GPUs && !ok {
		return nil, fmt.Errorf("launch: not supported: --launcher slurm leaves GPU binding to Slurm (--gres), so it cannot run the slots %s; use --launcher pdsh or ssh", p.slotSummary())
	}
	exports := p.jobExports(r)
	for _, e := range exports {
		if strings.Contains(e, ",") {
			return nil, fmt.Errorf("launch: not supported: --launcher slurm passes variables in srun --export, a comma-separated list, and %q has a comma", e)
		}
	}
	argv := []string{"srun", "-n", strconv.Itoa(p.WorldSize()), "--nodes", strconv.Itoa(len(p.Hosts)),
		"--ntasks-per-node", strconv.Itoa(per), "--nodelist", p.hostList(), "--export=" + strings.Join(append([]string{"ALL"}, exports...), ",")}
	return []Command{{Argv: append(argv, r.Program...)}}, nil
}

func (p *Plan) slotSummary() string {
	parts := make([]string, len(p.Hosts))
	for i, h := range p.Hosts {
		parts[i] = fmt.Sprintf("%s:%s", h.Name, joinInts(h.Slots, ","))
	}
	return strings.Join(parts, " ")
}

// Quote is s as one POSIX shell word.
func Quote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./:=,@%+", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
