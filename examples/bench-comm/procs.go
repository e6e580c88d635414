package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/comm/gloo"
)

var allOps = []string{"all_reduce", "reduce_scatter", "all_gather"}

// setDefaults applies -procs' defaults to the flags not given, and checks
// -ops.
func setDefaults() error {
	set := map[string]bool{}
	flag.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if *procs < 0 {
		return fmt.Errorf("-procs %d: want >= 0", *procs)
	}
	if *rounds < 1 {
		return fmt.Errorf("-rounds %d: want >= 1", *rounds)
	}
	if *procs > 0 {
		defaults := map[string]string{"min": "1024", "max": strconv.Itoa(64 << 20), "ops": "all_reduce",
			"ranks": strconv.Itoa(*procs), "mpi-np": strconv.Itoa(*procs)}
		for name, v := range defaults {
			if !set[name] {
				flag.Set(name, v)
			}
		}
	}
	ops = nil
	for _, o := range strings.Split(*opList, ",") {
		o = strings.TrimSpace(o)
		known := false
		for _, k := range allOps {
			known = known || k == o
		}
		if !known {
			return fmt.Errorf("-ops %q: %q is not one of %v", *opList, o, allOps)
		}
		ops = append(ops, o)
	}
	return nil
}

// glooSweep runs n processes of this binary with -gloo-child and reads rank
// 0's rows from its stdout.
func glooSweep(n int) ([]Row, string) {
	if !gloo.Available() {
		_, _, err := gloo.FromEnvOf(context.Background(), comm.Env{WorldSize: n}, gloo.Options{})
		return nil, fmt.Sprintf("no Gloo measurement: %v", err)
	}
	self, err := os.Executable()
	if err != nil {
		return nil, err.Error()
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err.Error()
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	args := []string{"-gloo-child", "-min", strconv.Itoa(*minBytes), "-max", strconv.Itoa(*maxBytes),
		"-mintime", minTime.String(), "-warmup", strconv.Itoa(*warmup), "-ops", *opList, "-rounds", strconv.Itoa(*rounds)}
	cmds := make([]*exec.Cmd, n)
	var out bytes.Buffer
	for r := range n {
		cmd := exec.Command(self, args...)
		cmd.Env = append(os.Environ(), "RANK="+strconv.Itoa(r), "WORLD_SIZE="+strconv.Itoa(n),
			"LOCAL_RANK="+strconv.Itoa(r), "LOCAL_WORLD_SIZE="+strconv.Itoa(n),
			"MASTER_ADDR=127.0.0.1", "MASTER_PORT="+strconv.Itoa(port))
		cmd.Stderr = os.Stderr
		if r == 0 {
			cmd.Stdout = &out
		}
		if err := cmd.Start(); err != nil {
			for _, c := range cmds[:r] {
				c.Process.Kill()
			}
			return nil, fmt.Sprintf("starting rank %d: %v", r, err)
		}
		cmds[r] = cmd
	}
	var failed []string
	for r, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			failed = append(failed, fmt.Sprintf("rank %d: %v", r, err))
		}
	}
	if failed != nil {
		return nil, "Gloo processes failed: " + strings.Join(failed, "; ")
	}
	var rows []Row
	if err := json.Unmarshal(out.Bytes(), &rows); err != nil {
		return nil, fmt.Sprintf("reading the Gloo rows: %v", err)
	}
	return rows, fmt.Sprintf("comm/gloo (Gloo's ring all-reduce over TCP on loopback), %d processes of this binary, 1 C thread each", n)
}

func runGlooChild() {
	env, err := comm.EnvFromOS()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	ctx := context.Background()
	c, release, err := gloo.FromEnvOf(ctx, env, gloo.Options{Timeout: 5 * time.Minute, Threads: 1})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	rows, err := sweep(ctx, c)
	if err == nil {
		err = c.Barrier(ctx) // rank 0 serves the store: everyone is done with it
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if c.Rank() == 0 {
		json.NewEncoder(os.Stdout).Encode(rows)
	}
	c.Close()
	release()
}

// bySize lines up the all-reduce busbw of the backends at n ranks, size by
// size.
func bySize(rows map[string][]Row, n int) []map[string]any {
	var out []map[string]any
	idx := map[int]map[string]any{}
	for _, name := range []string{"local", "mpi", "gloo"} {
		for _, r := range rows[name] {
			if r.Op != "all_reduce" || r.Ranks != n {
				continue
			}
			m := idx[r.Bytes]
			if m == nil {
				m = map[string]any{"bytes": r.Bytes, "ranks": n}
				idx[r.Bytes] = m
				out = append(out, m)
			}
			m[name+"_busbw_gbps"] = r.BusBW
		}
	}
	return out
}
