package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/deepgo-ml/deepgo"
	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/config"
	"github.com/deepgo-ml/deepgo/data"
	"github.com/deepgo-ml/deepgo/model"
	"github.com/deepgo-ml/deepgo/monitor"
	"github.com/deepgo-ml/deepgo/nn"
	"github.com/deepgo-ml/deepgo/tensor"
)

func init() {
	register(command{name: "train", help: "train a GPT (synthetic Markov corpus unless --data) with in-process ranks", run: runTrain})
}

// trainModels are the --model choices: GPT sizes and the synthetic source.
var trainModels = map[string]struct {
	gpt                  nn.GPTConfig
	vocab, branch, steps int
}{
	"tiny":  {nn.GPTConfig{Layers: 1, Heads: 2, Width: 32, SeqLen: 16}, 16, 2, 300},
	"small": {nn.GPTConfig{Layers: 2, Heads: 4, Width: 64, SeqLen: 32}, 32, 3, 600},
}

// trainResult is deepgo train's JSON line (trainJSONHelp documents its
// keys).
type trainResult struct {
	// FinalLoss is the mean loss of the last FinalLossSteps steps: the
	// last tenth of --steps (at least one), fewer when the run resumed
	// inside that tenth.
	FinalLoss      float64 `json:"final_loss"`
	FinalLossSteps int     `json:"final_loss_steps"`
	// SkippedSteps counts this run's optimizer steps skipped for fp16
	// gradient overflow.
	SkippedSteps int      `json:"skipped_steps"`
	EntropyFloor *float64 `json:"entropy_floor,omitempty"`
	// EvalLoss is the last evaluation's loss (after the last step); nil
	// when evaluation is off.
	EvalLoss     *float64 `json:"eval_loss,omitempty"`
	Steps        int      `json:"steps"`
	TokensPerSec float64  `json:"tokens_per_s"`
	WallSeconds  float64  `json:"wall_s"`
	PeakMemory   []int64  `json:"peak_memory_per_rank_bytes"`
	Ranks        int      `json:"ranks"`
	Device       string   `json:"device"` // cpu, sim or cuda: the kind every rank computes on
	// Losses are this run's training losses, one per step (rank 0's: the
	// mean over the data-parallel ranks).
	Losses []float64 `json:"-"`
	// EvalLosses are this run's evaluations' losses, in order.
	EvalLosses []float64 `json:"-"`
	// NothingToTrain is set when the checkpoint resumed from is already
	// at or past --steps: no step ran, and there is no result to report.
	NothingToTrain bool `json:"-"`
}

// trainUsage is deepgo train's help, before its flags.
const trainUsage = `usage: deepgo train --config FILE [flags]

Trains a GPT on in-process ranks (or one rank per process under deepgo
launch). Rank 0 prints the config's notes, "note: <key>: no effect: <why>"
for each key that loads but does nothing in deepgo, a line every
steps_per_print steps, "step N: gradient overflow, step skipped, loss scale
A -> B" for each fp16 step skipped, with --eval-interval N "step S eval
loss L (ppl P)" every N steps and after the last (L the mean loss over
--eval-iters held-out micro-batches per data-parallel rank, P = exp(L)),
then (synthetic corpus) "final loss (mean of the last K steps) L vs
entropy floor F", and last one JSON line:
` + trainJSONHelp + `
With checkpoint.save_dir the run saves a checkpoint every steps_per_print
steps (default 50) and at the end, and resumes from the latest checkpoint
there (a damaged one stops the run, listing those that verify; --resume-fallback
takes the newest of them). checkpoint.load_path (a save directory, or one
checkpoint's folder, e.g. DIR/global_step5) only seeds a run whose save_dir
holds no checkpoint yet: once save_dir has one, every restart resumes from
it and prints a line saying it set load_path aside. When that checkpoint is
already at or past --steps there is nothing to train: train says so and
exits 0 without a JSON line.
SIGINT (Ctrl-C) or SIGTERM (deepgo launch stopping the job, a scheduler)
stops the run: rank 0 prints "deepgo train: interrupted at step N (last
checkpoint: DIR/TAG or none)" ("before step 1 finished" when no step has)
and every rank exits 128+signal (130, 143).
With checkpoint.writer.decoupled true the checkpoints are written in the
background while the next steps train ("saved checkpoint DIR/TAG (written
in the background)" once committed); the run's end waits for the last one
and an interrupt for the one in flight (a second interrupt exits at once;
under deepgo launch its --grace bounds the wait).
A rank that stops answering fails the others, naming it, after the
communication timeout: 5 minutes between in-process ranks; between
launched processes DEEPGO_TIMEOUT (a Go duration such as 90s, or minutes),
else DEEPSPEED_TIMEOUT (minutes), else 10 minutes (deepgo launch --timeout
sets DEEPGO_TIMEOUT).
Arguments after the flags are an error (flags after them would be ignored).

flags:
`

