// Command bench-ckpt measures checkpoint save and load bandwidth for a
// training state of about -mb megabytes, next to a plain sequential write
// and read of the same bytes in the same directory and run, and how long
// a background save blocks training. It prints one JSON object.
//
//	go run ./examples/bench-ckpt -dir /nvme/tmp -mb 500
//
// Reads follow writes, so they come from the page cache unless
// -drop-caches (root) empties it first.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/deepgo-ml/deepgo/checkpoint"
	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/comm/local"
	"github.com/deepgo-ml/deepgo/tensor"
	"golang.org/x/sync/errgroup"
)

type result struct {
	StateBytes          int64   `json:"state_bytes"`
	Ranks               int     `json:"ranks"`
	Type                string  `json:"checkpoint_type"`
	Dir                 string  `json:"dir"`
	DropCaches          bool    `json:"drop_caches"`
	PlainWriteGBs       float64 `json:"plain_sequential_write_fsync_GBps"`
	PlainReadGBs        float64 `json:"plain_sequential_read_GBps"`
	SaveGBs             float64 `json:"save_GBps"`
	SaveSeconds         float64 `json:"save_s"`
	LoadGBs             float64 `json:"load_verified_GBps"`
	LoadSeconds         float64 `json:"load_s"`
	AsyncFirstBlockedMs float64 `json:"background_first_save_blocked_ms"`
	AsyncBlockedMs      float64 `json:"background_save_blocked_ms"`
	AsyncTotalS         float64 `json:"background_save_total_s"`
	AsyncBlockedFrac    float64 `json:"background_blocked_fraction_of_sync_save"`
}

func main() {
	dir := flag.String("dir", os.TempDir(), "directory to write in")
	mb := flag.Int("mb", 500, "state size in MB (1e6 bytes)")
	ranks := flag.Int("ranks", 1, "data-parallel ranks (in-process)")
	typ := flag.String("type", "sharded", "checkpoint_type: sharded or blob")
	drop := flag.Bool("drop-caches", false, "drop the page cache before reads (root)")
	flag.Parse()
	if err := run(*dir, int64(*mb)*1_000_000, *ranks, *typ, *drop); err != nil {
		fmt.Fprintln(os.Stderr, "bench-ckpt:", err)
		os.Exit(1)
	}
}

func gbps(n int64, d time.Duration) float64 { return float64(n) / d.Seconds() / 1e9 }

func dropCaches(on bool) {
	if on {
		os.WriteFile("/proc/sys/vm/drop_caches", []byte("3\n"), 0)
	}
}

// state is rank's share: fp32 master, exp_avg, exp_avg_sq (sharded) and
// bf16 params, 14 bytes per element of its shard.
func state(total int64, rank, world int) (*checkpoint.State, error) {
	numel := total / 14
	off, n := checkpoint.Partition(numel, world, rank, 1)
	st := &checkpoint.State{Step: 1, ZeroStage: 2}
	for _, e := range []struct {
		name, file string
		dt         tensor.DType
	}{{"fp32", "optim", tensor.Float32}, {"exp_avg", "optim", tensor.Float32}, {"exp_avg_sq", "optim", tensor.Float32}, {"bf16", "model", tensor.BFloat16}} {
		t, err := tensor.Empty(e.dt, int(n))
		if err != nil {
			return nil, err
		}
		b, _ := t.RawBytes()
		for i := range b {
			b[i] = byte(i*31 + rank)
		}
		st.Tensors = append(st.Tensors, checkpoint.Entry{Name: e.name, File: e.file, Data: t, Shard: &checkpoint.Shard{Numel: numel, Offset: off}})
	}
	return st, nil
}

// onAll runs fn on every rank and waits for all of them; the first error
// (in completion order) is returned.
func onAll(cs []comm.Comm, fn func(r int, c comm.Comm) error) error {
	var g errgroup.Group
	for r, c := range cs {
		g.Go(func() error { return fn(r, c) })
	}
	return g.Wait()
}

