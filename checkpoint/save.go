package checkpoint

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"path/filepath"
	"strconv"

	"github.com/deepgo-ml/deepgo/checkpoint/safetensors"
	"github.com/deepgo-ml/deepgo/checkpoint/vfs"
	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/config"
	"github.com/deepgo-ml/deepgo/tensor"
)

// Checkpoint types (the checkpoint_type key).
const (
	// TypeSharded writes one file per File group per rank.
	TypeSharded = "sharded"
	// TypeBlob writes one file per rank.
	TypeBlob = "blob"
)

// Options configure Save. The zero value saves the OS file system's
// current directory with DeepSpeed's default tag, sharded, keeping all.
type Options struct {
	// FS is the file system; nil means vfs.OS.
	FS vfs.FS
	// Dir is the save directory (save_dir).
	Dir string
	// Tag names the checkpoint; "" means global_step<State.Step>.
	Tag string
	// Comm is the data-parallel group; nil means a world of one. Every
	// member must call Save.
	Comm comm.Comm
	// Type is TypeSharded ("" too) or TypeBlob (checkpoint_type).
	Type string
	// Gathered assembles every sharded tensor on rank 0, which writes it
	// whole (zero_checkpoint: false); the default writes each rank's piece.
	Gathered bool
	// Keep is how many of the most recent checkpoints to keep (0: all).
	Keep int
}

// OptionsFromConfig fills Dir, Type, Gathered and Keep from the checkpoint
// section of a config.
func OptionsFromConfig(c config.Checkpoint) Options {
	return Options{Dir: c.SaveDir, Type: c.CheckpointType, Gathered: !c.ZeroCheckpoint, Keep: c.Keep()}
}

// Result describes a completed save.
type Result struct {
	// Tag is the checkpoint's tag; Path its directory.
	Tag, Path string
	// Bytes is what this rank wrote.
	Bytes int64
	// Removed lists the tags rotation deleted (rank 0 only).
	Removed []string
}

func (o *Options) fs() vfs.FS {
	if o.FS == nil {
		return vfs.OS
	}
	return o.FS
}

func rankOf(c comm.Comm) int {
	if c == nil {
		return 0
	}
	return c.Rank()
}

func worldOf(c comm.Comm) int {
	if c == nil {
		return 1
	}
	return c.Size()
}

// Save writes st, this rank's state, as part of one checkpoint. It is a
// collective over o.Comm, and it is atomic and durable:
//
//  1. the ranks agree on the tag (a *comm.MismatchError on every rank if
//     they differ; a comm error within the group timeout if some rank
//     does not call Save);
//  2. rank 0 prepares <dir>/.tmp.<tag> (removing leftovers of interrupted
//     saves);
//  3. every rank writes its safetensors files there, syncing each;
//  4. rank 0 collects every rank's file list and checksums, writes
//     manifest.json, syncs the directory, renames it to <dir>/<tag>, syncs
//     <dir>, replaces <dir>/latest (temporary file, sync, rename, sync),
//     and only then rotates out old checkpoints.
//
// A crash at any point leaves the previous checkpoints and latest intact.
// Any rank's failure makes Save fail on every rank with a *comm.RankError
// naming it. Saving under the tag latest names is refused.
func Save(ctx context.Context, o Options, st *State) (*Result, error) {
	c := o.Comm
	fsys := o.fs()
	tag := o.Tag
	if tag == "" {
		tag = DefaultTag(st.Step)
	}
	if err := AgreeTag(ctx, c, tag); err != nil {
		return nil, err
	}
	stage := filepath.Join(o.Dir, stagePrefix+tag)
	final := filepath.Join(o.Dir, tag)
	res := &Result{Tag: tag, Path: final}

	err := checkState(o, st)
	if err == nil && rankOf(c) == 0 {
		err = prepare(fsys, o.Dir, tag, stage)
	}
	if err := agree(ctx, c, "prepare "+tag, err); err != nil {
		return nil, err
	}

	rm, n, err := writeRank(ctx, o, st, tag, stage)
	res.Bytes = n
	if err := agree(ctx, c, "write "+tag, err); err != nil {
		if rankOf(c) == 0 {
			fsys.RemoveAll(stage)
		}
		return nil, err
	}

	var body []byte
	if err == nil {
		body, err = json.Marshal(rm)
	}
	all, gerr := comm.AllGatherBytes(ctx, c, body)
	if gerr != nil {
		return nil, fmt.Errorf("checkpoint: collecting rank manifests of %s: %w", tag, gerr)
	}
	if rankOf(c) == 0 {
		res.Removed, err = commit(o, st, tag, stage, final, all)
		if err != nil {
			fsys.RemoveAll(stage) // nothing if it was renamed already
		}
	}
	if err := agree(ctx, c, "commit "+tag, err); err != nil {
		return nil, err
	}
	return res, nil
}

