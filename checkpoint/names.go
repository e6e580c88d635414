package checkpoint

import (
	"bytes"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"strconv"
	"strings"
)

// File and directory names inside a save directory.
const (
	latestName   = "latest"        // <save_dir>/latest: the newest durable tag
	manifestName = "manifest.json" // <save_dir>/<tag>/manifest.json
	stagePrefix  = ".tmp."         // <save_dir>/.tmp.<tag>: a save in progress
	trashPrefix  = ".deleted."     // <save_dir>/.deleted.<tag>: being removed
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func crcHex(sum uint32) string { return fmt.Sprintf("%08x", sum) }

// DefaultTag is DeepSpeed's default tag for step: "global_step<step>".
func DefaultTag(step int64) string { return "global_step" + strconv.FormatInt(step, 10) }

// validTag accepts tags that are safe directory names: letters, digits,
// '.', '_', '-' and '+', not starting with '.'.
func validTag(tag string) error {
	if tag == "" || len(tag) > 200 || tag[0] == '.' {
		return fmt.Errorf("tag %q: must be 1-200 characters, not starting with '.'", tag)
	}
	for _, r := range tag {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("._-+", r)
		if !ok {
			return fmt.Errorf("tag %q: character %q not allowed (letters, digits, '.', '_', '-', '+')", tag, r)
		}
	}
	return nil
}

// encodeLatest is the content of the latest file: the tag on the first
// line (what DeepSpeed's latest holds), then the tag's CRC-32C, so that a
// damaged latest is detected instead of naming another checkpoint.
func encodeLatest(tag string) []byte {
	return fmt.Appendf(nil, "%s\ncrc32c=%s\n", tag, crcHex(crc32.Checksum([]byte(tag), castagnoli)))
}

// decodeLatest reads a latest file: deepgo's own ("<tag>\ncrc32c=<hex>\n",
// the checksum verified) or DeepSpeed's (the tag alone, optionally
// followed by one newline), which has no checksum: the manifest and data
// checksums of the checkpoint it names still verify what is loaded. A
// single-bit change of deepgo's format never reads as DeepSpeed's: the
// second line's '=' is not a tag character.
func decodeLatest(b []byte) (string, error) {
	if one := strings.TrimSuffix(string(b), "\n"); !strings.Contains(one, "\n") {
		if err := validTag(one); err != nil {
			return "", fmt.Errorf("not a DeepSpeed latest file (one tag line) nor deepgo's \"<tag>\\ncrc32c=<hex>\\n\": %w", err)
		}
		return one, nil
	}
	lines := strings.Split(string(b), "\n")
	if len(lines) != 3 || lines[2] != "" || !strings.HasPrefix(lines[1], "crc32c=") {
		return "", fmt.Errorf("not \"<tag>\\ncrc32c=<hex>\\n\" (deepgo's) nor one tag line (DeepSpeed's) (%d bytes)", len(b))
	}
	tag := lines[0]
	if err := validTag(tag); err != nil {
		return "", err
	}
	if want := crcHex(crc32.Checksum([]byte(tag), castagnoli)); lines[1][7:] != want {
		return "", fmt.Errorf("checksum %s does not match tag %q (crc32c %s)", lines[1][7:], tag, want)
	}
	return tag, nil
}

// The manifest file is an envelope holding the manifest's CRC-32C and the
// manifest itself, byte for byte as checksummed:
//
//	{"crc32c":"89abcdef","manifest":{...}}\n
//
// It stays plain JSON for other tools, and every byte is covered: the
// prefix and suffix are fixed, the checksum covers the rest.
const (
	envPrefix = `{"crc32c":"`
	envMiddle = `","manifest":`
	envSuffix = "}\n"
)

func encodeManifest(m *Manifest) ([]byte, error) {
	body, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("encoding manifest: %w", err)
	}
	var b bytes.Buffer
	b.WriteString(envPrefix)
	b.WriteString(crcHex(crc32.Checksum(body, castagnoli)))
	b.WriteString(envMiddle)
	b.Write(body)
	b.WriteString(envSuffix)
	return b.Bytes(), nil
}

func decodeManifest(b []byte) (*Manifest, error) {
	head := len(envPrefix) + 8 + len(envMiddle)
	if len(b) < head+len(envSuffix) || string(b[:len(envPrefix)]) != envPrefix ||
		string(b[len(envPrefix)+8:head]) != envMiddle || !bytes.HasSuffix(b, []byte(envSuffix)) {
		return nil, fmt.Errorf("not a manifest envelope ({\"crc32c\":...,\"manifest\":...})")
	}
	sum := string(b[len(envPrefix) : len(envPrefix)+8])
	body := b[head : len(b)-len(envSuffix)]
	if got := crcHex(crc32.Checksum(body, castagnoli)); got != sum {
		return nil, fmt.Errorf("manifest checksum mismatch: recorded crc32c %s, content has %s", sum, got)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	m := new(Manifest)
	if err := dec.Decode(m); err != nil {
		return nil, fmt.Errorf("decoding manifest: %w", err)
	}
	if dec.More() {
		return nil, fmt.Errorf("decoding manifest: data after the JSON value")
	}
	if err := m.Validate(); err != nil {
		return nil, fmt.Errorf("invalid manifest: %w", err)
	}
	return m, nil
}

// fileName is the name of rank's file for group (checkpoint_type
// "sharded") or of its only file (group "" for "blob"), after DeepSpeed's
// zero_pp_rank_D_mp_rank_XX_*_states names.
func fileName(rank int, group string) string {
	if group == "" {
		return fmt.Sprintf("zero_pp_rank_%d_mp_rank_00_states.safetensors", rank)
	}
	return fmt.Sprintf("zero_pp_rank_%d_mp_rank_00_%s_states.safetensors", rank, group)
}