// trainJSONHelp documents the keys of deepgo train's JSON line.
const trainJSONHelp = `  final_loss                  mean loss of the last final_loss_steps steps
  final_loss_steps            the last tenth of --steps (at least 1), fewer
                              when the run resumed inside that tenth
  entropy_floor               the synthetic source's entropy, nats/token
                              (absent with --data)
  eval_loss                   the last evaluation's loss (absent without
                              --eval-interval)
  steps                       --steps: the step the run ends at
  skipped_steps               this run's steps skipped for fp16 overflow
  tokens_per_s                tokens trained per second by this run
                              (evaluations' time left out)
  wall_s                      seconds the run took
  peak_memory_per_rank_bytes  each rank's peak model states + activations
  ranks                       ranks in all (every parallel dimension)
  device                      cpu, sim or cuda
`

// defaultStepsPerPrint is deepgo train's interval of step lines and
// checkpoints when steps_per_print is unset (the monitor's default too).
const defaultStepsPerPrint = 50

// runTrain: deepgo train --config FILE [--data PATH] [--model small|tiny].
func runTrain(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("train", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, trainUsage); fs.PrintDefaults() }
	cfgPath := fs.String("config", "", "DeepSpeed JSON config (required)")
	dataPath := fs.String("data", "", "token data: .arrow, .parquet (column input_ids) or any other file as bytes; default: a synthetic Markov corpus")
	modelName := fs.String("model", "small", "model size: small or tiny")
	ranks := fs.Int("ranks", 0, "in-process data-parallel ranks (0: what the config's batch triad implies, at most 8 when it leaves gradient_accumulation_steps open; else 2)")
	steps := fs.Int("steps", 0, "optimizer steps (0: the model's default)")
	micro := fs.Int("micro-batch", 8, "micro-batch per rank, when the config leaves it absent or \"auto\" with no train_batch_size (given here: beside one too, the accumulation steps following); a config's own and another --micro-batch is an error")
	lr := fs.Float64("lr", 1e-3, "learning rate, when the config has no optimizer, or its lr is \"auto\" (given here: absent or null too); a config's own lr and another --lr is an error")
	fallback := fs.Bool("resume-fallback", false, "when the latest checkpoint is damaged, resume from the newest one that verifies (and say so)")
	moduleOnly := fs.Bool("load-module-only", false, loadModuleOnlyHelp)
	device := fs.String("device", "cpu", deviceFlagHelp)
	metricsAddr := fs.String("metrics-addr", "", "serve Prometheus /metrics on this address while training (\":9090\" binds 127.0.0.1; \"0.0.0.0:9090\" every interface, unauthenticated)")
	nanEvery := fs.Int("nan-check-every", monitor.DefaultFiniteCheckEvery, "check the parameters for NaN/Inf every N optimizer steps")
	evalInterval := fs.Int("eval-interval", 0, "evaluate on held-out data every N optimizer steps (of the global step, also after a resume) and after the last; 0: no evaluation. Held out: a second synthetic corpus from the same Markov source, or the last 5% of --data's windows (training gets the rest)")
	evalIters := fs.Int("eval-iters", 0, "micro-batches per evaluation per data-parallel rank, the same ones every time (default: gradient_accumulation_steps)")
	saveModel := fs.String("save-model", "", "after the last step, write the trained weights, whole and in the model's dtype, to DIR/"+deepgo.DefaultModelFile+" (DeepSpeed's save_16bit_model; at ZeRO stage 3 it needs zero_optimization.stage3_gather_16bit_weights_on_model_save true)")
	freeze := fs.String("freeze", "", freezeFlagHelp)
	backend := fs.String("dist-backend", "", "between the processes of a launched job (RANK/WORLD_SIZE, OMPI_* or SLURM_* set, no --ranks): gloo, mpi or nccl (default: DEEPGO_DIST_BACKEND, else nccl with --device cuda, gloo otherwise)")
	moeConfig := moeFlags(fs)
	if err := fs.Parse(args); err != nil {
		return flagExit(err)
	}
	err := checkTrainFlags(fs.Args(), *steps, *ranks, *micro, *nanEvery, *lr)
	moe, merr := moeConfig()
	if merr != nil && err == nil {
		err = merr
	}
	evalItersGiven := false
	fs.Visit(func(f *flag.Flag) { evalItersGiven = evalItersGiven || f.Name == "eval-iters" })
	if eerr := checkEvalFlags(*evalInterval, *evalIters, evalItersGiven); eerr != nil && err == nil {
		err = eerr
	}
	if _, ok := trainModels[*modelName]; !ok && err == nil {
		err = fmt.Errorf("--model %q: want small or tiny", *modelName)
	}
	freezeRE, ferr := parseFreeze(*freeze)
	if ferr != nil && err == nil {
		err = ferr
	}
	if _, derr := tensor.ParseDevice(*device); derr != nil && err == nil {
		err = fmt.Errorf("--device %q: %w", *device, derr)
	}
	if err != nil { // a bad flag value is a usage error, as flag.Parse's are
		fmt.Fprintln(stderr, "deepgo train:", err)
		return 2
	}
	ranksGiven, lrGiven, microGiven := false, false, false
	fs.Visit(func(f *flag.Flag) {
		ranksGiven = ranksGiven || f.Name == "ranks"
		lrGiven = lrGiven || f.Name == "lr"
		microGiven = microGiven || f.Name == "micro-batch"
	})
	job, err := launchedJob(ranksGiven, *backend, *device, os.Getenv)
	if err == nil && job == nil && *backend != "" {
		err = unusedBackend(*backend)
		if err == nil {
			fmt.Fprintf(stderr, "deepgo train: note: --dist-backend %s: no effect: the ranks run in this process and talk through its memory; it chooses how the processes of a launched job (RANK and WORLD_SIZE set, deepgo launch) talk\n", *backend)
		}
	}
	if err != nil {
		fmt.Fprintln(stderr, "deepgo train:", err)
		return 2
	}
	if evalItersGiven && *evalInterval == 0 && job.rank() == 0 {
		fmt.Fprintf(stderr, "deepgo train: note: --eval-iters %d: no effect: evaluation is off (--eval-interval 0)\n", *evalIters)
	}
	if job.rank() != 0 {
		*metricsAddr = "" // one /metrics per job, on rank 0
	}
	if *cfgPath == "" {
		fmt.Fprintln(stderr, "deepgo train: --config is required")
		return 2
	}
	progress := &trainProgress{}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, interruptSignals...)
	defer func() { signal.Stop(sig); close(sig) }()
	go watchInterrupt(sig, progress, job.rank() == 0, stderr, os.Exit)
	res, err := train(*cfgPath, *dataPath, *modelName, *ranks, *steps, trainerArgs{microBatch: *micro, microGiven: microGiven, lr: *lr, lrGiven: lrGiven, resumeFallback: *fallback, loadModuleOnly: *moduleOnly, device: *device, metricsAddr: *metricsAddr, nanCheckEvery: *nanEvery, job: job, progress: progress,
		evalInterval: *evalInterval, evalIters: *evalIters, saveModel: *saveModel, freeze: freezeRE, moe: moe}, stdout, stderr)
	if err != nil {
		if code, ok := progress.awaitInterrupt(time.Minute); ok {
			// the interrupt's exit has not ended the process within a
			// minute (or it was a test's): its status stands, the
			// failure is a note
			fmt.Fprintln(stderr, "deepgo train: after the interrupt:", err)
			return code
		}
	}
	if err != nil && job != nil {
		fmt.Fprintf(stderr, "deepgo train: rank %d: %v\n", job.rank(), err)
		return 1
	}
	if err != nil {
		fmt.Fprintln(stderr, "deepgo train:", err)
		return 1
	}
	if job.rank() != 0 || res.NothingToTrain {
		return 0 // rank 0 reports the job; a run with no step has no result
	}
	b, _ := json.Marshal(res)
	fmt.Fprintln(stdout, string(b))
	return 0
}