func checkState(o Options, st *State) error {
	switch o.Type {
	case "", TypeSharded, TypeBlob:
	default:
		return fmt.Errorf("checkpoint type %q: want %q or %q", o.Type, TypeSharded, TypeBlob)
	}
	if err := validTag(cmp.Or(o.Tag, DefaultTag(st.Step))); err != nil {
		return err
	}
	seen := map[string]bool{}
	for _, e := range st.Tensors {
		switch {
		case e.Name == "" || e.Name == "__metadata__":
			return fmt.Errorf("tensor name %q is not allowed", e.Name)
		case seen[e.Name]:
			return fmt.Errorf("tensor %q appears twice", e.Name)
		case e.Data == nil:
			return fmt.Errorf("tensor %q: no data", e.Name)
		case !e.Data.Device().IsCPU() || !e.Data.Contiguous():
			return fmt.Errorf("tensor %q: %v is not a contiguous host tensor", e.Name, e.Data)
		case safetensors.DTypeName(e.Data.DType()) == "":
			return fmt.Errorf("tensor %q: dtype %v cannot be saved", e.Name, e.Data.DType())
		case e.Shard != nil && (e.Data.Dim() != 1 || e.Shard.Offset < 0 || e.Shard.Numel < 0):
			return fmt.Errorf("tensor %q: a shard must be 1-D with offset, numel >= 0 (have %v, %+v)", e.Name, e.Data, *e.Shard)
		}
		for _, r := range e.File {
			if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_') {
				return fmt.Errorf("tensor %q: file group %q: use [a-z0-9_]", e.Name, e.File)
			}
		}
		seen[e.Name] = true
	}
	return nil
}

func prepare(fsys vfs.FS, dir, tag, stage string) error {
	if err := fsys.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := cleanStale(fsys, dir); err != nil {
		return fmt.Errorf("removing leftovers of interrupted saves: %w", err)
	}
	if latest, err := ReadLatest(fsys, dir); err == nil && latest == tag {
		return fmt.Errorf("tag %q is the latest checkpoint of %s: saving over it is not atomic, choose another tag", tag, dir)
	}
	if err := fsys.MkdirAll(stage, 0o755); err != nil {
		return err
	}
	return syncDir(fsys, dir)
}

// writeRank writes this rank's files into stage and returns its manifest
// part and the bytes written.
func writeRank(ctx context.Context, o Options, st *State, tag, stage string) (*RankManifest, int64, error) {
	c := o.Comm
	rank := rankOf(c)
	ents := st.Tensors
	if o.Gathered {
		g, free, err := gather(ctx, c, ents)
		defer free()
		if err != nil {
			return nil, 0, err
		}
		ents = g
	}
	rm := &RankManifest{Rank: rank, Files: []FileInfo{}, Tensors: []TensorInfo{}, Meta: st.Meta}
	var groups []string
	byGroup := map[string][]Entry{}
	for _, e := range ents {
		g := ""
		if o.Type != TypeBlob {
			g = cmp.Or(e.File, "model")
		}
		if _, ok := byGroup[g]; !ok {
			groups = append(groups, g)
		}
		byGroup[g] = append(byGroup[g], e)
	}
	var total int64
	for _, g := range groups {
		name := fileName(rank, g)
		fi, err := writeTensors(o.fs(), filepath.Join(stage, name), byGroup[g], map[string]string{
			"format": "pt", "deepgo.tag": tag, "deepgo.rank": strconv.Itoa(rank),
		})
		if err != nil {
			return nil, total, err
		}
		fi.Name = name
		total += fi.Size
		rm.Files = append(rm.Files, fi)
		for _, e := range byGroup[g] {
			rm.Tensors = append(rm.Tensors, TensorInfo{Name: e.Name, File: name, DType: safetensors.DTypeName(e.Data.DType()), Shape: e.Data.Shape(), Shard: e.Shard})
		}
	}
	return rm, total, nil
}

type countingHash struct {
	crc uint32
	n   int64
}

func (h *countingHash) Write(p []byte) (int, error) {
	h.crc = crc32.Update(h.crc, castagnoli, p)
	h.n += int64(len(p))
	return len(p), nil
}

