package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/launch"
	"github.com/deepgo-ml/deepgo/launch/proc"
)

func init() {
	register(command{name: "launch", help: "run a program as the processes of a job (DeepSpeed's launcher flags; local, ssh, pdsh, mpirun, slurm)", run: runLaunch})
}

const launchUsage = `usage: deepgo launch [flags] -- PROGRAM ARGS...
Runs PROGRAM once per process of the job, each with RANK, LOCAL_RANK,
WORLD_SIZE, LOCAL_WORLD_SIZE, NODE_RANK, MASTER_ADDR and MASTER_PORT set as
torchrun sets them, and DEEPGO_JOB_SECRET, DEEPGO_RESTART_COUNT (and
DEEPGO_TIMEOUT with --timeout). When one process fails, the launcher stops
the others (SIGTERM, SIGKILL after --grace) and exits non-zero.
Examples:
  deepgo launch --num_procs 4 -- deepgo train --config ds.json
  deepgo launch --hostfile hosts --include "worker-0:0,1@worker-1" -- ./my-trainer
  deepgo launch --num_nodes 2 --num_procs 2 --node_rank 1 --master_addr 10.0.0.1 -- deepgo train --config ds.json
flags:
`

// launchFlags are deepgo launch's flags.
type launchFlags struct {
	opts        launch.Options
	hostfile    string
	worldInfo   string
	maxRestarts int
	timeout     time.Duration
	grace       time.Duration
	program     []string
}

func parseLaunchFlags(args []string, stderr io.Writer) (*launchFlags, error) {
	fs := flag.NewFlagSet("launch", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, launchUsage); fs.PrintDefaults() }
	var f launchFlags
	o := &f.opts
	fs.IntVar(&o.NumSlots, "num_gpus", 0, "processes per node: the first N slots of each host (0: every slot; 1 without --hostfile); sets CUDA_VISIBLE_DEVICES")
	numProcs := fs.Int("num_procs", 0, "--num_gpus for CPU processes: leaves CUDA_VISIBLE_DEVICES alone")
	fs.IntVar(&o.NumNodes, "num_nodes", 0, "nodes: the first N hosts of the hostfile, or without one N nodes started one launch each with --node_rank")
	fs.StringVar(&f.hostfile, "hostfile", "", `DeepSpeed hostfile: one "HOST slots=N" per line`)
	fs.StringVar(&o.Include, "include", "", `hosts and slots to run on, e.g. "worker-0:0,1@worker-1"`)
	fs.StringVar(&o.Exclude, "exclude", "", `hosts and slots not to run on, e.g. "worker-1:0"`)
	fs.StringVar(&o.MasterAddr, "master_addr", "", "host of rank 0, where the rendezvous store runs (default 127.0.0.1, or the first host)")
	fs.IntVar(&o.MasterPort, "master_port", launch.DefaultPort, "port of the rendezvous store (0: a free port, one node only)")
	fs.IntVar(&o.NodeRank, "node_rank", 0, "the node this launcher starts (local mode)")
	fs.StringVar(&o.Mode, "launcher", launch.Local, "how processes start: "+strings.Join(launch.Modes, ", "))
	fs.IntVar(&f.maxRestarts, "max_restarts", 0, "restart the whole job after a failure up to N times (local mode); the program resumes from its latest checkpoint")
	fs.DurationVar(&f.timeout, "timeout", 0, "the job's communication timeout, exported as DEEPGO_TIMEOUT (0: the program's default)")
	fs.DurationVar(&f.grace, "grace", 5*time.Second, "time between SIGTERM and SIGKILL when stopping the processes")
	fs.StringVar(&f.worldInfo, "world_info", "", "the job's hosts and slots, as the ssh and pdsh modes pass them to each node's launch (internal)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	set := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	if set["num_gpus"] && set["num_procs"] {
		return nil, fmt.Errorf("--num_gpus and --num_procs are the same setting: give one")
	}
	switch {
	case set["num_procs"] && *numProcs < 1:
		return nil, fmt.Errorf("--num_procs %d: want >= 1 (processes per node)", *numProcs)
	case o.NumSlots < 0:
		return nil, fmt.Errorf("--num_gpus %d: want >= 0 (0: every slot; 1 without --hostfile)", o.NumSlots)
	case o.NumNodes < 0:
		return nil, fmt.Errorf("--num_nodes %d: want >= 0 (0: every host)", o.NumNodes)
	case o.NodeRank < 0:
		return nil, fmt.Errorf("--node_rank %d: want >= 0", o.NodeRank)
	}
	o.GPUs = !set["num_procs"]
	if set["num_procs"] {
		o.NumSlots = *numProcs
	}
	if set["master_port"] && o.MasterPort == 0 && (o.NumNodes > 1 || f.hostfile != "") {
		return nil, fmt.Errorf("--master_port 0 (a free port) only works for a job on this machine alone: name the port every node uses")
	}
	switch {
	case f.maxRestarts < 0:
		return nil, fmt.Errorf("--max_restarts %d: want >= 0", f.maxRestarts)
	case f.grace <= 0:
		return nil, fmt.Errorf("--grace %v: want > 0 (the time a stopped process gets between SIGTERM and SIGKILL)", f.grace)
	case f.timeout < 0:
		return nil, fmt.Errorf("--timeout %v: want >= 0 (0: none)", f.timeout)
	}
	o.LocalSlots = 1
	switch {
	case f.worldInfo != "" && (f.hostfile != "" || o.Include != "" || o.Exclude != ""):
		return nil, fmt.Errorf("--world_info replaces --hostfile, --include and --exclude")
	case f.worldInfo != "":
		hosts, gpus, err := launch.DecodeWorld(f.worldInfo)
		if err != nil {
			return nil, err
		}
		o.Hosts, o.GPUs = hosts, gpus
	case f.hostfile != "":
		hosts, err := launch.ReadHostfile(f.hostfile)
		if err != nil {
			return nil, err
		}
		o.Hosts = hosts
	}
	f.program = fs.Args()
	if len(f.program) == 0 {
		return nil, fmt.Errorf("no program to run (deepgo launch [flags] -- PROGRAM ARGS)")
	}
	return &f, nil
}