func run(dir string, total int64, ranks int, typ string, drop bool) error {
	base, err := os.MkdirTemp(dir, "bench-ckpt-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(base)
	w, err := local.NewWorld(ranks, local.Options{})
	if err != nil {
		return err
	}
	defer w.Close()
	cs := w.Comms()
	states := make([]*checkpoint.State, ranks)
	var bytes int64
	for r := range states {
		if states[r], err = state(total, r, ranks); err != nil {
			return err
		}
		bytes += states[r].Bytes()
	}
	res := result{StateBytes: bytes, Ranks: ranks, Type: typ, Dir: dir, DropCaches: drop}

	// Plain sequential write + fsync of the same bytes, then read. Timed
	// before the checkpoint save and again after the load, best kept: the
	// first large write to a fresh disk area can run several times slower
	// than later ones, which would flatter whichever came second.
	plain := filepath.Join(base, "plain.bin")
	plainWrite := func() error {
		start := time.Now()
		f, err := os.Create(plain)
		if err != nil {
			return err
		}
		for _, st := range states {
			for _, e := range st.Tensors {
				b, _ := e.Data.RawBytes()
				if _, err := f.Write(b); err != nil {
					f.Close()
					return err
				}
			}
		}
		if err := f.Sync(); err != nil {
			f.Close()
			return err
		}
		f.Close()
		res.PlainWriteGBs = max(res.PlainWriteGBs, gbps(bytes, time.Since(start)))
		return nil
	}
	if err := plainWrite(); err != nil {
		return err
	}
	dropCaches(drop)
	buf := make([]byte, 8<<20)
	start := time.Now()
	f, _ := os.Open(plain)
	for {
		n, err := f.Read(buf)
		if n == 0 || err != nil {
			break
		}
	}
	f.Close()
	res.PlainReadGBs = gbps(bytes, time.Since(start))
	os.Remove(plain)

	ctx := context.Background()
	save := filepath.Join(base, "ckpt")
	start = time.Now()
	if err := onAll(cs, func(r int, c comm.Comm) error {
		_, err := checkpoint.Save(ctx, checkpoint.Options{Dir: save, Comm: c, Type: typ}, states[r])
		return err
	}); err != nil {
		return err
	}
	syncSave := time.Since(start)
	res.SaveSeconds, res.SaveGBs = syncSave.Seconds(), gbps(bytes, syncSave)

	dropCaches(drop)
	start = time.Now()
	if err := onAll(cs, func(r int, c comm.Comm) error {
		ck, err := checkpoint.Open(nil, save, "")
		if err != nil {
			return err
		}
		defer ck.Close()
		for _, e := range states[r].Tensors {
			dst, _ := tensor.Empty(e.Data.DType(), e.Data.Numel())
			err := ck.ReadRange(ctx, e.Name, e.Shard.Offset, dst)
			dst.Free()
			if err != nil {
				return err
			}
		}
		// Files this rank did not read are verified by someone: here
		// rank r checks the ones of rank r (already read) — nothing left.
		return ck.VerifyFiles(ctx, func(fi checkpoint.FileInfo) bool { return false })
	}); err != nil {
		return err
	}
	load := time.Since(start)
	res.LoadSeconds, res.LoadGBs = load.Seconds(), gbps(bytes, load)
	if err := plainWrite(); err != nil {
		return err
	}
	os.Remove(plain)

	// Background save: how long does Save block the caller?
	// The first Save allocates the host copy; the second reuses it (and
	// first waits for the save in flight, so it is timed after Wait).
	var blocked, first time.Duration
	var start3 time.Time
	if err := onAll(cs, func(r int, c comm.Comm) error {
		a, err := checkpoint.NewAsyncSaver(ctx, checkpoint.Options{Dir: save, Comm: c, Type: typ}, checkpoint.AsyncOptions{})
		if err != nil {
			return err
		}
		for step := int64(2); step <= 3; step++ {
			states[r].Step = step
			if step == 3 {
				// Training long enough for the previous save to finish.
				if _, err := a.Wait(); err != nil {
					return err
				}
				start3 = time.Now()
			}
			if err := a.Save(ctx, "", states[r]); err != nil {
				return err
			}
			if r == 0 && step == 2 {
				first = a.Blocked()
			}
			if r == 0 && step == 3 {
				blocked = a.Blocked()
			}
		}
		return a.Close()
	}); err != nil {
		return err
	}
	res.AsyncTotalS = time.Since(start3).Seconds()
	res.AsyncFirstBlockedMs = float64(first.Microseconds()) / 1e3
	res.AsyncBlockedMs = float64(blocked.Microseconds()) / 1e3
	res.AsyncBlockedFrac = blocked.Seconds() / syncSave.Seconds()
	for _, st := range states {
		for _, e := range st.Tensors {
			e.Data.Free()
		}
	}
	out, _ := json.MarshalIndent(res, "", "  ")
	fmt.Println(string(out))
	return nil
}