// writeTensors writes ents as one safetensors file, synced, and returns
// its size and checksum.
func writeTensors(fsys vfs.FS, path string, ents []Entry, meta map[string]string) (FileInfo, error) {
	named := make([]safetensors.Named, len(ents))
	for i, e := range ents {
		named[i] = safetensors.Named{Name: e.Name, Tensor: e.Data}
	}
	f, err := fsys.Create(path)
	if err != nil {
		return FileInfo{}, err
	}
	h := &countingHash{}
	if _, err := safetensors.Write(io.MultiWriter(f, h), named, meta); err != nil {
		f.Close()
		return FileInfo{}, fmt.Errorf("writing %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return FileInfo{}, err
	}
	if err := f.Close(); err != nil {
		return FileInfo{}, err
	}
	return FileInfo{Size: h.n, CRC32C: crcHex(h.crc)}, nil
}

// gather assembles every sharded entry on rank 0 (all ranks take part;
// pieces must be equal-sized and in rank order). Rank 0 gets whole
// entries, the other ranks their whole tensors only.
func gather(ctx context.Context, c comm.Comm, ents []Entry) ([]Entry, func(), error) {
	var owned []*tensor.Tensor
	free := func() {
		for _, t := range owned {
			t.Free()
		}
	}
	var out []Entry
	for _, e := range ents {
		if e.Shard == nil {
			out = append(out, e)
			continue
		}
		m := e.Data.Numel()
		if e.Shard.Offset != int64(rankOf(c)*m) {
			return nil, free, fmt.Errorf("tensor %q: gathered saving needs equal pieces in rank order, rank %d's starts at %d, not %d", e.Name, rankOf(c), e.Shard.Offset, rankOf(c)*m)
		}
		full, err := tensor.Empty(e.Data.DType(), worldOf(c)*m)
		if err != nil {
			return nil, free, err
		}
		owned = append(owned, full)
		if c == nil {
			if err := copyTensor(full, e.Data); err != nil {
				return nil, free, err
			}
		} else if err := comm.AllGatherHost(ctx, c, full, e.Data); err != nil {
			return nil, free, fmt.Errorf("gathering %q: %w", e.Name, err)
		}
		if rankOf(c) == 0 {
			out = append(out, Entry{Name: e.Name, File: e.File, Data: full, Shard: &Shard{Numel: e.Shard.Numel}})
		}
	}
	return out, free, nil
}

func copyTensor(dst, src *tensor.Tensor) error {
	d, err := dst.RawBytes()
	if err != nil {
		return err
	}
	s, err := src.RawBytes()
	if err != nil {
		return err
	}
	copy(d, s)
	return nil
}

// commit runs on rank 0 once every rank's files are durable.
func commit(o Options, st *State, tag, stage, final string, ranks [][]byte) ([]string, error) {
	fsys := o.fs()
	m := &Manifest{
		Format: Format, Version: Version, Tag: tag, Step: st.Step, World: len(ranks),
		Topology: st.Topology, ZeroStage: st.ZeroStage, CheckpointType: cmp.Or(o.Type, TypeSharded),
		Gathered: o.Gathered, Config: st.Config, Params: st.Params,
	}
	for r, b := range ranks {
		var rm RankManifest
		if err := json.Unmarshal(b, &rm); err != nil {
			return nil, fmt.Errorf("rank %d's manifest: %w", r, err)
		}
		m.Ranks = append(m.Ranks, rm)
	}
	if err := m.Validate(); err != nil {
		return nil, fmt.Errorf("the ranks' states do not form a valid checkpoint: %w", err)
	}
	body, err := encodeManifest(m)
	if err != nil {
		return nil, err
	}
	if err := writeFile(fsys, filepath.Join(stage, manifestName), body); err != nil {
		return nil, err
	}
	if err := syncDir(fsys, stage); err != nil {
		return nil, err
	}
	if _, err := fsys.Stat(final); err == nil {
		// An older checkpoint under this tag that latest does not name
		// (prepare refused that case): moved aside only now that the
		// replacement is durable.
		if err := trash(fsys, o.Dir, tag); err != nil {
			return nil, fmt.Errorf("replacing the older checkpoint %s: %w", final, err)
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	if err := fsys.Rename(stage, final); err != nil {
		return nil, err
	}
	if err := syncDir(fsys, o.Dir); err != nil {
		return nil, err
	}
	if err := replaceFile(fsys, filepath.Join(o.Dir, latestName), encodeLatest(tag)); err != nil {
		return nil, fmt.Errorf("updating latest: %w", err)
	}
	removed, err := rotate(fsys, o.Dir, o.Keep, tag)
	if err != nil {
		return removed, err
	}
	return removed, nil
}
