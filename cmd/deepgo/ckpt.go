package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/deepgo-ml/deepgo"
	"github.com/deepgo-ml/deepgo/checkpoint"
)

func init() {
	register(command{name: "ckpt", help: "checkpoint tools: inspect DIR, consolidate DIR OUT.safetensors", run: runCkpt})
}

const ckptUsage = `usage:
  deepgo ckpt inspect [-tag TAG] DIR                    list checkpoints, verify every checksum of each
  deepgo ckpt consolidate [-tag TAG] DIR OUT.safetensors write full float32 weights (zero_to_fp32)
DIR is a save directory (holding "latest"); -tag picks the checkpoint inspect
lists file by file and consolidate reads (default: the one latest names).
DIR may also be one checkpoint's folder (DIR/global_step5, holding its
manifest.json), as checkpoint.load_path may: -tag global_step5 DIR.
inspect reads every file of every checkpoint: the time of a full read of DIR.
`

func runCkpt(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, ckptUsage)
		return 2
	}
	if isHelp(args[0]) || args[0] == "help" {
		fmt.Fprint(stdout, ckptUsage)
		return 0
	}
	fs := flag.NewFlagSet("ckpt "+args[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	tag := fs.String("tag", "", "checkpoint tag (default: the one latest names)")
	fs.Usage = func() { fmt.Fprint(stderr, ckptUsage); fs.PrintDefaults() }
	// flags may come before or after the folders (deepgo ckpt inspect DIR -tag T)
	pos, err := parseInterspersed(fs, args[1:])
	if err != nil {
		return flagExit(err)
	}
	if len(pos) > 0 && *tag == "" {
		pos[0], *tag = ckptFolder(pos[0])
	}
	ctx := context.Background()
	want := map[string]string{"inspect": "DIR", "consolidate": "DIR OUT.safetensors"}[args[0]]
	switch {
	case args[0] == "inspect" && len(pos) == 1:
		return ckptInspect(ctx, pos[0], *tag, stdout, stderr)
	case args[0] == "consolidate" && len(pos) == 2:
		ck, err := checkpoint.Open(nil, pos[0], *tag)
		if err != nil {
			fmt.Fprintln(stderr, "deepgo ckpt:", err)
			return 1
		}
		defer ck.Close()
		if err := ck.Consolidate(ctx, nil, pos[1]); err != nil {
			fmt.Fprintln(stderr, "deepgo ckpt:", err)
			return 1
		}
		fmt.Fprintf(stdout, "wrote %s: float32 weights of %s (step %d, world %d)\n", pos[1], ck.Tag, ck.Manifest.Step, ck.Manifest.World)
		if ex := deepgo.FrozenExcluded(ck); len(ex) > 0 {
			fmt.Fprintf(stdout, "note: %s saved with ExcludeFrozen, not in %s: %s\n", plural(len(ex), "frozen parameter"), pos[1], strings.Join(ex, ", "))
		}
		return 0
	case want != "":
		fmt.Fprintf(stderr, "deepgo ckpt %s: want %s, got %d argument(s) %q\n", args[0], want, len(pos), pos)
		return 2
	}
	fmt.Fprintf(stderr, "deepgo ckpt: unknown command %q\n", args[0])
	fmt.Fprint(stderr, ckptUsage)
	return 2
}

// ckptInspect lists the checkpoints of dir, verifies every one of them (its
// manifest and every data file, read through), and details the chosen one
// (tag, else the one latest names) file by file. A checkpoint folder whose
// manifest does not read is listed as damaged too. Exit status 1 if
// anything is wrong.
func ckptInspect(ctx context.Context, dir, tag string, stdout, stderr io.Writer) int {
	latest, lerr := checkpoint.ReadLatest(nil, dir)
	all, err := checkpoint.List(nil, dir)
	if err != nil {
		fmt.Fprintln(stderr, "deepgo ckpt:", err)
		return 1
	}
	chosen := tag
	if chosen == "" {
		chosen = latest
	}
	if st, err := os.Stat(filepath.Join(dir, tag)); tag != "" && (err != nil || !st.IsDir()) {
		var tags []string
		for _, i := range all {
			tags = append(tags, i.Tag)
		}
		fmt.Fprintf(stderr, "deepgo ckpt: -tag %q: no checkpoint of that tag in %s (it holds: %s)\n", tag, dir, strings.Join(tags, ", "))
		return 1
	}
	// every checkpoint but the chosen one is verified whole here; the
	// chosen one file by file below
	status := map[string]string{}
	bad := 0
	listed := map[string]bool{}
	for _, i := range all {
		listed[i.Tag] = true
		if i.Tag == chosen {
			continue
		}
		if err := verifyTag(ctx, dir, i.Tag); err != nil {
			status[i.Tag], bad = "DAMAGED: "+err.Error(), bad+1
		}
	}
	var broken []string // folders named like tags whose manifest does not read
	if ents, err := os.ReadDir(dir); err == nil {
		for _, e := range ents {
			if !e.IsDir() || listed[e.Name()] || strings.HasPrefix(e.Name(), ".") {
				continue
			}
			_, err := checkpoint.ReadManifest(nil, dir, e.Name())
			if err == nil || errors.Is(err, fs.ErrNotExist) && !hasStates(filepath.Join(dir, e.Name())) {
				continue // saved since List, or a folder that is no checkpoint
			}
			broken = append(broken, e.Name())
			status[e.Name()], bad = "DAMAGED: "+err.Error(), bad+1
		}
	}
	var ck *checkpoint.Checkpoint
	var openErr error
	if lerr == nil || tag != "" {
		ck, openErr = checkpoint.Open(nil, dir, tag)
	}
	var detail strings.Builder
	if ck != nil {
		defer ck.Close()
		fileBad := 0
		for _, f := range ck.Files() {
			st := "ok"
			if err := ck.VerifyFile(ctx, f.Name); err != nil {
				st, fileBad = "FAIL: "+err.Error(), fileBad+1
			}
			fmt.Fprintf(&detail, "  %-60s %12d  crc32c %s  %s\n", f.Name, f.Size, f.CRC32C, st)
		}
		fmt.Fprintf(&detail, "%d tensors, %d files, %d bad\n", len(ck.Names()), len(ck.Files()), fileBad)
		if fileBad > 0 {
			status[ck.Tag], bad = fmt.Sprintf("DAMAGED: %d bad file(s), see below", fileBad), bad+1
		}
	}
	tw := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "tag\tstep\tworld\tzero\ttype\tfiles\tbytes\tverified\t")
	for _, i := range all {
		m := i.Manifest
		st := cmp.Or(status[i.Tag], "ok")
		if i.Tag == chosen && ck == nil {
			st = "not verified: does not open"
		}
		if i.Tag == latest {
			st += "  <- latest"
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%s\t%d\t%d\t%s\n", i.Tag, m.Step, m.World, m.ZeroStage, m.CheckpointType, len(filesOf(m)), m.Bytes(), st)
	}
	for _, t := range broken {
		st := status[t]
		if t == latest {
			st += "  <- latest"
		}
		fmt.Fprintf(tw, "%s\t-\t-\t-\t-\t-\t-\t%s\n", t, st)
	}
	tw.Flush()
	if lerr != nil && tag == "" {
		fmt.Fprintln(stderr, "deepgo ckpt:", lerr)
		return 1
	}
	if openErr != nil {
		fmt.Fprintln(stderr, "deepgo ckpt:", openErr)
		return 1
	}
	fmt.Fprintf(stdout, "\nverifying %s:\n%s", ck.Tag, detail.String())
	if bad > 0 {
		fmt.Fprintf(stdout, "%d checkpoint(s) damaged\n", bad)
		return 1
	}
	return 0
}

// hasStates reports whether folder holds a checkpoint data file
// (*_states.safetensors): a checkpoint that lost its manifest.
func hasStates(folder string) bool {
	m, _ := filepath.Glob(filepath.Join(folder, "*_states.safetensors"))
	return len(m) > 0
}

// verifyTag opens and verifies the checkpoint tag of dir, every data file
// read through.
func verifyTag(ctx context.Context, dir, tag string) error {
	ck, err := checkpoint.Open(nil, dir, tag)
	if err != nil {
		return err
	}
	defer ck.Close()
	return ck.Verify(ctx)
}

func filesOf(m *checkpoint.Manifest) []checkpoint.FileInfo {
	var out []checkpoint.FileInfo
	for _, r := range m.Ranks {
		out = append(out, r.Files...)
	}
	return out
}

// ckptFolder reads a checkpoint's own folder (one holding manifest.json,
// no latest) as its save directory and tag, as train's
// checkpoint.load_path does; any other dir is returned as it is, with no
// tag.
func ckptFolder(dir string) (string, string) {
	if _, err := os.Stat(filepath.Join(dir, "latest")); err == nil {
		return dir, ""
	}
	if _, err := os.Stat(filepath.Join(dir, "manifest.json")); err != nil {
		return dir, ""
	}
	clean := filepath.Clean(dir)
	return filepath.Dir(clean), filepath.Base(clean)
}
