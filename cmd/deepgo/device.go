package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/deepgo-ml/deepgo"
	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/tensor"
)

// deviceFlagHelp is the --device flag's usage line.
const deviceFlagHelp = "where each rank computes: cpu, sim (the simulated device: what CI proves the device path on) or cuda (build tag cuda; the in-process rank r uses GPU LOCAL_RANK+r, or cuda:N+r)"

// rankDevice is the device in-process rank r of a process computes on:
// the host for cpu; simulated device r for sim; for cuda the GPU numbered
// from the one the launcher's LOCAL_RANK picks (or cuda:N), one per
// in-process rank.
func rankDevice(flag string, r int, getenv func(string) string) (tensor.Device, error) {
	dev, err := tensor.ParseDevice(flag)
	if err != nil {
		return dev, fmt.Errorf("--device %q: %w", flag, err)
	}
	switch dev.Kind {
	case tensor.KindCPU:
		return dev, nil
	case tensor.KindSim:
		return tensor.Sim(dev.Index + r), nil
	}
	base := dev.Index
	if v := strings.TrimSpace(getenv("LOCAL_RANK")); v != "" && !strings.Contains(flag, ":") {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return dev, fmt.Errorf("LOCAL_RANK=%q: want an integer >= 0", v)
		}
		base = n
	}
	return tensor.CUDA(base + r), nil
}

// rankOptions are the Initialize options of the rank of c, in-process rank
// r, on flag's device: the rank's comm, and the device (the engine wraps
// the comm so that it moves device memory).
func rankOptions(flag string, c comm.Comm, r int) ([]deepgo.Option, tensor.Device, error) {
	dev, err := rankDevice(flag, r, os.Getenv)
	if err != nil {
		return nil, dev, err
	}
	opts := []deepgo.Option{deepgo.WithComm(c)}
	if !dev.IsCPU() {
		opts = append(opts, deepgo.WithDevice(dev))
	}
	return opts, dev, nil
}

// deviceKind is "cpu", "sim" or "cuda".
func deviceKind(d tensor.Device) string {
	s := d.String()
	if i := strings.IndexByte(s, ':'); i >= 0 {
		return s[:i]
	}
	return s
}

// deviceRange names the devices of n in-process ranks whose rank 0 is on
// d: "cpu", "sim:0", "sim:0..sim:1".
func deviceRange(d tensor.Device, n int) string {
	if d.IsCPU() || n == 1 {
		return d.String()
	}
	last := d
	last.Index += n - 1
	return d.String() + ".." + last.String()
}
