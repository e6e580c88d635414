package main

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
)

// fio runs the fio binary on the engine's file with the engine's settings.
type fio struct {
	bin, version string
}

// newFio finds fio; nil, nil when name is "" (not asked for).
func newFio(name string) (*fio, error) {
	if name == "" {
		return nil, nil
	}
	bin, err := exec.LookPath(name)
	if err != nil {
		return nil, errNoFio
	}
	v, err := exec.Command(bin, "--version").Output()
	if err != nil {
		return nil, fmt.Errorf("%s --version: %w", bin, err)
	}
	return &fio{bin: bin, version: strings.TrimSpace(string(v))}, nil
}

func (f *fio) args(path, op string, block, qd int, size int64) []string {
	return []string{"--name=bench-aio", "--filename=" + path, "--rw=" + op, "--bs=" + strconv.Itoa(block),
		"--iodepth=" + strconv.Itoa(qd), "--ioengine=io_uring", "--direct=1", "--size=" + strconv.FormatInt(size, 10),
		"--numjobs=1", "--output-format=json"}
}

func (f *fio) command(path, op string, blockMiB, qd int, size int64) string {
	return f.bin + " " + strings.Join(f.args(path, op, blockMiB<<20, qd, size), " ")
}

// fioJSON is the part of fio's --output-format=json this reads.
type fioJSON struct {
	Jobs []struct {
		Error int `json:"error"`
		Read  struct {
			BwBytes float64 `json:"bw_bytes"`
		} `json:"read"`
		Write struct {
			BwBytes float64 `json:"bw_bytes"`
		} `json:"write"`
	} `json:"jobs"`
}

// run returns fio's bandwidth in GB/s.
func (f *fio) run(path, op string, block, qd int, size int64) (float64, error) {
	cmd := exec.Command(f.bin, f.args(path, op, block, qd, size)...)
	out, err := cmd.Output()
	if err != nil {
		msg := ""
		if ee, ok := err.(*exec.ExitError); ok {
			msg = strings.TrimSpace(string(ee.Stderr))
		}
		return 0, fmt.Errorf("fio %s: %w %s", strings.Join(cmd.Args[1:], " "), err, msg)
	}
	// fio may print notes before the JSON object
	if i := strings.IndexByte(string(out), '{'); i > 0 {
		out = out[i:]
	}
	var j fioJSON
	if err := json.Unmarshal(out, &j); err != nil || len(j.Jobs) != 1 {
		return 0, fmt.Errorf("fio %s: unreadable JSON output (%v): %.200s", op, err, out)
	}
	job := j.Jobs[0]
	if job.Error != 0 {
		return 0, fmt.Errorf("fio %s: job error %d", op, job.Error)
	}
	bw := job.Read.BwBytes
	if op == "write" {
		bw = job.Write.BwBytes
	}
	if bw <= 0 {
		return 0, fmt.Errorf("fio %s: no bandwidth in its report", op)
	}
	return bw / 1e9, nil
}