// checkTrainFlags refuses what flag.Parse lets through: arguments left
// after the flags (the flags after them were not parsed) and negative
// counts.
func checkTrainFlags(rest []string, steps, ranks, micro, nanEvery int, lr float64) error {
	switch {
	case len(rest) > 0:
		return fmt.Errorf("unexpected argument %q (all: %q): deepgo train takes flags only, and stops reading flags at the first other argument", rest[0], rest)
	case steps < 0:
		return fmt.Errorf("--steps %d: want >= 0 (0: the model's default)", steps)
	case ranks < 0:
		return fmt.Errorf("--ranks %d: want >= 0 (0: the default, see -ranks in --help)", ranks)
	case micro < 1:
		return fmt.Errorf("--micro-batch %d: want >= 1", micro)
	case nanEvery < 1:
		return fmt.Errorf("--nan-check-every %d: want >= 1 (optimizer steps between NaN/Inf checks of the parameters)", nanEvery)
	case !(lr >= 0) || math.IsInf(lr, 1):
		// checked here, where the flag is known: once written into the
		// config, a bad one would be reported as optimizer.params.lr
		return fmt.Errorf("--lr %v: want a finite number >= 0", lr)
	}
	return nil
}

// unusedBackend checks a --dist-backend given to a run whose ranks are all
// in this process, where it has nothing to choose: a bad name is still an
// error.
func unusedBackend(name string) error {
	if !slices.Contains(distBackends, name) {
		return fmt.Errorf("--dist-backend %q: want one of %s", name, strings.Join(distBackends, ", "))
	}
	return nil
}

