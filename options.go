package deepgo

import (
	"io"

	"github.com/deepgo-ml/deepgo/backend"
	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/monitor"
	"github.com/deepgo-ml/deepgo/optim"
	"github.com/deepgo-ml/deepgo/tensor"
)

// Option configures Initialize.
type Option func(*options)

type options struct {
	comm    comm.Comm
	tp      comm.Comm
	sp      comm.Comm
	backend backend.Backend
	opt     optim.Optimizer
	store   optim.StateStore
	device  *tensor.Device
	log     io.Writer
	monitor []monitor.Option
}

// WithComm runs the engine as one rank of the data-parallel group c (for
// in-process ranks: one comm/local rank per goroutine, the c that
// local.Run hands each). Without it the engine is a world of one; inside a
// local.Run of several ranks that is refused (each rank would train alone)
// unless WithTensorParallel or WithSequenceParallel gives it its groups.
func WithComm(c comm.Comm) Option { return func(o *options) { o.comm = c } }

// WithBackend computes on b (the caller closes it). Without it the engine
// computes on the backend its comm carries (comm/local and comm/mpi ranks
// carry their CPU pool, sized by their Options.Threads: the one place the
// thread count is set), else on a CPU backend of its own with
// GOMAXPROCS/world threads, closed on Close. Modules reach the engine's
// backend through backend.FromContext on the context their Forward,
// Backward and the model's Loss receive.
func WithBackend(b backend.Backend) Option { return func(o *options) { o.backend = b } }

// WithOptimizer uses a client optimizer instead of the config's
// "optimizer" section (DeepSpeed's client optimizer). ZeRO steps it on the
// rank's shard; the engine does not close it.
func WithOptimizer(opt optim.Optimizer) Option { return func(o *options) { o.opt = opt } }

// WithStateStore keeps the config optimizer's state in s (where CPU
// offload and NVMe swapping plug in: the step runs where the state lives).
func WithStateStore(s optim.StateStore) Option { return func(o *options) { o.store = s } }

// WithDevice computes on dev: "cpu" (the default), a simulated device
// ("sim:N", package sim: memory Go may not read, kernels queued on a
// stream; what CI proves the device path on) or a GPU ("cuda:N", build tag
// cuda). The engine makes the device's backend and closes it on Close; on
// a device it needs a comm that moves that device's memory: an NCCL comm
// (package nccl) passed with WithComm is one; otherwise the backend wraps
// WithComm's comm, or its own world of one (the simulated device orders it
// after its stream; a GPU stages the collectives through host memory,
// package comm/staged, which serves ranks sharing one GPU).
// tensor.ParseDevice reads the names. WithBackend wins over WithDevice.
func WithDevice(dev tensor.Device) Option { return func(o *options) { o.device = &dev } }

// WithLog sends what the engine logs as DeepSpeed does (comms_logger's
// per-operation lines, flops_profiler's report when it has no output_file,
// wall_clock_breakdown lines, the §6 target warnings) to w. Without it
// rank 0 logs to standard error and the other ranks nowhere.
func WithLog(w io.Writer) Option { return func(o *options) { o.log = w } }
