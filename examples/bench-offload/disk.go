package main

import (
	"context"
	"os"
	"path/filepath"
	"time"

	"github.com/deepgo-ml/deepgo/aio"
	"github.com/deepgo-ml/deepgo/config"
)

// measureDisk writes then reads a file of n bytes in dir with the aio
// engine at the swapper's settings (the aio section's defaults), one
// request each, diskReps times, and returns the median rates.
func measureDisk(dir string, n int64) (diskRow, error) {
	cfg, err := config.Parse([]byte(`{"train_micro_batch_size_per_gpu": 1}`))
	if err != nil {
		return diskRow{}, err
	}
	eng, err := aio.Open(aio.FromConfig(cfg.AIO))
	if err != nil {
		return diskRow{}, err
	}
	defer eng.Close()
	path := filepath.Join(dir, "disk-limit")
	defer os.Remove(path)
	r := diskRow{File: path, Bytes: n, Backend: eng.Backend().String()}
	buf, err := eng.NewBuffer(int(n))
	if err != nil {
		return r, err
	}
	defer buf.Free()
	for i, b := range buf.Bytes() {
		buf.Bytes()[i] = b ^ byte(i*7+1)
	}
	f, err := eng.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC)
	if err != nil {
		return r, err
	}
	defer f.Close()
	rate := func(submit func() (*aio.Request, error)) (float64, error) {
		t0 := time.Now()
		req, err := submit()
		if err == nil {
			err = req.Wait(context.Background())
		}
		return float64(n) / time.Since(t0).Seconds() / 1e9, err
	}
	var ws, rs []float64
	for range diskReps {
		w, err := rate(func() (*aio.Request, error) { return f.WriteAt(buf, int(n), 0) })
		if err != nil {
			return r, err
		}
		rd, err := rate(func() (*aio.Request, error) { return f.ReadAt(buf, int(n), 0) })
		if err != nil {
			return r, err
		}
		ws, rs = append(ws, w), append(rs, rd)
	}
	r.WriteGBps, r.ReadGBps = median(ws), median(rs)
	return r, nil
}

const diskReps = 3
