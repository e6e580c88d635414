package checkpoint

import (
	"bytes"
	"hash/crc32"
	"math/big"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// FuzzManifest feeds arbitrary bytes to the manifest reader twice: as the
// file itself (the envelope must hold) and wrapped in an envelope with the
// right checksum (so the JSON and the validation are reached). It must
// never panic; a manifest it accepts must encode back to a manifest that
// decodes to the same encoding, and its arithmetic must hold exactly:
// element counts fit int64, each sharded tensor's pieces cover it without
// overlap, each parameter lies inside its source tensor.
func FuzzManifest(f *testing.F) {
	for _, o := range []Options{{}, {Type: TypeBlob}} {
		for _, world := range []int{1, 2, 3} {
			dir := f.TempDir()
			saveWorld(f, dir, world, 7, o)
			b, err := os.ReadFile(filepath.Join(dir, DefaultTag(7), manifestName))
			if err != nil {
				f.Fatal(err)
			}
			f.Add(b)
			f.Add(b[len(envPrefix)+8+len(envMiddle) : len(b)-len(envSuffix)])
		}
	}
	f.Add([]byte(`{"format":"deepgo.checkpoint","version":1,"tag":"t","world":1,"zero_stage":0,"checkpoint_type":"sharded","gathered":false,` +
		`"ranks":[{"rank":0,"files":[{"name":"a","size":8,"crc32c":"00000000"}],"tensors":[{"name":"x","file":"a","dtype":"F32","shape":[4611686018427387904,4]}]}]}`))
	// Pieces past the end whose offset plus length overflows int64.
	f.Add([]byte(`{"format":"deepgo.checkpoint","version":1,"tag":"t","world":3,"zero_stage":2,"checkpoint_type":"sharded","gathered":false,"ranks":[` +
		`{"rank":0,"files":[{"name":"a","size":0,"crc32c":"00000000"}],"tensors":[{"name":"x","file":"a","dtype":"U8","shape":[10],"shard":{"numel":10,"offset":0}}]},` +
		`{"rank":1,"files":[{"name":"b","size":0,"crc32c":"00000000"}],"tensors":[{"name":"x","file":"b","dtype":"U8","shape":[9223372036854775807],"shard":{"numel":10,"offset":4611686018427387904}}]},` +
		`{"rank":2,"files":[{"name":"c","size":0,"crc32c":"00000000"}],"tensors":[{"name":"x","file":"c","dtype":"U8","shape":[1],"shard":{"numel":10,"offset":4611686018427387904}}]}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		if m, err := decodeManifest(b); err == nil {
			checkAcceptedManifest(t, m)
		}
		var env bytes.Buffer
		env.WriteString(envPrefix + crcHex(crc32.Checksum(b, castagnoli)) + envMiddle)
		env.Write(b)
		env.WriteString(envSuffix)
		if m, err := decodeManifest(env.Bytes()); err == nil {
			checkAcceptedManifest(t, m)
		}
	})
}

func checkAcceptedManifest(t *testing.T, m *Manifest) {
	t.Helper()
	enc, err := encodeManifest(m)
	require.NoError(t, err, "accepted manifest does not encode")
	back, err := decodeManifest(enc)
	require.NoError(t, err, "accepted manifest encodes to one that is rejected:\n%s", enc)
	enc2, _ := encodeManifest(back)
	require.Equal(t, string(enc), string(enc2), "encoding is not stable")
	maxInt64 := big.NewInt(1<<63 - 1)
	exact := func(shape []int) *big.Int {
		n := big.NewInt(1)
		for _, d := range shape {
			n.Mul(n, big.NewInt(int64(d)))
		}
		return n
	}
	numel := map[string]*big.Int{}
	type span struct{ lo, hi *big.Int }
	pieces := map[string][]span{}
	for _, r := range m.Ranks {
		for _, ti := range r.Tensors {
			n := exact(ti.Shape)
			require.LessOrEqual(t, n.Cmp(maxInt64), 0, "accepted tensor %q of shape %v: %v elements overflow int64", ti.Name, ti.Shape, n)
			if ti.Shard == nil {
				numel[ti.Name] = n
				continue
			}
			numel[ti.Name] = big.NewInt(ti.Shard.Numel)
			lo := big.NewInt(ti.Shard.Offset)
			pieces[ti.Name] = append(pieces[ti.Name], span{lo, new(big.Int).Add(lo, n)})
		}
	}
	for name, ps := range pieces {
		// Every element of [0, numel) is in exactly one piece.
		covered := new(big.Int)
		for i, p := range ps {
			lo, hi := p.lo, p.hi
			if hi.Cmp(numel[name]) > 0 {
				hi = numel[name]
			}
			if lo.Cmp(hi) < 0 {
				covered.Add(covered, new(big.Int).Sub(hi, lo))
			}
			for _, q := range ps[i+1:] {
				overlap := p.lo.Cmp(q.hi) < 0 && q.lo.Cmp(p.hi) < 0 && p.lo.Cmp(p.hi) < 0 && q.lo.Cmp(q.hi) < 0
				require.False(t, overlap, "accepted tensor %q with overlapping pieces [%v, %v) and [%v, %v)", name, p.lo, p.hi, q.lo, q.hi)
			}
		}
		require.Zero(t, covered.Cmp(numel[name]), "accepted tensor %q: pieces cover %v of %v elements", name, covered, numel[name])
	}
	for _, p := range m.Params {
		end := new(big.Int).Add(big.NewInt(p.Offset), exact(p.Shape))
		require.False(t, p.Offset < 0 || end.Cmp(numel[p.Source]) > 0, "accepted param %q: elements [%d, %v) outside %q of %v elements", p.Name, p.Offset, end, p.Source, numel[p.Source])
	}
}

// FuzzLatest feeds arbitrary bytes to the reader of the latest file. It
// must never panic; what it accepts is exactly what encodeLatest writes for
// the tag it returns or DeepSpeed's latest (the tag, optionally followed by
// a newline), and every valid tag survives the round trip.
func FuzzLatest(f *testing.F) {
	for _, tag := range []string{"global_step7", "a", "v1.0+rc-2_x"} {
		f.Add(encodeLatest(tag))
		f.Add([]byte(tag))
	}
	f.Add([]byte("global_step7\ncrc32c=00000000\n"))
	f.Add([]byte("global_step7\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		if tag, err := decodeLatest(b); err == nil {
			require.NoError(t, validTag(tag), "accepted %q as tag %q", b, tag)
			require.Contains(t, []string{string(encodeLatest(tag)), tag, tag + "\n"}, string(b), "accepted %q as tag %q, which encodes differently", b, tag)
		}
		if tag := string(b); validTag(tag) == nil {
			back, err := decodeLatest(encodeLatest(tag))
			require.NoError(t, err, "tag %q: round trip", tag)
			require.Equal(t, tag, back, "tag %q: round trip", tag)
		}
	})
}
