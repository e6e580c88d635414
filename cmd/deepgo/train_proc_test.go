package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/comm/gloo"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestLaunchedJob(t *testing.T) {
	torchrun := map[string]string{"RANK": "1", "WORLD_SIZE": "2", "MASTER_PORT": "1234"}
	with := func(m map[string]string, k, v string) map[string]string {
		out := map[string]string{k: v}
		for a, b := range m {
			out[a] = b
		}
		return out
	}
	for _, tc := range []struct {
		name       string
		env        map[string]string
		ranksGiven bool
		flag, dev  string
		backend    string // "" : no job
		err        string
	}{
		{name: "no launcher", env: map[string]string{}, dev: "cpu"},
		{name: "--ranks wins over a job of one", env: map[string]string{"RANK": "0", "WORLD_SIZE": "1"}, ranksGiven: true, dev: "cpu"},
		{name: "--ranks wins over a broken environment", env: map[string]string{"RANK": "x"}, ranksGiven: true, dev: "cpu"},
		// every process would train its own copy of the whole job
		{name: "--ranks in a job of two", env: torchrun, ranksGiven: true, dev: "cpu", err: "--ranks: this process is rank 1 of a job of 2 processes (RANK and WORLD_SIZE are set)"},
		{name: "--ranks under srun", env: map[string]string{"SLURM_PROCID": "0", "SLURM_NTASKS": "4"}, ranksGiven: true, dev: "cpu", err: "rank 0 of a job of 4 processes (SLURM_PROCID and SLURM_NTASKS are set)"},
		{name: "cpu: gloo", env: torchrun, dev: "cpu", backend: "gloo"},
		{name: "cuda: nccl", env: torchrun, dev: "cuda", backend: "nccl"},
		{name: "cuda:1: nccl", env: torchrun, dev: "cuda:1", backend: "nccl"},
		{name: "the variable", env: with(torchrun, "DEEPGO_DIST_BACKEND", "mpi"), dev: "cuda", backend: "mpi"},
		{name: "the flag wins", env: with(torchrun, "DEEPGO_DIST_BACKEND", "mpi"), flag: "gloo", dev: "cuda", backend: "gloo"},
		{name: "mpirun", env: map[string]string{"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2"}, dev: "cpu", backend: "gloo"},
		{name: "srun", env: map[string]string{"SLURM_PROCID": "0", "SLURM_NTASKS": "2"}, dev: "cpu", backend: "gloo"},
		{name: "bad flag", env: torchrun, flag: "tcp", dev: "cpu", err: `--dist-backend "tcp": want one of gloo, mpi, nccl`},
		{name: "bad variable", env: with(torchrun, "DEEPGO_DIST_BACKEND", "ucc"), dev: "cpu", err: `DEEPGO_DIST_BACKEND "ucc": want one of gloo, mpi, nccl`},
		{name: "bad world", env: map[string]string{"RANK": "2", "WORLD_SIZE": "2"}, dev: "cpu", err: "rank 2 of world size 2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j, err := launchedJob(tc.ranksGiven, tc.flag, tc.dev, func(k string) string { return tc.env[k] })
			if tc.err != "" {
				assert.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			if tc.backend == "" {
				assert.Nil(t, j)
				return
			}
			require.NotNil(t, j)
			assert.Equal(t, tc.backend, j.backend)
		})
	}
}

// TestJoinAgreesOnConfig: the ranks of a launched job meet at rank 0's
// store and refuse to train on different resolved configs, naming the odd
// rank; with the same config they go on to the backend (here NCCL, which
// a build without CUDA refuses, saying so).
func TestJoinAgreesOnConfig(t *testing.T) {
	port := freeTestPort(t)
	join := func(digests []string) []error {
		resolved := func(d string) []byte {
			return []byte(`{"model":"tiny","steps":` + map[string]string{"aaaa": "5", "bbbb": "6"}[d] + `}`)
		}
		errs := make([]error, len(digests))
		var wg sync.WaitGroup
		for r, d := range digests {
			wg.Go(func() {
				j := &procJob{backend: "nccl", env: comm.Env{Rank: r, WorldSize: len(digests), LocalRank: r, LocalWorldSize: len(digests), MasterAddr: "127.0.0.1", MasterPort: port}}
				c, release, err := j.join(context.Background(), 20*time.Second, d, resolved(d))
				if err == nil {
					err = errors.Join(c.Close(), release())
				}
				errs[r] = err
			})
		}
		wg.Wait()
		return errs
	}
	for r, err := range join([]string{"aaaa", "aaaa", "bbbb"}) {
		require.Error(t, err, "rank %d", r)
		assert.ErrorIs(t, err, comm.ErrMismatch, "rank %d", r)
		assert.ErrorContains(t, err, "the ranks resolved different configs")
		assert.ErrorContains(t, err, "ranks [2]")
		if r == 2 {
			assert.ErrorContains(t, err, "rank 2 vs rank 0: steps 6 vs 5", "the odd rank names what differs")
		}
	}
	port = freeTestPort(t)
	for r, err := range join([]string{"aaaa", "aaaa"}) {
		if err != nil { // a CUDA build joins NCCL here
			assert.ErrorIs(t, err, comm.ErrUnsupported, "rank %d", r)
			assert.NotErrorIs(t, err, comm.ErrMismatch, "rank %d", r)
		}
	}
}

