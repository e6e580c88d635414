package comm

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"
)

// FallbackTimeout is the operation deadline when neither DEEPGO_TIMEOUT nor
// DEEPSPEED_TIMEOUT is set: DeepSpeed's default process-group timeout.
const FallbackTimeout = 10 * time.Minute

// DefaultTimeout is the deadline of every operation unless a backend option
// overrides it: DEEPGO_TIMEOUT (a Go duration such as "90s", or a plain
// number of minutes), else DEEPSPEED_TIMEOUT (minutes, as DeepSpeed reads
// it), else FallbackTimeout. An unparsable or non-positive value is an
// error naming the variable.
func DefaultTimeout() (time.Duration, error) {
	for _, name := range []string{"DEEPGO_TIMEOUT", "DEEPSPEED_TIMEOUT"} {
		v := strings.TrimSpace(os.Getenv(name))
		if v == "" {
			continue
		}
		d, err := parseTimeout(v, name == "DEEPGO_TIMEOUT")
		if err != nil {
			return 0, fmt.Errorf("comm: %s=%q: %w", name, v, err)
		}
		return d, nil
	}
	return FallbackTimeout, nil
}

func parseTimeout(v string, durationOK bool) (time.Duration, error) {
	if m, err := strconv.ParseFloat(v, 64); err == nil {
		if m <= 0 {
			return 0, fmt.Errorf("must be > 0 minutes")
		}
		return time.Duration(m * float64(time.Minute)), nil
	}
	if durationOK {
		d, err := time.ParseDuration(v)
		if err == nil && d > 0 {
			return d, nil
		}
		return 0, fmt.Errorf("want a positive Go duration (\"90s\") or minutes (\"10\")")
	}
	return 0, fmt.Errorf("want a positive number of minutes")
}

// Env is the process's place in a job, as launchers describe it.
type Env struct {
	Rank, WorldSize           int
	LocalRank, LocalWorldSize int
	MasterAddr                string // host of the rendezvous store
	MasterPort                int
	// Launcher names the variables read: "torchrun" (RANK, WORLD_SIZE, ...,
	// also the DeepSpeed launcher's and deepgo launch's), "mpirun"
	// (OMPI_COMM_WORLD_*) or "slurm" (SLURM_PROCID, ...).
	Launcher string
	// Secret is the job secret (DEEPGO_JOB_SECRET) the rendezvous store
	// demands of every connection; empty only for a loopback store.
	Secret JobSecret
	// StoreLimits bound rank 0's store (DEEPGO_STORE_MAX_*; zero fields
	// take the defaults).
	StoreLimits StoreLimits
	// StoreInsecure lets rank 0 serve the store without a secret on a
	// non-loopback address (DEEPGO_STORE_INSECURE=1).
	StoreInsecure bool
}

// StoreOptions are the options rank 0 serves the store with: the secret,
// the limits (with at least four connections per rank allowed) and the
// opt-out, logging to os.Stderr.
func (e Env) StoreOptions() StoreOptions {
	l := e.StoreLimits
	if l.Conns == 0 {
		l.Conns = max(DefaultStoreConns, 4*e.WorldSize)
	}
	return StoreOptions{Secret: e.Secret, AllowInsecure: e.StoreInsecure, Limits: l}
}

// StoreAddr is MasterAddr:MasterPort.
func (e Env) StoreAddr() string { return net.JoinHostPort(e.MasterAddr, strconv.Itoa(e.MasterPort)) }

