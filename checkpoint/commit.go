package checkpoint

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"

	"github.com/deepgo-ml/deepgo/checkpoint/vfs"
)

// writeFile creates name with data and syncs it before closing.
func writeFile(fsys vfs.FS, name string, data []byte) error {
	f, err := fsys.Create(name)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// syncDir makes the entries of dir (creations, renames, removals) durable.
func syncDir(fsys vfs.FS, dir string) error {
	d, err := fsys.OpenDir(dir)
	if err != nil {
		return err
	}
	if err := d.Sync(); err != nil {
		d.Close()
		return err
	}
	return d.Close()
}

// readFile reads all of name, refusing files over limit bytes.
func readFile(fsys vfs.FS, name string, limit int64) ([]byte, error) {
	f, err := fsys.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if st.Size() > limit {
		return nil, fmt.Errorf("%s: %d bytes, more than the %d allowed", name, st.Size(), limit)
	}
	b := make([]byte, st.Size())
	if _, err := io.ReadFull(f, b); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return b, nil
}

// replaceFile writes data to name atomically and durably: a temporary
// file in the same directory, synced, renamed over name, directory synced.
func replaceFile(fsys vfs.FS, name string, data []byte) error {
	dir := filepath.Dir(name)
	tmp := filepath.Join(dir, "."+filepath.Base(name)+".tmp")
	if err := writeFile(fsys, tmp, data); err != nil {
		return err
	}
	if err := fsys.Rename(tmp, name); err != nil {
		return err
	}
	return syncDir(fsys, dir)
}

// ReadLatest returns the tag the latest file of saveDir names.
func ReadLatest(fsys vfs.FS, saveDir string) (string, error) {
	if fsys == nil {
		fsys = vfs.OS
	}
	name := filepath.Join(saveDir, latestName)
	b, err := readFile(fsys, name, 4096)
	if err != nil {
		return "", fmt.Errorf("checkpoint: reading latest: %w", err)
	}
	tag, err := decodeLatest(b)
	if err != nil {
		return "", fmt.Errorf("checkpoint: %s: %w", name, err)
	}
	if !strings.Contains(strings.TrimSuffix(string(b), "\n"), "\n") {
		if err := newestBare(fsys, saveDir, tag); err != nil {
			return "", fmt.Errorf("checkpoint: %s: %w", name, err)
		}
	}
	return tag, nil
}

// newestBare accepts a bare tag (DeepSpeed's latest, no checksum) only if
// no other checkpoint in saveDir holds a later step: a deepgo latest file
// cut short after its tag's first digits reads as a valid bare tag
// ("global_step1" from "global_step10\ncrc32c=..."), and must not resume an
// older checkpoint without a word. Tags whose manifest cannot be read are
// left for Open and VerifyAll to report.
func newestBare(fsys vfs.FS, saveDir, tag string) error {
	m, err := ReadManifest(fsys, saveDir, tag)
	if err != nil {
		return nil // Open reports a missing or damaged tag
	}
	tags, err := tagDirs(fsys, saveDir)
	if err != nil {
		return err
	}
	for _, t := range tags {
		if t == tag {
			continue
		}
		if o, err := ReadManifest(fsys, saveDir, t); err == nil && o.Step > m.Step {
			return fmt.Errorf("names %q without a checksum (DeepSpeed's format), but %q holds a later step (%d > %d): a deepgo latest file cut short reads like this; to resume an older checkpoint on purpose, name its folder (deepgo train: checkpoint.load_path %s) or write deepgo's form \"<tag>\\ncrc32c=<hex>\\n\" (SetLatest)", tag, t, o.Step, m.Step, filepath.Join(saveDir, tag))
		}
	}
	return nil
}

// latestTagMissing reports, wrapping fs.ErrNotExist, that the folder of
// tag, which the latest file of saveDir names, is missing, listing the tag
// folders present; nil when the folder is there.
func latestTagMissing(fsys vfs.FS, saveDir, tag string) error {
	_, err := fsys.Stat(filepath.Join(saveDir, tag))
	if !errors.Is(err, fs.ErrNotExist) {
		return nil // present, or another error that reading it will report
	}
	present := "none"
	if tags, lerr := tagDirs(fsys, saveDir); lerr == nil && len(tags) > 0 {
		slices.Sort(tags)
		present = strings.Join(tags, ", ")
	}
	return fmt.Errorf("checkpoint: tag %q named by %s not found (tags present: %s): %w",
		tag, filepath.Join(saveDir, latestName), present, fs.ErrNotExist)
}

// ReadManifest reads and verifies <saveDir>/<tag>/manifest.json: its
// checksum, its structure, and that it belongs to tag.
func ReadManifest(fsys vfs.FS, saveDir, tag string) (*Manifest, error) {
	if fsys == nil {
		fsys = vfs.OS
	}
	name := filepath.Join(saveDir, tag, manifestName)
	b, err := readFile(fsys, name, 1<<30)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	m, err := decodeManifest(b)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %s: %w", name, err)
	}
	if m.Tag != tag {
		return nil, fmt.Errorf("checkpoint: %s: manifest is for tag %q, not %q", name, m.Tag, tag)
	}
	return m, nil
}