// runLaunch: deepgo launch [flags] -- PROGRAM ARGS...
func runLaunch(args []string, stdout, stderr io.Writer) int {
	f, err := parseLaunchFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "deepgo launch:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := launchJob(ctx, f, stdout, stderr); err != nil {
		fmt.Fprintln(stderr, "deepgo launch:", err)
		return 1
	}
	return 0
}

func launchJob(ctx context.Context, f *launchFlags, stdout, stderr io.Writer) error {
	freePort := f.opts.MasterPort == 0
	if freePort {
		f.opts.MasterPort = 1 // a placeholder Resolve accepts; replaced below
	}
	plan, err := launch.Resolve(f.opts)
	if err != nil {
		return err
	}
	if freePort {
		if plan.MasterPort, err = pickPort(plan.MasterAddr); err != nil {
			return err
		}
	}
	secret := os.Getenv("DEEPGO_JOB_SECRET")
	if secret == "" {
		if plan.Mode == launch.Local && len(plan.Hosts) > 1 {
			// Each node's launch would draw its own secret, and the ranks
			// of the other nodes would be refused by rank 0's store.
			return fmt.Errorf("a job of %d nodes started by one launch per node needs the same DEEPGO_JOB_SECRET on every node: export DEEPGO_JOB_SECRET=$(openssl rand -hex 32) (at least 16 characters) before each launch", len(plan.Hosts))
		}
		if secret, err = newSecret(); err != nil {
			return err
		}
	} else if len(secret) < comm.MinSecretLen {
		// refused here rather than by every rank's store client
		return fmt.Errorf("DEEPGO_JOB_SECRET has %d characters: want at least %d (openssl rand -hex 32)", len(secret), comm.MinSecretLen)
	}
	jobEnv := []string{"DEEPGO_JOB_SECRET=" + secret}
	if f.timeout > 0 {
		jobEnv = append(jobEnv, "DEEPGO_TIMEOUT="+f.timeout.String())
	}
	if plan.Mode != launch.Local {
		return runRemote(ctx, plan, f, jobEnv, stdout, stderr)
	}
	opts := proc.Options{Grace: f.grace, Stdout: stdout, Stderr: stderr}
	for restart := 0; ; restart++ {
		err := proc.Run(ctx, nodeSpecs(plan, f.program, append(jobEnv, "DEEPGO_RESTART_COUNT="+strconv.Itoa(restart))), opts)
		if err == nil {
			return nil
		}
		var stopped *proc.Stopped
		if errors.As(err, &stopped) || restart >= f.maxRestarts {
			if f.maxRestarts > 0 {
				return fmt.Errorf("%w\n(after %d of --max_restarts %d restarts)", err, restart, f.maxRestarts)
			}
			return err
		}
		fmt.Fprintf(stderr, "deepgo launch: %v\ndeepgo launch: restarting the job (%d of --max_restarts %d)\n", err, restart+1, f.maxRestarts)
	}
}