// EnvFromOS reads the launcher's variables: RANK, WORLD_SIZE, LOCAL_RANK,
// LOCAL_WORLD_SIZE (or DeepSpeed's LOCAL_SIZE), MASTER_ADDR, MASTER_PORT, as
// torchrun, the DeepSpeed launcher and deepgo launch set them; when RANK is
// absent, Open MPI's OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK, _LOCAL_SIZE;
// when those are absent too, srun's SLURM_PROCID, SLURM_NTASKS,
// SLURM_LOCALID and SLURM_NTASKS_PER_NODE (or this node's count in
// SLURM_TASKS_PER_NODE). MASTER_PORT defaults to 29500 (DeepSpeed's
// default) and MASTER_ADDR to 127.0.0.1, or under srun to the first host of
// the step's node list, where rank 0 runs (SLURM_STEP_NODELIST, else
// SLURM_NODELIST), else SLURM_LAUNCH_NODE_IPADDR.
// It also reads the job secret, DEEPGO_JOB_SECRET (at least MinSecretLen
// characters when set), and the store's DEEPGO_STORE_* limits and opt-out.
func EnvFromOS() (Env, error) { return EnvFrom(os.Getenv) }

// EnvFrom is EnvFromOS over any variable lookup (tests pass a map's).
func EnvFrom(get func(string) string) (Env, error) {
	e := Env{MasterAddr: "127.0.0.1", MasterPort: 29500}
	var names [4]string
	switch {
	case get("RANK") != "":
		e.Launcher = "torchrun"
		names = [4]string{"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"}
		if get("LOCAL_WORLD_SIZE") == "" {
			names[3] = "LOCAL_SIZE"
		}
	case get("OMPI_COMM_WORLD_RANK") != "":
		e.Launcher = "mpirun"
		names = [4]string{"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"}
	case get("SLURM_PROCID") != "":
		e.Launcher = "slurm"
		names = [4]string{"SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE"}
		if get("SLURM_NTASKS") == "" {
			names[1] = "SLURM_NPROCS"
		}
	default:
		return Env{}, fmt.Errorf("comm: no launcher environment: set RANK and WORLD_SIZE (deepgo launch, torchrun, deepspeed) or run under mpirun or srun")
	}
	if err := envInt(get, names[0], &e.Rank, true); err != nil {
		return Env{}, err
	}
	if err := envInt(get, names[1], &e.WorldSize, true); err != nil {
		return Env{}, err
	}
	e.LocalRank, e.LocalWorldSize = e.Rank, e.WorldSize
	if err := envInt(get, names[2], &e.LocalRank, false); err != nil {
		return Env{}, err
	}
	if err := envInt(get, names[3], &e.LocalWorldSize, false); err != nil {
		return Env{}, err
	}
	if e.Launcher == "slurm" {
		if err := slurmDefaults(get, &e); err != nil {
			return Env{}, err
		}
	}
	if v := strings.TrimSpace(get("MASTER_ADDR")); v != "" {
		e.MasterAddr = v
	}
	if err := envInt(get, "MASTER_PORT", &e.MasterPort, false); err != nil {
		return Env{}, err
	}
	var err error
	if e.Secret, err = jobSecretFrom(get); err != nil {
		return Env{}, err
	}
	if e.StoreLimits, e.StoreInsecure, err = storeEnvLimits(get); err != nil {
		return Env{}, err
	}
	switch {
	case e.WorldSize < 1 || e.Rank >= e.WorldSize:
		return Env{}, fmt.Errorf("comm: rank %d of world size %d: need 0 <= rank < size", e.Rank, e.WorldSize)
	case e.LocalWorldSize < 1 || e.LocalRank >= e.LocalWorldSize:
		return Env{}, fmt.Errorf("comm: local rank %d of local size %d: need 0 <= rank < size", e.LocalRank, e.LocalWorldSize)
	case e.MasterPort < 1 || e.MasterPort > 65535:
		return Env{}, fmt.Errorf("comm: MASTER_PORT=%d: want 1..65535", e.MasterPort)
	}
	return e, nil
}

// envInt reads the integer >= 0 in variable name into dst; an absent
// variable is an error only when required.
func envInt(get func(string) string, name string, dst *int, required bool) error {
	v := strings.TrimSpace(get(name))
	if v == "" {
		if required {
			return fmt.Errorf("comm: %s is not set", name)
		}
		return nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return fmt.Errorf("comm: %s=%q: want an integer >= 0", name, v)
	}
	*dst = n
	return nil
}
