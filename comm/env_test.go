package comm

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestEnvFromSlurm: srun's variables give the same Env torchrun's would.
func TestEnvFromSlurm(t *testing.T) {
	for _, tc := range []struct {
		name string
		vars map[string]string
		want Env
		err  string
	}{
		{name: "srun -n 8 --ntasks-per-node 4", vars: map[string]string{"SLURM_PROCID": "5", "SLURM_NTASKS": "8", "SLURM_LOCALID": "1",
			"SLURM_NTASKS_PER_NODE": "4", "SLURM_NODELIST": "gpu[07-08]", "SLURM_LAUNCH_NODE_IPADDR": "10.0.0.9"},
			want: Env{Rank: 5, WorldSize: 8, LocalRank: 1, LocalWorldSize: 4, MasterAddr: "gpu07", MasterPort: 29500, Launcher: "slurm"}},
		{name: "tasks per node, compressed", vars: map[string]string{"SLURM_PROCID": "6", "SLURM_NPROCS": "7", "SLURM_LOCALID": "0", "SLURM_NODEID": "3",
			"SLURM_TASKS_PER_NODE": "2(x3),1", "SLURM_STEP_NODELIST": "a1,b[2-3],c", "SLURM_NODELIST": "zzz", "MASTER_PORT": "7000"},
			want: Env{Rank: 6, WorldSize: 7, LocalRank: 0, LocalWorldSize: 1, MasterAddr: "a1", MasterPort: 7000, Launcher: "slurm"}},
		{name: "launch node address without a node list", vars: map[string]string{"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_LOCALID": "0",
			"SLURM_TASKS_PER_NODE": "2", "SLURM_LAUNCH_NODE_IPADDR": "10.0.0.9"},
			want: Env{Rank: 0, WorldSize: 2, LocalRank: 0, LocalWorldSize: 2, MasterAddr: "10.0.0.9", MasterPort: 29500, Launcher: "slurm"}},
		{name: "MASTER_ADDR wins", vars: map[string]string{"SLURM_PROCID": "1", "SLURM_NTASKS": "2", "SLURM_NODELIST": "n[1-2]", "MASTER_ADDR": "10.1.1.1"},
			want: Env{Rank: 1, WorldSize: 2, LocalRank: 1, LocalWorldSize: 2, MasterAddr: "10.1.1.1", MasterPort: 29500, Launcher: "slurm"}},
		{name: "RANK wins over SLURM_PROCID", vars: map[string]string{"RANK": "0", "WORLD_SIZE": "1", "SLURM_PROCID": "3", "SLURM_NTASKS": "4"},
			want: Env{Rank: 0, WorldSize: 1, LocalRank: 0, LocalWorldSize: 1, MasterAddr: "127.0.0.1", MasterPort: 29500, Launcher: "torchrun"}},
		{name: "no task count", vars: map[string]string{"SLURM_PROCID": "0"}, err: "SLURM_NPROCS is not set"},
		{name: "bad tasks per node", vars: map[string]string{"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_TASKS_PER_NODE": "2(y3)"},
			err: `SLURM_TASKS_PER_NODE="2(y3)": entry "2(y3)": want N or N(xR)`},
		{name: "node beyond the counts", vars: map[string]string{"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_NODEID": "2", "SLURM_TASKS_PER_NODE": "1(x2)"},
			err: "no entry for node 2"},
		{name: "bad node list", vars: map[string]string{"SLURM_PROCID": "0", "SLURM_NTASKS": "1", "SLURM_NODELIST": "gpu[01-02"}, err: "unclosed '['"},
		{name: "rank beyond the tasks", vars: map[string]string{"SLURM_PROCID": "4", "SLURM_NTASKS": "4"}, err: "rank 4 of world size 4"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := EnvFrom(func(k string) string { return tc.vars[k] })
			if tc.err != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tc.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestFirstSlurmHost(t *testing.T) {
	for in, want := range map[string]string{"node1": "node1", "gpu[01-04,07],x": "gpu01", "rack[1-2]-n[3-4]": "rack1-n3", "a,b": "a", "n[5,2]": "n5"} {
		got, err := firstSlurmHost(in)
		require.NoError(t, err, in)
		assert.Equal(t, want, got, in)
	}
}