func TestResolvedDigest(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "ds.json")
	require.NoError(t, os.WriteFile(cfg, []byte(`{"train_micro_batch_size_per_gpu": 4}`), 0o644))
	a := trainerArgs{microBatch: 8, lr: 1e-3, steps: 10, device: "cuda:0"}
	da, err := resolvedDigest(cfg, "tiny", a)
	require.NoError(t, err)
	b := a
	b.device = "cuda:3" // another GPU of the same kind: the same job
	db, _ := resolvedDigest(cfg, "tiny", b)
	assert.Equal(t, da, db)
	for _, change := range []func(*trainerArgs) string{
		func(x *trainerArgs) string { x.steps = 11; return "tiny" },
		func(x *trainerArgs) string { x.lr = 1e-2; return "tiny" },
		func(x *trainerArgs) string { x.device = "cpu"; return "tiny" },
		func(x *trainerArgs) string { return "small" },
	} {
		c := a
		model := change(&c)
		dc, _ := resolvedDigest(cfg, model, c)
		assert.NotEqual(t, da, dc, "%+v %s", c, model)
	}
}

// TestLaunchTrainWithoutGloo: in a build without Gloo, deepgo launch --
// deepgo train fails fast, every rank naming itself and saying how to get
// Gloo in the stub's own words.
func TestLaunchTrainWithoutGloo(t *testing.T) {
	if gloo.Available() {
		t.Skip("this build has Gloo")
	}
	cfg := filepath.Join(t.TempDir(), "ds.json")
	require.NoError(t, os.WriteFile(cfg, []byte(`{"train_micro_batch_size_per_gpu": 4}`), 0o644))
	t.Setenv("DEEPGO_LAUNCH_TEST", "deepgo")
	t0 := time.Now()
	code, out, errs := launchRun(t, "deepgo", "--num_procs", "2", "--master_port", "0", "--", "train", "--config", cfg, "--model", "tiny")
	assert.Less(t, time.Since(t0), 20*time.Second)
	assert.Equal(t, 1, code, out)
	m := regexp.MustCompile(`deepgo launch: rank (\d) \(pid \d+\) exited with code 1; its last`).FindStringSubmatch(errs)
	require.NotNil(t, m, errs)
	r, _ := strconv.Atoi(m[1])
	_, _, stub := gloo.FromEnvOf(context.Background(), comm.Env{Rank: r, WorldSize: 2}, gloo.Options{})
	assert.Contains(t, errs, "\n    deepgo train: rank "+m[1]+": "+stub.Error()+"\n")
	assert.Contains(t, stub.Error(), "this build has no Gloo: install Debian's libgloo-dev")
}

func TestJSONDiff(t *testing.T) {
	cases := []struct {
		name, theirs, mine string
		want               []string
	}{
		{"same", `{"a":1,"b":{"c":[1,2]}}`, `{"b":{"c":[1,2]},"a":1}`, nil},
		{"leaf", `{"steps":5,"model":"tiny"}`, `{"steps":6,"model":"tiny"}`, []string{"steps 6 vs 5"}},
		{"nested and absent", `{"config":{"zero":{"stage":2}}}`, `{"config":{"zero":{"stage":3,"x":true}}}`,
			[]string{"config.zero.stage 3 vs 2", "config.zero.x true vs absent"}},
		{"array", `{"b":[1,2]}`, `{"b":[1,3]}`, []string{"b[1] 3 vs 2"}},
		{"limit", `{"a":1,"b":1,"c":1,"d":1}`, `{"a":2,"b":2,"c":2,"d":2}`, []string{"a 2 vs 1", "b 2 vs 1", "c 2 vs 1", "..."}},
		{"not json", `{`, `{}`, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			assert.Equal(t, c.want, jsonDiff([]byte(c.theirs), []byte(c.mine), 3))
		})
	}
}
