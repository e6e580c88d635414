package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/deepgo-ml/deepgo/checkpoint"
)

func init() {
	register(command{name: "ckpt", help: "checkpoint tools: inspect DIR, consolidate DIR OUT.safetensors", run: runCkpt})
}

const ckptUsage = `usage:
  deepgo ckpt inspect [-tag TAG] DIR                    list checkpoints, verify every checksum
  deepgo ckpt consolidate [-tag TAG] DIR OUT.safetensors write full float32 weights (zero_to_fp32)
DIR is a save directory (holding "latest") ; -tag picks a checkpoint (default: latest).
`

func runCkpt(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, ckptUsage)
		return 2
	}
	fs := flag.NewFlagSet("ckpt "+args[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	tag := fs.String("tag", "", "checkpoint tag (default: the one latest names)")
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	ctx := context.Background()
	switch {
	case args[0] == "inspect" && fs.NArg() == 1:
		return ckptInspect(ctx, fs.Arg(0), *tag, stdout, stderr)
	case args[0] == "consolidate" && fs.NArg() == 2:
		ck, err := checkpoint.Open(nil, fs.Arg(0), *tag)
		if err != nil {
			fmt.Fprintln(stderr, "deepgo ckpt:", err)
			return 1
		}
		defer ck.Close()
		if err := ck.Consolidate(ctx, nil, fs.Arg(1)); err != nil {
			fmt.Fprintln(stderr, "deepgo ckpt:", err)
			return 1
		}
		fmt.Fprintf(stdout, "wrote %s: float32 weights of %s (step %d, world %d)\n", fs.Arg(1), ck.Tag, ck.Manifest.Step, ck.Manifest.World)
		return 0
	}
	fmt.Fprint(stderr, ckptUsage)
	return 2
}

// ckptInspect lists the checkpoints of dir and verifies the chosen one
// (latest by default) file by file; exit status 1 if anything is wrong.
func ckptInspect(ctx context.Context, dir, tag string, stdout, stderr io.Writer) int {
	latest, lerr := checkpoint.ReadLatest(nil, dir)
	all, err := checkpoint.List(nil, dir)
	if err != nil {
		fmt.Fprintln(stderr, "deepgo ckpt:", err)
		return 1
	}
	tw := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "tag\tstep\tworld\tzero\ttype\tfiles\tbytes\t")
	for _, i := range all {
		m := i.Manifest
		mark := ""
		if i.Tag == latest {
			mark = "<- latest"
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%s\t%d\t%d\t%s\n", i.Tag, m.Step, m.World, m.ZeroStage, m.CheckpointType, len(filesOf(m)), m.Bytes(), mark)
	}
	tw.Flush()
	if lerr != nil && tag == "" {
		fmt.Fprintln(stderr, "deepgo ckpt:", lerr)
		return 1
	}
	ck, err := checkpoint.Open(nil, dir, tag)
	if err != nil {
		fmt.Fprintln(stderr, "deepgo ckpt:", err)
		return 1
	}
	defer ck.Close()
	fmt.Fprintf(stdout, "\nverifying %s:\n", ck.Tag)
	bad := 0
	for _, f := range ck.Files() {
		status := "ok"
		if err := ck.VerifyFile(ctx, f.Name); err != nil {
			status, bad = "FAIL: "+err.Error(), bad+1
		}
		fmt.Fprintf(stdout, "  %-60s %12d  crc32c %s  %s\n", f.Name, f.Size, f.CRC32C, status)
	}
	fmt.Fprintf(stdout, "%d tensors, %d files, %d bad\n", len(ck.Names()), len(ck.Files()), bad)
	if bad > 0 {
		return 1
	}
	return 0
}

func filesOf(m *checkpoint.Manifest) []checkpoint.FileInfo {
	var out []checkpoint.FileInfo
	for _, r := range m.Ranks {
		out = append(out, r.Files...)
	}
	return out
}
