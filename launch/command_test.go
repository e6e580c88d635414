package launch

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCommands(t *testing.T) {
	prog := []string{"deepgo", "train", "--config", "my ds.json"}
	remote := Remote{Self: "/opt/bin/deepgo", Dir: "/home/u/run", Exports: []string{"DEEPGO_JOB_SECRET=ab12", "DEEPGO_TIMEOUT=90s"},
		NodeArgs: []string{"--grace", "5s"}, Program: prog}
	two := []Host{{"worker-0", count(2)}, {"worker-1", count(2)}}
	world := (&Plan{Hosts: two, GPUs: true}).EncodeWorld()
	node := func(n string) string {
		return "cd /home/u/run; export DEEPGO_JOB_SECRET=ab12; export DEEPGO_TIMEOUT=90s; /opt/bin/deepgo launch --world_info " + world +
			" --node_rank " + n + " --master_addr worker-0 --master_port 29500 --grace 5s -- deepgo train --config 'my ds.json'"
	}
	for _, tc := range []struct {
		name string
		opts Options
		want []Command
		err  string
	}{
		{name: "local runs nothing", opts: Options{LocalSlots: 2}},
		{name: "ssh: one per host", opts: Options{Hosts: two, Mode: SSH, GPUs: true}, want: []Command{
			{Host: "worker-0", Argv: []string{"ssh", "worker-0", node("0")}},
			{Host: "worker-1", Argv: []string{"ssh", "worker-1", node("1")}},
		}},
		{name: "pdsh: %n is the node rank", opts: Options{Hosts: two, Mode: PDSH, GPUs: true}, want: []Command{
			{Argv: []string{"pdsh", "-S", "-f", "1024", "-w", "worker-0,worker-1", node("%n")}},
		}},
		{name: "mpirun", opts: Options{Hosts: hosts4x4(), NumNodes: 2, NumSlots: 2, Mode: MPIRun, GPUs: true}, want: []Command{
			{Argv: append([]string{"mpirun", "-n", "4", "--host", "worker-0:2,worker-1:2",
				"-x", "MASTER_ADDR=worker-0", "-x", "MASTER_PORT=29500", "-x", "DEEPGO_JOB_SECRET=ab12", "-x", "DEEPGO_TIMEOUT=90s"}, prog...)},
		}},
		{name: "mpirun: the same slot subset everywhere", opts: Options{Hosts: two, Include: "worker-0:1@worker-1:1", Mode: MPIRun, GPUs: true, MasterAddr: "10.0.0.5"}, want: []Command{
			{Argv: append([]string{"mpirun", "-n", "2", "--host", "worker-0:1,worker-1:1",
				"-x", "MASTER_ADDR=10.0.0.5", "-x", "MASTER_PORT=29500", "-x", "DEEPGO_JOB_SECRET=ab12", "-x", "DEEPGO_TIMEOUT=90s", "-x", "CUDA_VISIBLE_DEVICES=1"}, prog...)},
		}},
		{name: "mpirun: uneven hosts", opts: Options{Hosts: two, Exclude: "worker-1:0", Mode: MPIRun}, want: []Command{
			{Argv: append([]string{"mpirun", "-n", "3", "--host", "worker-0:2,worker-1:1",
				"-x", "MASTER_ADDR=worker-0", "-x", "MASTER_PORT=29500", "-x", "DEEPGO_JOB_SECRET=ab12", "-x", "DEEPGO_TIMEOUT=90s"}, prog...)},
		}},
		{name: "mpirun: different GPU subsets", opts: Options{Hosts: two, Include: "worker-0:0@worker-1:1", Mode: MPIRun, GPUs: true}, err: "different slots (worker-0:0 worker-1:1)"},
		{name: "slurm", opts: Options{Hosts: hosts4x4(), Exclude: "worker-0", Mode: Slurm, GPUs: true}, want: []Command{
			{Argv: append([]string{"srun", "-n", "12", "--nodes", "3", "--ntasks-per-node", "4", "--nodelist", "worker-1,worker-2,worker-3",
				"--export=ALL,MASTER_ADDR=worker-1,MASTER_PORT=29500,DEEPGO_JOB_SECRET=ab12,DEEPGO_TIMEOUT=90s"}, prog...)},
		}},
		{name: "slurm: uneven hosts", opts: Options{Hosts: two, Exclude: "worker-1:0", Mode: Slurm}, err: "same number of tasks on every node, but the hosts have worker-0:0,1 worker-1:1"},
		{name: "slurm: GPU subset", opts: Options{Hosts: two, Include: "worker-0:1@worker-1:1", Mode: Slurm, GPUs: true}, err: "GPU binding to Slurm"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Resolve(tc.opts)
			require.NoError(t, err)
			got, err := p.Commands(remote)
			check(t, got, err, tc.want, tc.err)
		})
	}
	p, err := Resolve(Options{Hosts: two, Mode: Slurm})
	require.NoError(t, err)
	_, err = p.Commands(Remote{Exports: []string{"DEEPGO_X=a,b"}, Program: prog})
	assert.ErrorContains(t, err, `"DEEPGO_X=a,b" has a comma`)
	_, err = p.Commands(Remote{})
	assert.ErrorContains(t, err, "no program to run")
}

func TestQuote(t *testing.T) {
	for in, want := range map[string]string{"plain": "plain", "": "''", "a b": "'a b'", "it's": `'it'\''s'`, "$HOME": "'$HOME'", "a=b,c:d/e": "a=b,c:d/e"} {
		assert.Equal(t, want, Quote(in), in)
	}
}
