package checkpoint

import (
	"bytes"
	"fmt"
	"hash/crc32"
	"path/filepath"

	"github.com/deepgo-ml/deepgo/checkpoint/vfs"
)

// Reseal records the current size and CRC-32C of every data file of
// checkpoint tag of saveDir in its manifest and rewrites the manifest
// atomically and durably. It is for tools that edit a checkpoint's tensors
// in place (patching a value, replacing a rank's file with a copy): after
// it the edited checkpoint verifies, so what the edit changed is caught
// only by checks of the values themselves, such as VerifyReplicated after
// a load. Every file must still parse as the safetensors file the
// manifest describes (same tensors, dtypes and shapes).
func Reseal(fsys vfs.FS, saveDir, tag string) error {
	if fsys == nil {
		fsys = vfs.OS
	}
	m, err := ReadManifest(fsys, saveDir, tag)
	if err != nil {
		return err
	}
	dir := filepath.Join(saveDir, tag)
	idx, _ := buildIndex(m) // ReadManifest validated it
	c := &Checkpoint{Tag: tag, Path: dir, Manifest: m, fs: fsys, index: idx, files: map[string]FileInfo{}}
	for r := range m.Ranks {
		for i, f := range m.Ranks[r].Files {
			b, err := readFile(fsys, filepath.Join(dir, f.Name), 1<<40)
			if err != nil {
				return fmt.Errorf("checkpoint: reseal: %w", err)
			}
			if _, err := c.parseHeader(f.Name, bytes.NewReader(b), int64(len(b))); err != nil {
				return fmt.Errorf("checkpoint: reseal: %w", err)
			}
			m.Ranks[r].Files[i].Size = int64(len(b))
			m.Ranks[r].Files[i].CRC32C = crcHex(crc32.Checksum(b, castagnoli))
		}
	}
	body, err := encodeManifest(m)
	if err != nil {
		return fmt.Errorf("checkpoint: reseal: %w", err)
	}
	if err := replaceFile(fsys, filepath.Join(dir, manifestName), body); err != nil {
		return fmt.Errorf("checkpoint: reseal: %w", err)
	}
	return nil
}