// Info is a committed checkpoint of a save directory.
type Info struct {
	Tag      string
	Manifest *Manifest
}

// List returns the committed checkpoints of saveDir (directories with a
// valid manifest; saves in progress and damaged manifests are skipped),
// oldest first: by step, then by tag.
func List(fsys vfs.FS, saveDir string) ([]Info, error) {
	if fsys == nil {
		fsys = vfs.OS
	}
	tags, err := tagDirs(fsys, saveDir)
	if err != nil {
		return nil, err
	}
	var out []Info
	for _, tag := range tags {
		m, err := ReadManifest(fsys, saveDir, tag)
		if err != nil {
			continue
		}
		out = append(out, Info{Tag: tag, Manifest: m})
	}
	slices.SortFunc(out, func(a, b Info) int {
		return cmp.Or(cmp.Compare(a.Manifest.Step, b.Manifest.Step), strings.Compare(a.Tag, b.Tag))
	})
	return out, nil
}

// tagDirs lists the directories of saveDir named like tags: committed
// checkpoints and damaged ones, not saves in progress or deletions.
func tagDirs(fsys vfs.FS, saveDir string) ([]string, error) {
	ents, err := fsys.ReadDir(saveDir)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: listing %s: %w", saveDir, err)
	}
	var tags []string
	for _, e := range ents {
		if e.IsDir() && validTag(e.Name()) == nil {
			tags = append(tags, e.Name())
		}
	}
	return tags, nil
}

// trash removes dir without ever leaving a partly deleted checkpoint under
// a valid tag name: it is renamed to .deleted.<tag> first (durably), then
// removed.
func trash(fsys vfs.FS, saveDir, tag string) error {
	tmp := filepath.Join(saveDir, trashPrefix+tag)
	if err := fsys.RemoveAll(tmp); err != nil {
		return err
	}
	if err := fsys.Rename(filepath.Join(saveDir, tag), tmp); err != nil {
		return err
	}
	if err := syncDir(fsys, saveDir); err != nil {
		return err
	}
	return fsys.RemoveAll(tmp)
}

// rotate deletes the oldest committed checkpoints of saveDir so that keep
// remain (keep <= 0 keeps all), never the one latest names.
func rotate(fsys vfs.FS, saveDir string, keep int, latest string) ([]string, error) {
	if keep <= 0 {
		return nil, nil
	}
	all, err := List(fsys, saveDir)
	if err != nil {
		return nil, err
	}
	var removed []string
	for i := 0; i < len(all)-keep; i++ {
		if all[i].Tag == latest {
			continue
		}
		if err := trash(fsys, saveDir, all[i].Tag); err != nil {
			return removed, fmt.Errorf("checkpoint: rotating out %s: %w", all[i].Tag, err)
		}
		removed = append(removed, all[i].Tag)
	}
	return removed, nil
}

// cleanStale removes what interrupted saves and rotations left behind.
func cleanStale(fsys vfs.FS, saveDir string) error {
	ents, err := fsys.ReadDir(saveDir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	}
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), stagePrefix) || strings.HasPrefix(e.Name(), trashPrefix) {
			if err := fsys.RemoveAll(filepath.Join(saveDir, e.Name())); err != nil {
				return err
			}
		}
	}
	return nil
}