// nodeSpecs are the processes of this launcher's node: the launcher's
// environment, the job's variables and each process's place in the world.
func nodeSpecs(plan *launch.Plan, program, jobEnv []string) []proc.Spec {
	var specs []proc.Spec
	for _, p := range plan.NodeProcs(plan.NodeRank) {
		env := mergeEnv(os.Environ(), append(slices.Clone(jobEnv), p.Env...))
		specs = append(specs, proc.Spec{Rank: p.Rank, Argv: program, Env: env})
	}
	return specs
}

// mergeEnv is base with over's variables replacing those of the same name.
func mergeEnv(base, over []string) []string {
	names := map[string]bool{}
	for _, kv := range over {
		k, _, _ := strings.Cut(kv, "=")
		names[k] = true
	}
	out := slices.DeleteFunc(slices.Clone(base), func(kv string) bool {
		k, _, _ := strings.Cut(kv, "=")
		return names[k]
	})
	return append(out, over...)
}

// runRemote runs the commands of the ssh, pdsh, mpirun and slurm modes,
// stopping them all when one fails or the launcher is stopped.
func runRemote(ctx context.Context, plan *launch.Plan, f *launchFlags, jobEnv []string, stdout, stderr io.Writer) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	dir, _ := os.Getwd()
	exports := slices.Clone(jobEnv)
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if (strings.HasPrefix(k, "DEEPGO_") || strings.HasPrefix(k, "NCCL_") || strings.HasPrefix(k, "GLOO_")) && !slices.ContainsFunc(jobEnv, func(j string) bool { return strings.HasPrefix(j, k+"=") }) {
			exports = append(exports, kv)
		}
	}
	slices.Sort(exports[len(jobEnv):])
	nodeArgs := []string{"--grace", f.grace.String(), "--max_restarts", strconv.Itoa(f.maxRestarts)}
	cmds, err := plan.Commands(launch.Remote{Self: self, Dir: dir, Exports: exports, NodeArgs: nodeArgs, Program: f.program})
	if err != nil {
		return err
	}
	specs := make([]proc.Spec, len(cmds))
	for i, c := range cmds {
		name := plan.Mode
		if c.Host != "" {
			name = plan.Mode + " " + c.Host
		}
		specs[i] = proc.Spec{Rank: i, Name: name, Argv: c.Argv, Env: os.Environ()}
	}
	return proc.Run(ctx, specs, proc.Options{Grace: f.grace, Stdout: stdout, Stderr: stderr})
}

// pickPort returns a port free on addr now (the store binds it moments later).
func pickPort(addr string) (int, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(addr, "0"))
	if err != nil {
		return 0, fmt.Errorf("--master_port 0: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// newSecret is a random per-job secret: 32 bytes, hex.
func newSecret() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("job secret: %w", err)
	}
	return hex.EncodeToString(b), nil
}
