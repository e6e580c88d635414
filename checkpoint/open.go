package checkpoint

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"path/filepath"
	"runtime"
	"slices"
	"sync"

	"github.com/deepgo-ml/deepgo/checkpoint/safetensors"
	"github.com/deepgo-ml/deepgo/checkpoint/vfs"
	"github.com/deepgo-ml/deepgo/tensor"
	"golang.org/x/sync/errgroup"
)

// ErrCorrupt is wrapped by every error about a checkpoint file whose
// content is wrong: a checksum mismatch, a wrong size (truncated or
// grown), a malformed header, or a header that disagrees with the
// manifest. A missing file wraps fs.ErrNotExist instead.
var ErrCorrupt = errors.New("corrupt checkpoint")

// Checkpoint is an opened checkpoint: its verified manifest, and the data
// files read so far (each verified against its size and checksum before
// any of its bytes is handed out). Methods are safe for concurrent use.
type Checkpoint struct {
	// Tag is the checkpoint's tag; Path its directory.
	Tag, Path string
	// Manifest is the verified manifest.
	Manifest *Manifest

	fs    vfs.FS
	index map[string]*Global
	files map[string]FileInfo

	mu     sync.Mutex
	loaded map[string]*loadedFile
}

type loadedFile struct {
	buf *tensor.Tensor // the whole file, uint8
	hdr *safetensors.Header
}

// Open opens the checkpoint tag of saveDir ("" means the one latest
// names) and verifies its manifest. Data files are verified as they are
// read (Load, ReadRange) or all at once by Verify. Close releases the
// memory of the files read.
func Open(fsys vfs.FS, saveDir, tag string) (*Checkpoint, error) {
	if fsys == nil {
		fsys = vfs.OS
	}
	named := tag == "" // the tag latest names
	if named {
		t, err := ReadLatest(fsys, saveDir)
		if err != nil {
			if _, serr := fsys.Stat(filepath.Join(saveDir, manifestName)); errors.Is(err, fs.ErrNotExist) && serr == nil {
				// one checkpoint's folder, given where its save
				// directory belongs
				return nil, fmt.Errorf("%w (%s is one checkpoint's folder, with a %s: load from its save directory %s with tag %q)",
					err, saveDir, manifestName, filepath.Dir(filepath.Clean(saveDir)), filepath.Base(filepath.Clean(saveDir)))
			}
			return nil, err
		}
		tag = t
	} else if err := validTag(tag); err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	m, err := ReadManifest(fsys, saveDir, tag)
	if err != nil {
		if named && errors.Is(err, fs.ErrNotExist) {
			if merr := latestTagMissing(fsys, saveDir, tag); merr != nil {
				return nil, merr
			}
		}
		return nil, err
	}
	idx, _ := buildIndex(m) // Validate built it once already
	c := &Checkpoint{Tag: tag, Path: filepath.Join(saveDir, tag), Manifest: m, fs: fsys, index: idx,
		files: map[string]FileInfo{}, loaded: map[string]*loadedFile{}}
	for _, r := range m.Ranks {
		for _, f := range r.Files {
			c.files[f.Name] = f
		}
	}
	return c, nil
}

// Close frees the files read. Tensors returned by View become invalid.
func (c *Checkpoint) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for name, l := range c.loaded {
		l.buf.Free()
		delete(c.loaded, name)
	}
	return nil
}

