package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/comm/gloo"
	"github.com/deepgo-ml/deepgo/comm/local"
	"github.com/deepgo-ml/deepgo/config"
	"github.com/deepgo-ml/deepgo/nccl"
	"github.com/deepgo-ml/deepgo/tensor"
)

// distBackends are the --dist-backend choices.
var distBackends = []string{"gloo", "mpi", "nccl"}

// procJob is this process's place in a job a launcher started (deepgo
// launch, torchrun, mpirun, srun): deepgo train then trains exactly one
// rank here, the others being other processes.
type procJob struct {
	env     comm.Env
	backend string // gloo, mpi or nccl
}

// launchedJob is the job the environment describes, or nil when no
// launcher started this process or --ranks asks for in-process ranks.
// --ranks in a process of a job of several processes is an error: every
// process would train a whole job of its own, the copies writing the same
// checkpoints and run files.
func launchedJob(ranksGiven bool, backendFlag, device string, getenv func(string) string) (*procJob, error) {
	if getenv("RANK") == "" && getenv("OMPI_COMM_WORLD_RANK") == "" && getenv("SLURM_PROCID") == "" {
		return nil, nil
	}
	env, err := comm.EnvFrom(getenv)
	if ranksGiven {
		if err == nil && env.WorldSize > 1 {
			vars := map[string]string{"torchrun": "RANK and WORLD_SIZE", "mpirun": "OMPI_COMM_WORLD_RANK and OMPI_COMM_WORLD_SIZE", "slurm": "SLURM_PROCID and SLURM_NTASKS"}[env.Launcher]
			return nil, fmt.Errorf("--ranks: this process is rank %d of a job of %d processes (%s are set), and each would train all --ranks ranks on its own, writing the same files: drop --ranks to train one rank per process, or unset those variables for in-process ranks", env.Rank, env.WorldSize, vars)
		}
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	name, from := backendFlag, "--dist-backend"
	if name == "" {
		name, from = getenv("DEEPGO_DIST_BACKEND"), "DEEPGO_DIST_BACKEND"
	}
	if name == "" {
		name = "gloo" // host tensors between processes
		if strings.HasPrefix(device, "cuda") {
			name = "nccl"
		}
	}
	if !slices.Contains(distBackends, name) {
		return nil, fmt.Errorf("%s %q: want one of %s", from, name, strings.Join(distBackends, ", "))
	}
	return &procJob{env: env, backend: name}, nil
}

// rank is this process's rank; 0 for in-process ranks (whose process
// speaks for all of them).
func (j *procJob) rank() int {
	if j == nil {
		return 0
	}
	return j.env.Rank
}

// inProcRank is the in-process rank of c: c's rank when the ranks share
// this process, else 0 (the launcher's LOCAL_RANK picks the device).
func (j *procJob) inProcRank(c comm.Comm) int {
	if j == nil {
		return c.Rank()
	}
	return 0
}

// runRanks runs fn on every rank of the job: ranks goroutines over the
// in-process backend, or, for a launched job, this process's one rank
// after the ranks agreed on the resolved config; peak then holds every
// rank's peak memory.
func (j *procJob) runRanks(ranks int, cfgPath, modelName string, targs trainerArgs, peak []int64, fn func(ctx context.Context, c comm.Comm) error) (err error) {
	if j == nil {
		return local.Run(context.Background(), ranks, local.Options{Timeout: 5 * time.Minute, Threads: 1}, fn)
	}
	timeout, err := comm.DefaultTimeout()
	if err != nil {
		return err
	}
	resolved, err := resolvedJSON(cfgPath, modelName, targs)
	if err != nil {
		return err
	}
	sum := sha256.Sum256(resolved)
	ctx := context.Background()
	c, release, err := j.join(ctx, timeout, hex.EncodeToString(sum[:]), resolved)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, c.Close(), release()) }()
	if err = fn(ctx, c); err != nil {
		return err
	}
	all, err := comm.AllGatherInt64s(ctx, c, []int64{peak[j.env.Rank]})
	if err != nil {
		return fmt.Errorf("gather the ranks' peak memory: %w", err)
	}
	copy(peak, all)
	return nil
}

// join makes this rank's communicator: it meets the other ranks, checks
// they resolved the same config, and joins the backend's group. release
// ends what joining opened (the store); call it after closing c.
func (j *procJob) join(ctx context.Context, timeout time.Duration, digest string, resolved []byte) (c comm.Comm, release func() error, err error) {
	if j.backend == "mpi" {
		return joinMPI(ctx, timeout, digest)
	}
	if j.backend == "gloo" && !gloo.Available() {
		// The stub says how to get Gloo; fail before meeting the others.
		_, _, err := gloo.FromEnvOf(ctx, j.env, gloo.Options{Timeout: timeout})
		return nil, nil, err
	}
	jctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	store, server, err := comm.Rendezvous(jctx, j.env)
	if err != nil {
		return nil, nil, fmt.Errorf("rendezvous at %s: %w", j.env.StoreAddr(), err)
	}
	release = func() error {
		err := store.Close()
		if server != nil {
			err = errors.Join(err, server.Close())
		}
		return err
	}
	// the resolved values themselves, so that a mismatch can name them
	if err := store.Set(jctx, fmt.Sprintf("deepgo-train/config-json/%d", j.env.Rank), resolved); err != nil {
		return nil, nil, errors.Join(fmt.Errorf("rendezvous at %s: %w", j.env.StoreAddr(), err), release())
	}
	if err := comm.AgreeOnConfig(jctx, store, j.env.Rank, j.env.WorldSize, "deepgo-train/config", []byte(digest)); err != nil {
		err = fmt.Errorf("the ranks resolved different configs (config, model, steps, device)%s: %w", j.differences(jctx, store, resolved), err)
		if errors.Is(err, comm.ErrMismatch) {
			// Rank 0 serves the store: it must outlive every rank's reading
			// of the hashes, or they would see its close, not the verdict.
			err = errors.Join(err, j.readAll(jctx, store, "deepgo-train/config-read"))
		}
		return nil, nil, errors.Join(err, release())
	}
	if err := j.readAll(jctx, store, "deepgo-train/config-read"); err != nil {
		return nil, nil, errors.Join(fmt.Errorf("rendezvous at %s: %w", j.env.StoreAddr(), err), release())
	}
	switch j.backend {
	case "gloo":
		c, err = gloo.NewFromStore(jctx, store, j.env.Rank, j.env.WorldSize, gloo.Options{Timeout: timeout})
	default:
		c, err = nccl.NewFromStore(jctx, store, j.env.Rank, j.env.WorldSize, j.env.LocalRank, nccl.Options{Timeout: timeout})
	}
	if err != nil {
		return nil, nil, errors.Join(err, release())
	}
	return c, release, nil
}

