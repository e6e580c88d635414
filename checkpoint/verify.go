package checkpoint

import (
	"cmp"
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/deepgo-ml/deepgo/checkpoint/vfs"
)

// Verdict is one checkpoint of a save directory and whether it verifies.
type Verdict struct {
	// Tag is the checkpoint's directory name.
	Tag string
	// Step is the step its manifest records; -1 when the manifest is unreadable.
	Step int64
	// Err is nil when the manifest and every data file verify, else why not.
	Err error
}

// VerifyAll verifies every checkpoint of saveDir (each directory with a
// valid tag name; saves in progress and deletions aside): its manifest, and
// every data file read through against its size, checksum and header. It
// is what to run when the latest checkpoint will not load, to find the
// newest one that would. Verdicts come newest first, by step then tag;
// those with an unreadable manifest last.
func VerifyAll(ctx context.Context, fsys vfs.FS, saveDir string) ([]Verdict, error) {
	if fsys == nil {
		fsys = vfs.OS
	}
	tags, err := tagDirs(fsys, saveDir)
	if err != nil {
		return nil, err
	}
	var out []Verdict
	for _, tag := range tags {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		v := Verdict{Tag: tag, Step: -1}
		ck, err := Open(fsys, saveDir, tag)
		if err == nil {
			v.Step = ck.Manifest.Step
			err = ck.Verify(ctx)
			ck.Close()
		}
		v.Err = err
		out = append(out, v)
	}
	slices.SortFunc(out, func(a, b Verdict) int {
		return cmp.Or(cmp.Compare(b.Step, a.Step), strings.Compare(b.Tag, a.Tag))
	})
	return out, nil
}

// SetLatest makes the latest file of saveDir name tag, whose manifest must
// verify, atomically and durably: how a run resumed from an older
// checkpoint than latest named makes later saves and resumes agree with it.
func SetLatest(fsys vfs.FS, saveDir, tag string) error {
	if fsys == nil {
		fsys = vfs.OS
	}
	if err := validTag(tag); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	if _, err := ReadManifest(fsys, saveDir, tag); err != nil {
		return err
	}
	if err := replaceFile(fsys, filepath.Join(saveDir, latestName), encodeLatest(tag)); err != nil {
		return fmt.Errorf("checkpoint: updating latest: %w", err)
	}
	return nil
}