// Names lists the checkpoint's tensors (whole, or assembled from pieces).
func (c *Checkpoint) Names() []string {
	out := make([]string, 0, len(c.index))
	for n := range c.index {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// Lookup describes tensor name.
func (c *Checkpoint) Lookup(name string) (*Global, bool) {
	g, ok := c.index[name]
	return g, ok
}

// Meta returns rank's value for key, as saved in State.Meta.
func (c *Checkpoint) Meta(rank int, key string) (json.RawMessage, bool) {
	if rank < 0 || rank >= len(c.Manifest.Ranks) {
		return nil, false
	}
	v, ok := c.Manifest.Ranks[rank].Meta[key]
	return v, ok
}

// Files lists every data file, in rank order.
func (c *Checkpoint) Files() []FileInfo {
	var out []FileInfo
	for _, r := range c.Manifest.Ranks {
		out = append(out, r.Files...)
	}
	return out
}

func (c *Checkpoint) path(name string) string { return filepath.Join(c.Path, name) }

// checkHeader compares a file's safetensors header with the manifest.
func (c *Checkpoint) checkHeader(name string, h *safetensors.Header) error {
	want := map[string]TensorInfo{}
	for _, r := range c.Manifest.Ranks {
		for _, t := range r.Tensors {
			if t.File == name {
				want[t.Name] = t
			}
		}
	}
	if len(h.Tensors) != len(want) {
		return fmt.Errorf("%w: %s: header holds %d tensors, manifest lists %d", ErrCorrupt, c.path(name), len(h.Tensors), len(want))
	}
	for _, t := range h.Tensors {
		w, ok := want[t.Name]
		if !ok {
			return fmt.Errorf("%w: %s: tensor %q is not in the manifest", ErrCorrupt, c.path(name), t.Name)
		}
		if safetensors.DTypeName(t.DType) != w.DType || !slices.Equal(t.Shape, w.Shape) {
			return fmt.Errorf("%w: %s: tensor %q is %s%v, manifest says %s%v", ErrCorrupt, c.path(name), t.Name, safetensors.DTypeName(t.DType), t.Shape, w.DType, w.Shape)
		}
	}
	return nil
}

func (c *Checkpoint) openData(name string) (vfs.File, FileInfo, error) {
	fi, ok := c.files[name]
	if !ok {
		return nil, fi, fmt.Errorf("checkpoint %s: no file %q in the manifest", c.Path, name)
	}
	f, err := c.fs.Open(c.path(name))
	if err != nil {
		return nil, fi, fmt.Errorf("checkpoint: data file missing or unreadable: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fi, fmt.Errorf("checkpoint: %w", err)
	}
	if st.Size() != fi.Size {
		f.Close()
		what := "truncated"
		if st.Size() > fi.Size {
			what = "longer than recorded"
		}
		return nil, fi, fmt.Errorf("%w: %s: %s: %d bytes, manifest records %d", ErrCorrupt, c.path(name), what, st.Size(), fi.Size)
	}
	return f, fi, nil
}

const ioChunk = 8 << 20

// VerifyFile reads data file name through, checking its size, checksum
// and header against the manifest, without keeping it in memory.
func (c *Checkpoint) VerifyFile(ctx context.Context, name string) error {
	f, fi, err := c.openData(name)
	if err != nil {
		return err
	}
	defer f.Close()
	buf := make([]byte, min(ioChunk, max(fi.Size, 1)))
	h := &countingHash{}
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		n, err := f.Read(buf)
		h.Write(buf[:n])
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("checkpoint: reading %s: %w", c.path(name), err)
		}
	}
	if h.n != fi.Size {
		return fmt.Errorf("%w: %s: read %d bytes, manifest records %d", ErrCorrupt, c.path(name), h.n, fi.Size)
	}
	if got := crcHex(h.crc); got != fi.CRC32C {
		return fmt.Errorf("%w: %s: checksum mismatch: crc32c %s, manifest records %s", ErrCorrupt, c.path(name), got, fi.CRC32C)
	}
	_, err = c.parseHeader(name, f, fi.Size)
	return err
}

// parseHeader reads and checks a verified file's safetensors header
// against the manifest.
func (c *Checkpoint) parseHeader(name string, r io.ReaderAt, size int64) (*safetensors.Header, error) {
	h, err := safetensors.ReadHeader(r, size)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrCorrupt, c.path(name), err)
	}
	if err := c.checkHeader(name, h); err != nil {
		return nil, err
	}
	return h, nil
}

// Verify checks every data file of the checkpoint (in parallel) and
// returns an error naming each bad file, or nil.
func (c *Checkpoint) Verify(ctx context.Context) error {
	return c.VerifyFiles(ctx, func(FileInfo) bool { return true })
}

// VerifyFiles checks the data files for which pick returns true, skipping
// those already read into memory (verified then).
func (c *Checkpoint) VerifyFiles(ctx context.Context, pick func(FileInfo) bool) error {
	// The group only bounds and joins the goroutines: each reports into
	// errs and returns nil, so every bad file is named, not the first.
	var (
		g    errgroup.Group
		mu   sync.Mutex
		errs []error
	)
	g.SetLimit(min(8, runtime.GOMAXPROCS(0)))
	for _, f := range c.Files() {
		c.mu.Lock()
		_, done := c.loaded[f.Name]
		c.mu.Unlock()
		if done || !pick(f) {
			continue
		}
		g.Go(func() error {
			if err := c.VerifyFile(ctx, f.Name); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
			return nil
		})
	}
	g.Wait()
	return errors.Join(errs...)
}

