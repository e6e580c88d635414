package deepgo

// Background checkpoint saves (SaveAsync) for both engines. The part of a
// save that involves the training's groups runs in the call, as in Save:
// the agreement that every rank can save, the copies of device state to
// host memory and, under tensor parallelism in the data-parallel engine,
// the collection of every TP rank's shards on TP rank 0. What is left,
// writing, syncing, the manifest, the commit of latest and the rotation
// (checkpoint.Save), runs on a goroutine (checkpoint.AsyncSaver) with
// collectives on groups of its own while training goes on. So the files
// are Save's, byte for byte, for the same state. Under TP only TP rank 0
// of each data rank writes; the others' background saves wait for the
// outcome, agreed over a group split from the TP group, so that a failure
// is reported on every rank alike.

import (
	"context"
	"fmt"
	"sync"

	"github.com/deepgo-ml/deepgo/checkpoint"
)

// bgSaver is an engine's background saves: the checkpoint.AsyncSaver of
// the directory saved to last, replaced (after its save is over) when a
// save goes to another.
type bgSaver struct {
	mu    sync.Mutex // guards saver for done, which other goroutines call
	saver *checkpoint.AsyncSaver
	dir   string
}

// save starts writing st to o.Dir under tag in the background after the
// save in flight is over; that save's error, if it failed, is returned
// instead. A new directory gets a new saver: a collective over o.Comm
// (and ao.Outcome).
func (b *bgSaver) save(ctx context.Context, o checkpoint.Options, ao checkpoint.AsyncOptions, tag string, st *checkpoint.State) error {
	if b.saver != nil && b.dir != o.Dir {
		if err := b.close(); err != nil {
			return fmt.Errorf("previous background save failed: %w", err)
		}
	}
	if b.saver == nil {
		o.Tag = ""
		s, err := checkpoint.NewAsyncSaver(ctx, o, ao)
		if err != nil {
			return err
		}
		b.mu.Lock()
		b.saver, b.dir = s, o.Dir
		b.mu.Unlock()
	}
	return b.saver.Save(ctx, tag, st)
}

// wait waits for the save in flight, if any, and returns its error.
func (b *bgSaver) wait() error {
	if b.saver == nil {
		return nil
	}
	if _, err := b.saver.Wait(); err != nil {
		return fmt.Errorf("background save: %w", err)
	}
	return nil
}

// done is closed once the save in flight when it is called is over; it
// may be called from any goroutine.
func (b *bgSaver) done() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.saver.Done() // closed for a nil saver
}

// close waits for the save in flight, releases the saver and returns the
// save's error.
func (b *bgSaver) close() error {
	if b.saver == nil {
		return nil
	}
	err := b.saver.Close() // done's readers still see its channel meanwhile
	b.mu.Lock()
	b.saver, b.dir = nil, ""
	b.mu.Unlock()
	return err
}

// SaveAsync is Save in the background. It does in the call what involves
// the training's groups, as Save does: it checks that every rank can
// save, copies the state to host memory and, under tensor parallelism,
// collects every TP rank's shards on TP rank 0; then it returns while a
// goroutine writes, verifies and commits the checkpoint (on groups of its
// own, so training goes on meanwhile). The files are Save's for the same
// state, byte for byte. It first waits for the previous background save
// and returns that save's error if it failed. WaitSave, the next Save or
// SaveAsync, Load and Close wait for the save in flight and report its
// failure on every rank (under TP the TP ranks that do not write learn
// TP rank 0's outcome). A collective, like Save; between optimizer steps.
// Host memory holds one copy of the saved state until the next save (TP
// rank 0: every TP rank's shards; while it collects them, twice that).
func (e *Engine) SaveAsync(ctx context.Context, dir string, opts SaveOptions) error {
	if err := e.usable(ctx, "SaveAsync"); err != nil {
		return err
	}
	ctx = e.devCtx(ctx)
	o, st, err := e.checkpointState("SaveAsync", dir, opts)
	defer e.releaseStaged()                                  // the saver copies what it writes before Save returns
	if err := e.agreeTP(ctx, "SaveAsync", err); err != nil { // no rank enters the save alone
		return err
	}
	var ao checkpoint.AsyncOptions
	if rank, n := e.tpDegree(); n > 1 {
		// the previous save's outcome is every rank's (agreed over TP):
		// after a failure no rank collects for this one
		if err := e.bg.wait(); err != nil {
			return fmt.Errorf("deepgo: SaveAsync: previous %w", err)
		}
		if err := e.agreeTP(ctx, "SaveAsync", e.tpCollect(ctx, st)); err != nil {
			return err
		}
		ao = checkpoint.AsyncOptions{Outcome: e.tp, OutcomeName: "the tensor-parallel group", Skip: rank != 0}
	}
	if err := e.bg.save(ctx, o, ao, opts.Tag, st); err != nil {
		return fmt.Errorf("deepgo: SaveAsync: %w", err)
	}
	return nil
}

// WaitSave waits for the background save in flight (SaveAsync), if any,
// and returns its error, the same on every rank. It is not a collective:
// each rank waits for its own part of the save.
func (e *Engine) WaitSave() error {
	if err := e.bg.wait(); err != nil {
		return fmt.Errorf("deepgo: %w", err)
	}
	return nil
}

// SaveDone returns a channel closed once the background save in flight
// when it is called is over (already closed when none is). Unlike the
// other methods it may be called from any goroutine: a process stopping
// on a signal waits on it so as not to cut a checkpoint short.
func (e *Engine) SaveDone() <-chan struct{} { return e.bg.done() }

// SaveAsync is Save in the background, as Engine.SaveAsync: it copies
// every rank's part of the checkpoint to host memory and returns while a
// goroutine writes, verifies and commits it (every rank writes its own
// files, as in Save); the files are Save's, byte for byte. It first waits
// for the previous background save and returns that save's error if it
// failed; WaitSave, the next Save or SaveAsync, Load and Close wait for the
// save in flight and report its failure on every rank. A collective over
// every rank of the pipeline, like Save.
func (e *PipeEngine) SaveAsync(ctx context.Context, dir string, opts SaveOptions) error {
	if err := e.openCheck("SaveAsync"); err != nil {
		return err
	}
	ctx = e.devCtx(ctx)
	o, st, err := e.pipeCheckpointState("SaveAsync", dir, opts)
	defer e.releaseStaged()
	if err := agreeOn(ctx, e.world, "SaveAsync", err); err != nil { // no rank enters the save alone
		return err
	}
	if err := e.bg.save(ctx, o, checkpoint.AsyncOptions{}, opts.Tag, st); err != nil {
		return fmt.Errorf("deepgo: pipeline engine: SaveAsync: %w", err)
	}
	return nil
}

// WaitSave waits for the background save in flight (SaveAsync), if any,
// and returns its error, the same on every rank. It is not a collective.
func (e *PipeEngine) WaitSave() error {
	if err := e.bg.wait(); err != nil {
		return fmt.Errorf("deepgo: pipeline engine: %w", err)
	}
	return nil
}

// SaveDone is Engine.SaveDone: a channel closed once the background save
// in flight is over, for any goroutine.
func (e *PipeEngine) SaveDone() <-chan struct{} { return e.bg.done() }
