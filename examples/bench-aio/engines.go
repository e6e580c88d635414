package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"time"

	"github.com/deepgo-ml/deepgo/aio"
)

// engines holds the file's random contents in one aligned buffer and opens
// a fresh engine per measurement (block size and queue depth are the
// engine's), on each back end.
type engines struct {
	path         string
	size         int64
	buf          *aio.Buffer
	owner        *aio.Engine // the buffer's
	uringBackend string
}

func openEngines(path string, size int64) (*engines, error) {
	owner, err := aio.Open(aio.Options{BlockSize: 1 << 20, QueueDepth: 8, Threads: 1, OverlapEvents: true,
		Backend: aio.BackendAuto})
	if err != nil {
		return nil, err
	}
	buf, err := owner.NewBuffer(int(size))
	if err != nil {
		owner.Close()
		return nil, err
	}
	r := rand.New(rand.NewPCG(1, 2))
	b := buf.Bytes()
	for i := 0; i+8 <= len(b); i += 8 {
		v := r.Uint64()
		for k := range 8 {
			b[i+k] = byte(v >> (8 * k))
		}
	}
	e := &engines{path: path, size: size, buf: buf, owner: owner, uringBackend: owner.Backend().String()}
	// the file exists at full size before anything reads it
	if _, err := e.run(aio.BackendAuto, "write", 1<<20, 8, 1); err != nil {
		e.close()
		return nil, err
	}
	return e, nil
}

func (e *engines) close() {
	_ = e.buf.Free()
	_ = e.owner.Close()
}

// run moves the whole file once as one request and returns GB/s. The engine
// is opened before the clock starts.
func (e *engines) run(b aio.Backend, op string, block, qd, threads int) (float64, error) {
	eng, err := aio.Open(aio.Options{BlockSize: block, QueueDepth: qd, Threads: threads, OverlapEvents: true, Backend: b})
	if err != nil {
		return 0, err
	}
	defer eng.Close()
	flag := os.O_RDWR | os.O_CREATE
	f, err := eng.OpenFile(e.path, flag)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	t0 := time.Now()
	var req *aio.Request
	if op == "write" {
		req, err = f.WriteAt(e.buf, int(e.size), 0)
	} else {
		req, err = f.ReadAt(e.buf, int(e.size), 0)
	}
	if err == nil {
		err = req.Wait(context.Background())
	}
	if err != nil {
		return 0, err
	}
	return float64(e.size) / time.Since(t0).Seconds() / 1e9, nil
}

func median(xs []float64) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	return s[len(s)/2]
}

// measure runs reps interleaved rounds of ours on io_uring, ours on
// threads, and fio.
func measure(e *engines, f *fio, o options, op string, blockMiB, qd int, path string, size int64) (row, error) {
	r := row{Op: op, BlockMiB: blockMiB, QueueDepth: qd}
	block := blockMiB << 20
	for range o.reps {
		g, err := e.run(aio.BackendURing, op, block, qd, o.threads)
		if err != nil {
			return r, fmt.Errorf("%s, %d MiB blocks, depth %d, io_uring: %w", op, blockMiB, qd, err)
		}
		r.URingAll = append(r.URingAll, g)
		if g, err = e.run(aio.BackendThreads, op, block, qd, o.threads); err != nil {
			return r, fmt.Errorf("%s, %d MiB blocks, depth %d, threads: %w", op, blockMiB, qd, err)
		}
		r.ThreadsAll = append(r.ThreadsAll, g)
		if f != nil {
			if g, err = f.run(path, op, block, qd, size); err != nil {
				return r, err
			}
			r.FioAll = append(r.FioAll, g)
		}
	}
	r.URingGBps, r.ThreadsGBps = median(r.URingAll), median(r.ThreadsAll)
	if f != nil {
		r.FioGBps = median(r.FioAll)
		r.URingOfFio, r.ThreadsOf = r.URingGBps/r.FioGBps, r.ThreadsGBps/r.FioGBps
	}
	return r, nil
}