// readAll is a barrier at key for rank 0 alone: every rank says it is
// done, and rank 0 waits for all of them.
func (j *procJob) readAll(ctx context.Context, store *comm.Store, key string) error {
	if err := store.Set(ctx, fmt.Sprintf("%s/%d", key, j.env.Rank), nil); err != nil || j.env.Rank != 0 {
		return err
	}
	keys := make([]string, j.env.WorldSize)
	for r := range keys {
		keys[r] = fmt.Sprintf("%s/%d", key, r)
	}
	return store.Wait(ctx, keys...)
}

// differences names where this rank's resolved values differ from rank
// 0's (", this rank vs rank 0: steps 6 vs 5"), or "" on rank 0 or when
// rank 0's cannot be read.
func (j *procJob) differences(ctx context.Context, store *comm.Store, mine []byte) string {
	if j.env.Rank == 0 {
		return ""
	}
	theirs, err := store.Get(ctx, "deepgo-train/config-json/0")
	if err != nil {
		return ""
	}
	d := jsonDiff(theirs, mine, 3)
	if len(d) == 0 {
		return ""
	}
	return fmt.Sprintf(", rank %d vs rank 0: %s", j.env.Rank, strings.Join(d, "; "))
}

// jsonDiff lists up to limit leaves whose values differ between two JSON
// documents, as "path mine vs theirs" (a leaf only one side has shows
// "absent" on the other), in path order.
func jsonDiff(theirs, mine []byte, limit int) []string {
	var a, b any
	if json.Unmarshal(theirs, &a) != nil || json.Unmarshal(mine, &b) != nil {
		return nil
	}
	fa, fb := map[string]string{}, map[string]string{}
	flattenJSON("", a, fa)
	flattenJSON("", b, fb)
	paths := slices.Concat(slices.Collect(maps.Keys(fa)), slices.Collect(maps.Keys(fb)))
	slices.Sort(paths)
	var out []string
	for _, p := range slices.Compact(paths) {
		x, okA := fa[p]
		y, okB := fb[p]
		if okA && okB && x == y {
			continue
		}
		if !okA {
			x = "absent"
		}
		if !okB {
			y = "absent"
		}
		if len(out) == limit {
			out = append(out, "...")
			break
		}
		out = append(out, fmt.Sprintf("%s %s vs %s", p, y, x))
	}
	return out
}

// flattenJSON records every leaf of v under its dotted path.
func flattenJSON(path string, v any, out map[string]string) {
	join := func(k string) string {
		if path == "" {
			return k
		}
		return path + "." + k
	}
	switch t := v.(type) {
	case map[string]any:
		for k, x := range t {
			flattenJSON(join(k), x, out)
		}
	case []any:
		for i, x := range t {
			flattenJSON(fmt.Sprintf("%s[%d]", path, i), x, out)
		}
	default:
		b, _ := json.Marshal(t)
		out[path] = string(b)
	}
}

// resolvedDigest is the SHA-256 of what every rank must resolve alike: the
// config with the trainer's values filled in, the model, the steps and the
// device kind.
func resolvedDigest(cfgPath, modelName string, targs trainerArgs) (string, error) {
	b, err := resolvedJSON(cfgPath, modelName, targs)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), nil
}

// resolvedJSON is what resolvedDigest hashes.
func resolvedJSON(cfgPath, modelName string, targs trainerArgs) ([]byte, error) {
	cfg, err := config.Load(cfgPath)
	if err != nil {
		return nil, err
	}
	fillTrainerAutos(cfg, targs)
	b, err := json.Marshal(struct {
		Config *config.Config `json:"config"`
		Model  string         `json:"model"`
		Steps  int            `json:"steps"`
		Device string         `json:"device"`
	}{cfg, modelName, targs.steps, strings.SplitN(targs.device, ":", 2)[0]})
	if err != nil {
		return nil, fmt.Errorf("resolved config: %w", err)
	}
	return b, nil
}

// devices names where the ranks compute, as rank 0 sees it: the in-process
// ranks' devices, or, for a launched job, rank 0's and the backend.
func (j *procJob) devices(dev0 tensor.Device, ranks int) string {
	if j == nil {
		return deviceRange(dev0, ranks)
	}
	return fmt.Sprintf("%s in rank 0's process, one process per rank, %s between them", dev0, j.backend)
}