func train(cfgPath, dataPath, modelName string, ranks, steps int, targs trainerArgs, stdout, stderr io.Writer) (*trainResult, error) {
	mc, ok := trainModels[modelName]
	if !ok {
		return nil, fmt.Errorf("--model %q: want small or tiny", modelName)
	}
	if steps < 0 || ranks < 0 {
		return nil, fmt.Errorf("--steps %d, --ranks %d: want >= 0 (0: the default)", steps, ranks)
	}
	if steps == 0 {
		steps = mc.steps
	}
	// the parallel shape, read once; a config that does not load is
	// reported here, once, rather than by whichever rank's config.Load
	// failed first ("rank 63: config: ...")
	shape, err := config.Load(cfgPath)
	if err != nil {
		return nil, err
	}
	if err := checkLRFlag(cfgPath, shape, targs); err != nil {
		return nil, err
	}
	if err := checkMicroFlag(cfgPath, shape, targs); err != nil {
		return nil, err
	}
	pp, virtual := pipeShape(shape)
	tp := tpSize(shape)
	sp := spSize(shape)
	if err := checkMoEShape(targs.moe, pp, tp, sp); err != nil {
		return nil, err
	}
	if err := checkEvalPipe(shape, pp, targs.evalInterval, targs.evalIters); err != nil {
		return nil, err
	}
	if err := (&resumer{moduleOnly: targs.loadModuleOnly}).check(shape); err != nil {
		return nil, fmt.Errorf("%s: %w", cfgPath, err)
	}
	if err := checkSaveModel(shape, targs.saveModel, targs.job.rank()); err != nil {
		return nil, fmt.Errorf("%s: %w", cfgPath, err)
	}
	if err := deepgo.Unsupported(shape); err != nil {
		// before any rank starts (Ulysses with megatron_sequence_parallel
		// among them), in the words deepgo config check uses
		return nil, fmt.Errorf("%s: %w", cfgPath, err)
	}
	if targs.job != nil {
		// one rank per process: the launcher's world holds every stage
		if w := targs.job.env.WorldSize; w%(pp*tp*sp) != 0 {
			return nil, fmt.Errorf("WORLD_SIZE %d is not a multiple of the config's %d pipeline stages x %d tensor-parallel x %d sequence-parallel ranks", w, pp, tp, sp)
		}
		ranks = targs.job.env.WorldSize / (pp * tp * sp)
	}
	if ranks <= 0 {
		var note string
		ranks, note = impliedRanks(shape)
		if note != "" {
			fmt.Fprintf(stderr, "note: %s\n", note)
		}
	}
	// pipeline stages × data-parallel ranks (train_pipe.go) × tensor-parallel
	// ranks (train_tp.go) × sequence-parallel ranks (train_sp.go)
	world := ranks * pp * tp * sp
	targs.steps = steps // before the ranks start: they share targs
	var corpus *data.Tokens
	var floor *float64
	evals := &evalSource{interval: targs.evalInterval, iters: targs.evalIters, dataPath: dataPath}
	switch {
	case dataPath == "":
		m, err := data.NewMarkov(mc.vocab, 1, mc.branch, 3)
		if err != nil {
			return nil, err
		}
		h := m.EntropyRate()
		floor = &h
		corpus = &data.Tokens{IDs: m.Generate(400000, 4), Vocab: mc.vocab}
		evals.markov = m
	case strings.HasSuffix(dataPath, ".arrow"):
		corpus, err = data.ReadArrow(dataPath, "input_ids")
	case strings.HasSuffix(dataPath, ".parquet"):
		corpus, err = data.ReadParquet(dataPath, "input_ids")
	default:
		corpus, err = data.ReadText(dataPath)
	}
	if err != nil {
		return nil, err
	}
	gcfg := mc.gpt
	gcfg.Vocab = corpus.Vocab
	if h, w := parallelHeads(gcfg.Heads, gcfg.Width, tp*sp); h != gcfg.Heads {
		fmt.Fprintf(stderr, "note: --model %s: %d heads of width %d instead of %d of %d: tensor_model_parallel_size %d x sequence_parallel_size %d split the heads\n",
			modelName, h, w/h, gcfg.Heads, gcfg.Width/gcfg.Heads, tp, sp)
		gcfg.Heads, gcfg.Width = h, w
	}
	if v := parallelVocab(gcfg.Vocab, tp); v != gcfg.Vocab {
		fmt.Fprintf(stderr, "note: vocab %d padded to %d, a multiple of tensor_model_parallel_size %d (as Megatron pads it): the %d padded ids are never targets\n",
			gcfg.Vocab, v, tp, v-gcfg.Vocab)
		gcfg.Vocab = v
	}
	if targs.freeze != nil {
		trained := gcfg // the GPT the ranks build: its experts, a block per pipeline stage
		trained.MoE = targs.moe
		trained.Layers = pipeLayers(trained.Layers, pp, virtual)
		line, err := checkFreeze(targs.freeze, trained)
		if err != nil {
			return nil, err
		}
		if targs.job.rank() == 0 {
			fmt.Fprintln(stderr, "note:", line)
		}
	}
	seqSplit := sp // Ulysses splits every sequence over the SP ranks, Megatron SP over the TP ranks
	if tp > 1 && shape.MegatronSequenceParallel {
		seqSplit *= tp
	}
	if t := parallelSeqLen(gcfg.SeqLen, seqSplit); t != gcfg.SeqLen {
		fmt.Fprintf(stderr, "note: --model %s: context T %d instead of %d: the %d ranks splitting each sequence need a multiple of %d\n",
			modelName, t, gcfg.SeqLen, seqSplit, seqSplit)
		gcfg.SeqLen = t
	}
	T := gcfg.SeqLen
	if targs.device == "" {
		targs.device = "cpu"
	}
	dev0, err := rankDevice(targs.device, 0, os.Getenv) // refuse a bad --device before the ranks start
	if err != nil {
		return nil, err
	}
	inProc := world
	if targs.job != nil {
		inProc = 1
	}
	gpipe := gcfg
	gpipe.Layers = pipeLayers(gpipe.Layers, pp, virtual)
	if err := checkMicroBatchMemory(shape, trainShape{gpt: gpipe, world: world, inProc: inProc, tp: tp, pp: pp, sp: sp,
		device: deviceKind(dev0), flagMicro: targs.microBatch, flagMicroGiven: targs.microGiven}, uint64(max(0, monitor.HostMemoryBytes()))); err != nil {
		return nil, err
	}
	res := &trainResult{Steps: steps, Ranks: world, PeakMemory: make([]int64, world), Device: deviceKind(dev0)}
	var mu sync.Mutex
	rs := &resumer{fallback: targs.resumeFallback, moduleOnly: targs.loadModuleOnly}
	metrics, err := serveTrainMetrics(targs.metricsAddr, stdout)
	if err != nil {
		return nil, err
	}
	if metrics != nil {
		defer metrics.Close()
	}
	start := time.Now()
	err = targs.job.runRanks(world, cfgPath, modelName, targs, res.PeakMemory, func(ctx context.Context, c comm.Comm) (err error) {
		// the model's width sizes the "auto" ZeRO buckets, as HF's
		// Trainer sizes them from hidden_size
		cfg, err := config.Load(cfgPath, config.WithModelHidden(gcfg.Width))
		if err != nil {
			return err
		}
		autoNotes := fillTrainerAutos(cfg, targs)
		ac := cfg.ActivationCheckpointing
		g := gcfg
		g.Layers = pipeLayers(g.Layers, pp, virtual)
		g.Checkpointing = nn.Checkpointing{Enabled: ac.NumberCheckpoints != nil || ac.PartitionActivations || ac.CPUCheckpointing,
			PartitionActivations: ac.PartitionActivations, CPUCheckpointing: ac.CPUCheckpointing,
			ContiguousMemoryOptimization: ac.ContiguousMemoryOptimization, SynchronizeCheckpointBoundary: ac.SynchronizeCheckpointBoundary, Profile: ac.Profile}
		if ac.NumberCheckpoints != nil {
			g.Checkpointing.NumberCheckpoints = *ac.NumberCheckpoints
		}
		// sequence_parallel.attention_window_size is the model's attention window
		g.AttentionWindow = cfg.SequenceParallel.AttentionWindowSize
		tpg, tpOpts, spg, err := parallelRank(ctx, c, tp, sp, pp)
		if err != nil {
			return err
		}
		g.TP = tpg
		// megatron_sequence_parallel with TP 1 is config.Load's warning
		g.TP.SequenceParallel = tp > 1 && cfg.MegatronSequenceParallel
		if spg != nil {
			g.SP = spg.sp
		}
		g.MoE = targs.moe
		gpt, err := nn.NewReadyGPT(g, nil, 1) // computes on the engine's backend
		if err != nil {
			return err
		}
		defer gpt.Free()
		applyFreeze(gpt, targs.freeze)
		opts, dev, err := rankOptions(targs.device, c, targs.job.inProcRank(c)) // cpu: on the rank's 1-thread pool
		if err != nil {
			return err
		}
		opts = append(opts, tpOpts...)
		if spg != nil {
			opts = append(opts, spg.opts...)
		}
		log := io.Discard // DeepSpeed's reports (flops_profiler, comms_logger lines) from rank 0
		if c.Rank() == 0 {
			log = stdout
		}
		every := defaultStepsPerPrint
		if cfg.StepsPerPrint != nil && *cfg.StepsPerPrint > 0 {
			every = *cfg.StepsPerPrint
		}
		mopts := []monitor.Option{monitor.WithPrintEvery(every), monitor.WithFiniteCheck(targs.nanCheckEvery, nil)}
		if metrics != nil && c.Rank() == 0 {
			mopts = append(mopts, monitor.WithWriter(metrics))
		}
		opts = append(opts, deepgo.WithLog(log), deepgo.WithMonitorOptions(mopts...))
		e, err := deepgo.Initialize(ctx, cfg, gpt, opts...)
		if err != nil {
			return err
		}
		defer e.Close()
		rank := c.Rank()
		if rank == 0 {
			notes := append(append(autoNotes, gpt.Notes()...), e.Notes()...) // config warnings among them
			notes = append(notes, decoupledNotes(cfg)...)
			notes = append(notes, saveModelNotes(cfg, targs.saveModel)...)
			notes = append(notes, trainNoEffectNotes(cfg, notes)...)
			for _, n := range notes {
				fmt.Fprintln(stdout, "note:", n)
			}
			fmt.Fprintf(stdout, "training GPT %d layers x %d wide, %d params, vocab %d, T %d, %d ranks, ZeRO stage %d, %d steps, on %s\n",
				g.Layers, g.Width, nn.NumParams(gpt), g.Vocab, T, world, cfg.ZeroOptimization.Stage, steps, targs.job.devices(dev, world))
			if pp > 1 {
				fmt.Fprintln(stdout, pipeBanner(cfg, pp, ranks, e.BatchSizes().GradAccum))
			}
			if tp > 1 {
				fmt.Fprintf(stdout, "tensor parallel: %d ranks x %d data-parallel ranks (the params above are one rank's shards)\n", tp, ranks)
				if g.TP.SequenceParallel {
					fmt.Fprintf(stdout, "megatron sequence parallel: the residual stream and LayerNorms split along the sequence, %d tokens of each per rank\n", T/tp)
				}
			}
			if g.MoE.On() {
				fmt.Fprintf(stdout, "mixture of experts: %d experts, top-%d, in %d of %d blocks, capacity factor %g (eval %g), min capacity %d, drop tokens %v; the losses below include loss coeff %g x the layers' l_aux\n",
					g.MoE.Experts, max(g.MoE.K, 1), len(gpt.MoEStats()), g.Layers, g.MoE.CapacityFactor, g.MoE.EvalCapacityFactor, g.MoE.MinCapacity, g.MoE.DropTokens, g.MoE.LossCoeff)
			}
			if sp > 1 {
				fmt.Fprintf(stdout, "sequence parallel (Ulysses): %d ranks x %d data-parallel ranks, %d tokens of each sequence per rank\n", sp, ranks, T/sp)
			}
		}
		dr, dn := dataRank(rank, c.Size(), pp, tp)
		if spg != nil {
			dr, dn = spg.dr, spg.dn // every SP rank is handed its data rank's micro-batches
		}
		B, gas := e.BatchSizes().MicroBatch, e.BatchSizes().GradAccum
		tokens, ev, evNote, err := evals.plan(corpus, T, B, gas, dr, dn, spg)
		if err != nil {
			return err
		}
		if rank == 0 && evNote != "" {
			fmt.Fprintln(stdout, "note:", evNote)
		}
		s, err := data.NewDistributedSampler(tokens.NumWindows(T), dr, dn, 5, true)
		if err != nil && dataPath != "" {
			return fmt.Errorf("--data %s: %d tokens make %d windows of %d (+1) tokens, and each of the %d data-parallel ranks needs at least one (at least %d tokens): %w",
				dataPath, len(tokens.IDs), tokens.NumWindows(T), T, dn, dn*T+1, err)
		}
		if err != nil {
			return err
		}
		tm, err := newTrainMonitor(cfg, e, rank, runMeta{world: c.Size(), dev: dev, params: nn.NumParams(gpt), floor: floor, steps: steps}, stdout)
		if err != nil {
			return err
		}
		defer func() { err = errors.Join(err, tm.close()) }()
		if rank == 0 {
			targs.progress.atInterrupt(tm.interrupt)
		}
		targs.progress.atInterrupt(func(int) error { return removeSwapFolders(cfg, rank) })
		rd, err := rs.resume(ctx, cfg, e, s)
		if err != nil {
			return err
		}
		first := rd.first
		if rank == 0 && rd.why != "" {
			fmt.Fprintln(stdout, rd.why)
		}
		if rank == 0 && rd.note != "" {
			fmt.Fprintln(stdout, "note:", rd.note)
		}
		if rank == 0 {
			for _, n := range rd.loadNotes {
				fmt.Fprintln(stdout, "note:", n)
			}
		}
		if first > steps {
			// every rank loaded the same checkpoint: none trains, none
			// saves a checkpoint; --save-model exports the one loaded
			if rank == 0 {
				fmt.Fprintf(stdout, "nothing to train: the checkpoint in %s is at step %d, at or past --steps %d; give a larger --steps to train on\n", rd.dir, first-1, steps)
				res.NothingToTrain = true
			}
			return saveModel(ctx, e, targs.saveModel, rank, stdout, func() {})
		}
		if rank == 0 && first > 1 {
			fmt.Fprintf(stdout, "resumed at step %d from %s\n", first-1, rd.dir)
		}
		if rank == 0 {
			targs.progress.setSaveDir(cfg.Checkpoint.SaveDir)
			targs.progress.setStep(first - 1)
		}
		saver := newTrainSaver(cfg)
		if saver.background {
			// an interrupt waits for the checkpoint being written
			targs.progress.atInterruptWait(e.SaveDone)
		}
		// the engine's count of skipped steps (a checkpoint restores it):
		// each step that raises it overflowed
		skipper, _ := e.(interface{ SkippedSteps() int })
		skipped0 := 0
		if skipper != nil {
			skipped0 = skipper.SkippedSteps()
		}
		skipped := skipped0
		var tail float64
		var tailN int
		bar := newProgress(stderr, steps)
		defer bar.clear()
		t0 := time.Now()
		var evalTime time.Duration // not training: out of tokens/s
		for step := first; step <= steps; step++ {
			mbs, err := microBatches(tokens, s, spg, gas, B, T)
			if err != nil {
				return err
			}
			scale := e.LossScale()
			loss, err := e.TrainBatch(ctx, mbs) // which feeds the engine's monitor
			if err != nil {
				return err
			}
			if rank == 0 {
				// before its step line and checkpoint: an interrupted line
				// never names a step before the checkpoint it names
				targs.progress.setStep(step)
			}
			if skipper != nil && skipper.SkippedSteps() > skipped {
				skipped = skipper.SkippedSteps()
				if rank == 0 {
					bar.clear()
					fmt.Fprintf(stdout, "step %d: gradient overflow, step skipped, loss scale %s -> %s\n",
						step, strconv.FormatFloat(scale, 'f', -1, 64), strconv.FormatFloat(e.LossScale(), 'f', -1, 64))
				}
			}
			// the final loss is the mean of the last tenth of the steps (at least one)
			if last := max(1, steps/10); step > steps-last {
				tail += loss
				tailN++
			}
			mem := e.Memory().ModelStates() + gpt.ActivationStats().Bytes + gpt.ActivationStats().ScratchBytes
			if pe, ok := e.(interface{ ActivationBytes() int64 }); ok {
				mem += pe.ActivationBytes() // what the engine holds: a pipeline's stage parts, the data-parallel engine's arena and checkpoints
			}
			mu.Lock()
			res.PeakMemory[rank] = max(res.PeakMemory[rank], mem)
			mu.Unlock()
			if rank == 0 {
				res.Losses = append(res.Losses, loss)
				bar.update(step, loss)
			}
			if rank == 0 && (step%every == 0 || step == steps) {
				printMoE(stdout, gpt, step)
			}
			if rank == 0 && (step%every == 0 || step == steps) {
				tps := float64((step-first+1)*B*gas*T*dn) / (time.Since(t0) - evalTime).Seconds()
				bar.clear()
				fmt.Fprintf(stdout, "step %d loss %.4f lr %.3g loss_scale %g tokens/s %.0f mem/rank %d\n", step, loss, e.LR(), e.LossScale(), tps, mem)
			}
			if ev.due(step, steps) {
				t := time.Now()
				el, err := ev.run(ctx, e, gpt)
				if err != nil {
					return fmt.Errorf("evaluation at step %d: %w", step, err)
				}
				evalTime += time.Since(t)
				if rank == 0 {
					bar.clear()
					fmt.Fprintf(stdout, "step %d eval loss %.4f (ppl %.4g)\n", step, el, math.Exp(el))
					res.EvalLosses = append(res.EvalLosses, el)
					res.EvalLoss = &el
				}
			}
			if cfg.Checkpoint.SaveDir != "" && (step%every == 0 || step == steps) {
				tags, err := saver.save(ctx, e, s)
				if err != nil {
					return err
				}
				for _, tag := range tags {
					if rank == 0 {
						bar.clear()
						fmt.Fprintln(stdout, saver.savedLine(tag))
					}
				}
			}
		}
		// the last background save is part of the run: its error is the
		// run's (Close, deferred, would wait for it but drop the error)
		last, err := saver.wait(e)
		if err != nil {
			return err
		}
		if last != "" && rank == 0 {
			bar.clear()
			fmt.Fprintln(stdout, saver.savedLine(last))
		}
		if err := saveModel(ctx, e, targs.saveModel, rank, stdout, bar.clear); err != nil {
			return err
		}
		if cs, ok := e.(interface{ CommsSummary(io.Writer) error }); ok && cfg.CommsLogger.Enabled && rank == 0 {
			bar.clear()
			if err := cs.CommsSummary(stdout); err != nil {
				return err
			}
		}
		if rank == 0 {
			if tailN > 0 {
				res.FinalLoss = tail / float64(tailN)
			}
			res.FinalLossSteps = tailN
			res.SkippedSteps = skipped - skipped0
			res.TokensPerSec = float64((steps-first+1)*B*gas*T*dn) / (time.Since(t0) - evalTime).Seconds()
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	res.WallSeconds = time.Since(start).Seconds()
	res.EntropyFloor = floor
	if res.NothingToTrain {
		return res, nil
	}
	if floor != nil && targs.job.rank() == 0 {
		fmt.Fprintf(stdout, "final loss (mean of the last %d steps) %.4f vs entropy floor %.4f nats/token (%.1f%% above)\n", res.FinalLossSteps, res.FinalLoss, *floor, 100*(res.FinalLoss / *floor - 1))
	}
	return res, nil
}

// microBatches draws n micro-batches of B windows of T tokens from
// corpus through s, as this rank's engine takes them (its sequence shard
// under Ulysses SP): a training step's, and an evaluation's from the
// held-out windows.
func microBatches(corpus *data.Tokens, s *data.DistributedSampler, spg *spGroups, n, B, T int) ([]model.MicroBatch, error) {
	mbs := make([]model.MicroBatch, n)
	for i := range mbs {
		b, err := spg.shard(corpus.MakeBatch(s.Next(B), T))
		if err != nil {
			return nil, err
		}
		mbs[i] = b.MicroBatch()
	}
	return mbs, nil
}

// maxImpliedRanks caps the in-process ranks deepgo train picks by itself
// when a config leaves gradient_accumulation_steps open: one node's worth
// of GPUs. A config written for 1024 GPUs at accumulation 1 (a 64k batch of
// micro-batches of 64) would otherwise start 1024 ranks.
const maxImpliedRanks = 8

// impliedRanks is the data-parallel size deepgo train uses without --ranks
// (and a note when it is not what the config alone fixes), from the
// config's batch triad:
//   - train_batch_size, the micro batch and gradient_accumulation_steps all
//     given: train_batch_size / (micro batch × accumulation), the world
//     they fix (DeepSpeed refuses any other);
//   - train_batch_size and the micro batch only: DeepSpeed takes the world
//     from its launcher and derives the accumulation; q = train_batch_size
//     / micro batch ranks at accumulation 1 when q <= maxImpliedRanks, else
//     the largest divisor of q up to maxImpliedRanks, the accumulation
//     making up the rest (noted);
//   - otherwise 2: the demo's two ranks.
func impliedRanks(cfg *config.Config) (int, string) {
	if cfg.TrainBatchSize == nil || cfg.TrainMicroBatchSizePerGPU == nil {
		return 2, ""
	}
	tb, micro := *cfg.TrainBatchSize, *cfg.TrainMicroBatchSizePerGPU
	if micro <= 0 || tb%micro != 0 || tb/micro < 1 {
		return 2, ""
	}
	q := tb / micro
	if cfg.GradientAccumulationSteps != nil {
		gas := *cfg.GradientAccumulationSteps
		if gas <= 0 || q%gas != 0 {
			return 2, ""
		}
		return q / gas, ""
	}
	if q <= maxImpliedRanks {
		return q, ""
	}
	r := maxImpliedRanks
	for q%r != 0 {
		r--
	}
	return r, fmt.Sprintf("train_batch_size %d with train_micro_batch_size_per_gpu %d and no gradient_accumulation_steps: "+
		"DeepSpeed takes the ranks from its launcher; deepgo train uses %d in-process ranks with gradient_accumulation_steps %d "+
		"(the config at accumulation 1 would need %d; --ranks N chooses another split)", tb, micro, r, q/r, q)
}
