package checkpoint

import (
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestDeepSpeedLatest: a latest file as DeepSpeed writes it (the tag
// alone, with or without a newline) names that tag; deepgo's own format
// keeps its checksum; a named tag that is missing is said so, with the
// tags present.
func TestDeepSpeedLatest(t *testing.T) {
	for _, tc := range []struct {
		name    string
		latest  string
		wantTag string   // "" when an error is expected
		is      error    // the error wraps it, when not nil
		want    []string // the error contains each
	}{
		{name: "DeepSpeed, no newline", latest: "global_step4", wantTag: "global_step4"},
		{name: "DeepSpeed, newline", latest: "global_step4\n", wantTag: "global_step4"},
		{name: "deepgo", latest: string(encodeLatest("global_step4")), wantTag: "global_step4"},
		{name: "deepgo, bad checksum", latest: "global_step4\ncrc32c=00000000\n", want: []string{"checksum 00000000 does not match"}},
		{name: "DeepSpeed, missing tag", latest: "global_step10", is: fs.ErrNotExist,
			want: []string{`tag "global_step10" named by `, "latest not found (tags present: global_step4)"}},
		{name: "DeepSpeed, two newlines", latest: "global_step4\n\n", want: []string{"latest", "nor one tag line"}},
		{name: "DeepSpeed, bad tag", latest: "global step4", want: []string{"latest", `character ' ' not allowed`}},
		{name: "empty", latest: "", want: []string{"latest", "must be 1-200 characters"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			saveWorld(t, dir, 2, 4, Options{})
			require.NoError(t, os.WriteFile(filepath.Join(dir, latestName), []byte(tc.latest), 0o644))
			err := loadAll(dir)
			if tc.wantTag != "" {
				require.NoError(t, err)
				tag, err := ReadLatest(nil, dir)
				require.NoError(t, err)
				require.Equal(t, tc.wantTag, tag)
				return
			}
			require.Error(t, err)
			if tc.is != nil {
				require.ErrorIs(t, err, tc.is)
			}
			for _, w := range tc.want {
				require.ErrorContains(t, err, w)
			}
			if tc.is != nil {
				require.ErrorContains(t, err, filepath.Join(dir, latestName))
			}
		})
	}
}

// A deepgo latest file cut short after "global_step1" of "global_step10"
// reads as a bare tag; it must not resume step 1 while step 10 is there.
func TestTruncatedLatestNotOlder(t *testing.T) {
	dir := t.TempDir()
	saveWorld(t, dir, 2, 1, Options{})
	saveWorld(t, dir, 2, 10, Options{})
	full := encodeLatest("global_step10")
	require.NoError(t, os.WriteFile(filepath.Join(dir, latestName), full[:12], 0o644))
	_, err := ReadLatest(nil, dir)
	require.ErrorContains(t, err, `"global_step10" holds a later step (10 > 1)`)
	// the same bare tag naming the newest checkpoint is DeepSpeed's latest
	require.NoError(t, os.WriteFile(filepath.Join(dir, latestName), []byte("global_step10"), 0o644))
	tag, err := ReadLatest(nil, dir)
	require.NoError(t, err)
	require.Equal(t, "global_step10", tag)
}
