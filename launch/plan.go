package launch

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// The launcher modes.
const (
	Local  = "local"  // this launcher spawns the processes of its node
	SSH    = "ssh"    // one ssh per host, each running a local launch of its node
	PDSH   = "pdsh"   // one pdsh over the hosts, each running a local launch of its node
	MPIRun = "mpirun" // Open MPI's mpirun starts every process (OMPI_COMM_WORLD_*)
	Slurm  = "slurm"  // srun starts every process (SLURM_PROCID, ...)
)

// Modes are the launcher modes, in the order --launcher lists them.
var Modes = []string{Local, SSH, PDSH, MPIRun, Slurm}

// DefaultPort is the rendezvous port when --master_port is not given:
// DeepSpeed's and torchrun's default.
const DefaultPort = 29500

// Options are the launcher's flags, already read.
type Options struct {
	// Hosts is the parsed hostfile; nil: this machine only, with LocalSlots
	// slots (or NumNodes nodes of LocalSlots slots, one launch each, for a
	// job started by hand on every node with --node_rank).
	Hosts      []Host
	LocalSlots int

	Include, Exclude string
	NumNodes         int // --num_nodes (<= 0: all)
	NumSlots         int // --num_gpus / --num_procs (<= 0: all)

	MasterAddr string // "" : 127.0.0.1 without a hostfile, else the first host
	MasterPort int    // 0: DefaultPort
	NodeRank   int    // the node this launcher starts in local mode
	Mode       string // one of Modes ("" : local)

	// GPUs sets CUDA_VISIBLE_DEVICES to each node's slots (false for CPU
	// processes, --num_procs).
	GPUs bool
}

// Plan is a resolved job: its hosts and slots, in rank order.
type Plan struct {
	Hosts      []Host
	MasterAddr string
	MasterPort int
	NodeRank   int
	Mode       string
	GPUs       bool
}

// Resolve checks opts and plans the job.
func Resolve(o Options) (*Plan, error) {
	if o.Mode == "" {
		o.Mode = Local
	}
	if !slices.Contains(Modes, o.Mode) {
		return nil, fmt.Errorf("launch: --launcher %q: want one of %s", o.Mode, strings.Join(Modes, ", "))
	}
	if (o.Include != "" || o.Exclude != "") && (o.NumNodes > 0 || o.NumSlots > 0) {
		return nil, fmt.Errorf("launch: --num_nodes/--num_gpus cannot be combined with --include/--exclude (as in DeepSpeed): the filter already says which slots run")
	}
	hosts := o.Hosts
	addr := o.MasterAddr
	if hosts == nil {
		n := o.LocalSlots
		if o.NumSlots > 0 {
			n = o.NumSlots
		}
		if n < 1 {
			return nil, fmt.Errorf("launch: --num_gpus %d: want >= 1 process", n)
		}
		nodes := max(o.NumNodes, 1)
		if nodes > 1 && o.Mode != Local {
			return nil, fmt.Errorf("launch: --num_nodes %d without --hostfile: the %s launcher needs a hostfile naming the hosts", nodes, o.Mode)
		}
		if nodes == 1 {
			hosts = []Host{{Name: "localhost", Slots: count(n)}}
		} else {
			for i := range nodes {
				hosts = append(hosts, Host{Name: "node" + strconv.Itoa(i), Slots: count(n)})
			}
		}
		o.NumNodes, o.NumSlots = 0, 0
		if addr == "" {
			addr = "127.0.0.1"
		}
	}
	hosts, err := Filter(hosts, o.Include, o.Exclude)
	if err != nil {
		return nil, err
	}
	if hosts, err = Limit(hosts, o.NumNodes, o.NumSlots); err != nil {
		return nil, err
	}
	if addr == "" {
		addr = hosts[0].Name
	}
	port := o.MasterPort
	if port == 0 {
		port = DefaultPort
	}
	if port < 0 || port > 65535 {
		return nil, fmt.Errorf("launch: --master_port %d: want 1..65535", port)
	}
	if o.NodeRank < 0 || o.NodeRank >= len(hosts) {
		return nil, fmt.Errorf("launch: --node_rank %d: want 0..%d (the job has %d nodes)", o.NodeRank, len(hosts)-1, len(hosts))
	}
	return &Plan{Hosts: hosts, MasterAddr: addr, MasterPort: port, NodeRank: o.NodeRank, Mode: o.Mode, GPUs: o.GPUs}, nil
}

// WorldSize is the number of processes of the job.
func (p *Plan) WorldSize() int {
	n := 0
	for _, h := range p.Hosts {
		n += len(h.Slots)
	}
	return n
}

// Proc is one process of a node: its rank and environment.
type Proc struct {
	Rank, LocalRank int
	// Env holds the launcher's variables, "KEY=value", sorted by key.
	Env []string
}

// NodeProcs are the processes node runs, with the variables torchrun sets
// (RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK and NODE_RANK,
// MASTER_ADDR, MASTER_PORT) and, for GPUs, CUDA_VISIBLE_DEVICES naming the
// node's slots, so that LOCAL_RANK i runs on the i-th of them (as
// DeepSpeed's launcher does).
func (p *Plan) NodeProcs(node int) []Proc {
	first := 0
	for _, h := range p.Hosts[:node] {
		first += len(h.Slots)
	}
	h := p.Hosts[node]
	procs := make([]Proc, len(h.Slots))
	for i := range h.Slots {
		env := map[string]string{
			"RANK": strconv.Itoa(first + i), "LOCAL_RANK": strconv.Itoa(i),
			"WORLD_SIZE": strconv.Itoa(p.WorldSize()), "LOCAL_WORLD_SIZE": strconv.Itoa(len(h.Slots)),
			"GROUP_RANK": strconv.Itoa(node), "NODE_RANK": strconv.Itoa(node),
			"MASTER_ADDR": p.MasterAddr, "MASTER_PORT": strconv.Itoa(p.MasterPort),
		}
		if p.GPUs {
			env["CUDA_VISIBLE_DEVICES"] = joinInts(h.Slots, ",")
		}
		procs[i] = Proc{Rank: first + i, LocalRank: i, Env: kv(env)}
	}
	return procs
}

func joinInts(v []int, sep string) string {
	s := make([]string, len(v))
	for i, n := range v {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, sep)
}

// kv is m as sorted "KEY=value" pairs.
func kv(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k, v := range m {
		out = append(out, k+"="+v)
	}
	slices.Sort(out)
	return out
}