// Load reads data file name into memory, verified, unless it is there
// already.
func (c *Checkpoint) Load(ctx context.Context, name string) error {
	_, err := c.load(ctx, name)
	return err
}

func (c *Checkpoint) load(ctx context.Context, name string) (*loadedFile, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if l, ok := c.loaded[name]; ok {
		return l, nil
	}
	f, fi, err := c.openData(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	buf, err := tensor.Empty(tensor.Uint8, int(fi.Size))
	if err != nil {
		return nil, err
	}
	b, _ := buf.RawBytes()
	var crc uint32
	for off := 0; off < len(b); off += ioChunk {
		if err := ctx.Err(); err != nil {
			buf.Free()
			return nil, err
		}
		chunk := b[off:min(off+ioChunk, len(b))]
		if _, err := io.ReadFull(f, chunk); err != nil {
			buf.Free()
			if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
				return nil, fmt.Errorf("%w: %s: truncated while reading", ErrCorrupt, c.path(name))
			}
			return nil, fmt.Errorf("checkpoint: reading %s: %w", c.path(name), err)
		}
		crc = crc32.Update(crc, castagnoli, chunk)
	}
	if got := crcHex(crc); got != fi.CRC32C {
		buf.Free()
		return nil, fmt.Errorf("%w: %s: checksum mismatch: crc32c %s, manifest records %s", ErrCorrupt, c.path(name), got, fi.CRC32C)
	}
	l := &loadedFile{buf: buf}
	if l.hdr, err = c.parseHeader(name, bytes.NewReader(b), fi.Size); err != nil {
		buf.Free()
		return nil, err
	}
	c.loaded[name] = l
	return l, nil
}

// pieceBytes returns the bytes of piece p, reading its file if needed.
func (c *Checkpoint) pieceBytes(ctx context.Context, p Piece) ([]byte, error) {
	l, err := c.load(ctx, p.File)
	if err != nil {
		return nil, err
	}
	info, ok := l.hdr.Find(p.Tensor)
	if !ok {
		return nil, fmt.Errorf("%w: %s: tensor %q missing", ErrCorrupt, c.path(p.File), p.Tensor)
	}
	b, _ := l.buf.RawBytes()
	return b[l.hdr.DataOffset+info.Begin : l.hdr.DataOffset+info.End], nil
}

// ReadRange copies elements [off, off+dst.Numel()) of tensor name into
// dst (a contiguous host tensor of the saved dtype), assembling them from
// whichever ranks' pieces hold them; elements past the tensor's end
// (padding) read as zero. This is how a checkpoint saved by W ranks loads
// into W' ranks: each new rank reads its own range.
func (c *Checkpoint) ReadRange(ctx context.Context, name string, off int64, dst *tensor.Tensor) error {
	g, ok := c.index[name]
	if !ok {
		return fmt.Errorf("checkpoint %s: no tensor %q", c.Path, name)
	}
	if dt, _ := safetensors.ParseDType(g.DType); dt != dst.DType() {
		return fmt.Errorf("checkpoint %s: tensor %q is %s, destination %v", c.Path, name, g.DType, dst)
	}
	out, err := dst.RawBytes()
	if err != nil {
		return fmt.Errorf("checkpoint: reading %q: %w", name, err)
	}
	spans, err := planRange(g, off, int64(dst.Numel()))
	if err != nil {
		return fmt.Errorf("checkpoint %s: %w", c.Path, err)
	}
	clear(out)
	es := int64(dst.DType().Size())
	for _, s := range spans {
		src, err := c.pieceBytes(ctx, g.Pieces[s.piece])
		if err != nil {
			return err
		}
		copy(out[s.dst*es:(s.dst+s.n)*es], src[s.src*es:(s.src+s.n)*es])
	}
	return nil
}

// ReadTensor returns a new host tensor holding all of tensor name: whole
// tensors with their shape, sharded ones as the flat vector of Numel
// elements. The caller frees it.
func (c *Checkpoint) ReadTensor(ctx context.Context, name string) (*tensor.Tensor, error) {
	g, ok := c.index[name]
	if !ok {
		return nil, fmt.Errorf("checkpoint %s: no tensor %q", c.Path, name)
	}
	dt, _ := safetensors.ParseDType(g.DType)
	t, err := tensor.Empty(dt, g.Shape...)
	if err != nil {
		return nil, err
	}
	flat, _ := t.Reshape(int(g.Numel))
	if err := c.ReadRange(ctx, name, 0, flat); err != nil {
		t.Free()
		return nil, err
	}
	return t, nil
}
