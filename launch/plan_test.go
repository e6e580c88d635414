package launch

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestResolve(t *testing.T) {
	for _, tc := range []struct {
		name  string
		opts  Options
		hosts []Host
		addr  string
		port  int
		world int
		err   string
	}{
		{name: "local default", opts: Options{LocalSlots: 1}, hosts: []Host{{"localhost", count(1)}}, addr: "127.0.0.1", port: 29500, world: 1},
		{name: "local num_procs 4", opts: Options{LocalSlots: 1, NumSlots: 4, MasterPort: 1234}, hosts: []Host{{"localhost", count(4)}}, addr: "127.0.0.1", port: 1234, world: 4},
		// DeepSpeed's single-node example: --include="localhost:1" with no hostfile
		{name: "doc localhost:1", opts: Options{LocalSlots: 4, Include: "localhost:1"}, hosts: []Host{{"localhost", []int{1}}}, addr: "127.0.0.1", port: 29500, world: 1},
		{name: "two nodes by hand", opts: Options{NumNodes: 2, NumSlots: 2, NodeRank: 1, MasterAddr: "127.0.0.1"},
			hosts: []Host{{"node0", count(2)}, {"node1", count(2)}}, addr: "127.0.0.1", port: 29500, world: 4},
		{name: "hostfile: first host is the master", opts: Options{Hosts: hosts4x4(), NumNodes: 2, Mode: PDSH},
			hosts: []Host{{"worker-0", count(4)}, {"worker-1", count(4)}}, addr: "worker-0", port: 29500, world: 8},
		{name: "hostfile exclude", opts: Options{Hosts: hosts4x4(), Exclude: "worker-0@worker-1@worker-2:0,1,2", MasterAddr: "10.0.0.1"},
			hosts: []Host{{"worker-2", []int{3}}, {"worker-3", count(4)}}, addr: "10.0.0.1", port: 29500, world: 5},
		{name: "bad mode", opts: Options{LocalSlots: 1, Mode: "torchrun"}, err: `--launcher "torchrun": want one of local, ssh, pdsh, mpirun, slurm`},
		{name: "filter with limits", opts: Options{Hosts: hosts4x4(), Include: "worker-1", NumSlots: 1}, err: "cannot be combined"},
		{name: "nodes without hostfile remote", opts: Options{LocalSlots: 1, NumNodes: 2, Mode: SSH}, err: "needs a hostfile"},
		{name: "node rank out of range", opts: Options{LocalSlots: 1, NumNodes: 2, NodeRank: 2}, err: "--node_rank 2: want 0..1"},
		{name: "bad port", opts: Options{LocalSlots: 1, MasterPort: 70000}, err: "--master_port 70000"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Resolve(tc.opts)
			if tc.err != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tc.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.hosts, p.Hosts)
			assert.Equal(t, tc.addr, p.MasterAddr)
			assert.Equal(t, tc.port, p.MasterPort)
			assert.Equal(t, tc.world, p.WorldSize())
		})
	}
}

func TestNodeProcs(t *testing.T) {
	p, err := Resolve(Options{Hosts: hosts4x4(), Include: "worker-1:1,3@worker-2:0", MasterAddr: "10.1.1.1", MasterPort: 6000, NodeRank: 1, GPUs: true})
	require.NoError(t, err)
	assert.Equal(t, []Proc{
		{Rank: 0, LocalRank: 0, Env: []string{"CUDA_VISIBLE_DEVICES=1,3", "GROUP_RANK=0", "LOCAL_RANK=0", "LOCAL_WORLD_SIZE=2", "MASTER_ADDR=10.1.1.1", "MASTER_PORT=6000", "NODE_RANK=0", "RANK=0", "WORLD_SIZE=3"}},
		{Rank: 1, LocalRank: 1, Env: []string{"CUDA_VISIBLE_DEVICES=1,3", "GROUP_RANK=0", "LOCAL_RANK=1", "LOCAL_WORLD_SIZE=2", "MASTER_ADDR=10.1.1.1", "MASTER_PORT=6000", "NODE_RANK=0", "RANK=1", "WORLD_SIZE=3"}},
	}, p.NodeProcs(0))
	assert.Equal(t, []Proc{
		{Rank: 2, LocalRank: 0, Env: []string{"CUDA_VISIBLE_DEVICES=0", "GROUP_RANK=1", "LOCAL_RANK=0", "LOCAL_WORLD_SIZE=1", "MASTER_ADDR=10.1.1.1", "MASTER_PORT=6000", "NODE_RANK=1", "RANK=2", "WORLD_SIZE=3"}},
	}, p.NodeProcs(1))
	p.GPUs = false // --num_procs: CPU processes leave CUDA_VISIBLE_DEVICES alone
	assert.NotContains(t, p.NodeProcs(1)[0].Env, "CUDA_VISIBLE_DEVICES=0")
	assert.Len(t, p.NodeProcs(1)[0].Env, 8)
}

func TestWorldInfoRoundTrip(t *testing.T) {
	p, err := Resolve(Options{Hosts: hosts4x4(), Exclude: "worker-3:0", GPUs: true})
	require.NoError(t, err)
	hosts, gpus, err := DecodeWorld(p.EncodeWorld())
	require.NoError(t, err)
	assert.Equal(t, p.Hosts, hosts)
	assert.True(t, gpus)
	_, _, err = DecodeWorld("not base64!")
	assert.ErrorContains(t, err, `--world_info "not base64!"`)
}
