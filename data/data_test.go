package data

import (
	"errors"
	"math"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// expected is what gen.py writes: row r holds (7r + 3i) mod 50, i < 5 + r%4.
func expected() []int32 {
	var out []int32
	for r := 0; r < 12; r++ {
		for i := 0; i < 5+r%4; i++ {
			out = append(out, int32((7*r+3*i)%50))
		}
	}
	return out
}

func readAll(t *testing.T, dir string) {
	t.Helper()
	want := expected()
	cases := []struct {
		file, column string
		read         func(string, string) (*Tokens, error)
	}{
		{"tokens.arrow", "input_ids", ReadArrow},
		{"tokens64.arrow", "input_ids", ReadArrow},
		{"tokens.parquet", "input_ids", ReadParquet},
		{"flat.parquet", "ids", ReadParquet},
	}
	for _, c := range cases {
		t.Run(c.file, func(t *testing.T) {
			tok, err := c.read(filepath.Join(dir, c.file), c.column)
			require.NoError(t, err)
			assert.Equal(t, want, tok.IDs, "tokens")
			assert.Equal(t, 50, tok.Vocab, "vocab")
		})
	}
}

func TestReadFixtures(t *testing.T) { readAll(t, "testdata") }

// TestFixturesRegenerate reruns gen.py (when python3 has pyarrow) and
// checks the fresh files read the same.
func TestFixturesRegenerate(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3")
	}
	if exec.Command(py, "-c", "import pyarrow").Run() != nil {
		t.Skip("pyarrow not importable")
	}
	dir := t.TempDir()
	out, err := exec.Command(py, "testdata/gen.py", dir).CombinedOutput()
	require.NoError(t, err, "gen.py: %s", out)
	readAll(t, dir)
}

func TestBadInput(t *testing.T) {
	cases := []struct {
		name       string
		read       func(string, string) (*Tokens, error)
		path, col  string
		wantSubstr []string
		wantCol    bool
	}{
		{"missing arrow", ReadArrow, "testdata/nope.arrow", "input_ids", []string{"testdata/nope.arrow", "no such file"}, false},
		{"missing parquet", ReadParquet, "testdata/nope.parquet", "input_ids", []string{"testdata/nope.parquet", "no such file"}, false},
		{"wrong type", ReadParquet, "testdata/badtype.parquet", "input_ids", []string{"testdata/badtype.parquet", `column "input_ids"`, "list of utf8"}, true},
		{"text column", ReadArrow, "testdata/tokens.arrow", "text", []string{"testdata/tokens.arrow", `column "text"`, "utf8"}, true},
		{"no column", ReadArrow, "testdata/tokens.arrow", "ids", []string{`column "ids"`, "no such column", "input_ids"}, true},
		{"not arrow", ReadArrow, "testdata/gen.py", "input_ids", []string{"testdata/gen.py", "not an Arrow IPC"}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := c.read(c.path, c.col)
			require.Error(t, err)
			for _, s := range c.wantSubstr {
				assert.ErrorContains(t, err, s)
			}
			var ce *ColumnError
			assert.Equal(t, c.wantCol, errors.As(err, &ce), "error %q: a *ColumnError", err)
		})
	}
}

func TestReadText(t *testing.T) {
	tok, err := ReadText("testdata/hello.txt")
	require.NoError(t, err)
	assert.Equal(t, 256, tok.Vocab, "vocab")
	if assert.Len(t, tok.IDs, 13) {
		assert.Equal(t, int32('h'), tok.IDs[0], "first id")
	}
	in, tg := tok.Window(1, 4)
	assert.Equal(t, "o, w", string(bytes(in)), "window 1 inputs")
	assert.Equal(t, ", wo", string(bytes(tg)), "window 1 targets")
	assert.Equal(t, 3, tok.NumWindows(4), "NumWindows(4)")
	_, err = ReadText("testdata/missing.txt")
	assert.ErrorContains(t, err, "missing.txt", "missing file")
}

func bytes(v []int32) []byte {
	b := make([]byte, len(v))
	for i, x := range v {
		b[i] = byte(x)
	}
	return b
}

func TestSampler(t *testing.T) {
	const n, world = 23, 3
	seen := map[int]int{}
	var ranks []*DistributedSampler
	for r := 0; r < world; r++ {
		s, err := NewDistributedSampler(n, r, world, 9, true)
		require.NoError(t, err)
		ranks = append(ranks, s)
		for _, i := range s.Next(s.PerRank()) {
			seen[i]++
		}
	}
	assert.Len(t, seen, world*(n/world), "epoch 0: distinct samples")
	for i, c := range seen {
		assert.Equal(t, 1, c, "sample %d: times seen", i)
	}
	// a new epoch reshuffles; the same seed and epoch give the same order
	a := ranks[0].Next(4)
	assert.Equal(t, Position{Epoch: 1, Index: 4, World: world}, ranks[0].Position(), "position")
	b, _ := NewDistributedSampler(n, 0, world, 9, true)
	require.NoError(t, b.SetPosition(Position{Epoch: 1}))
	assert.Equal(t, a, b.Next(4), "epoch 1 from a fresh sampler")
	// resume through JSON
	js, _ := ranks[0].MarshalPosition()
	assert.Equal(t, `{"epoch":1,"index":4,"world":3}`, string(js), "JSON")
	c, _ := NewDistributedSampler(n, 0, world, 9, true)
	require.NoError(t, c.UnmarshalPosition(js))
	got, want := c.Next(3), ranks[0].Next(3)
	assert.Equal(t, want, got, "resumed")
	for _, bad := range []struct{ n, r, w int }{{5, 3, 3}, {5, 0, 0}, {2, 0, 3}} {
		_, err := NewDistributedSampler(bad.n, bad.r, bad.w, 0, false)
		assert.Error(t, err, "NewDistributedSampler(%v) accepted", bad)
	}
}

// A position taken at one world size resumes at another without a sample
// repeated or skipped: the ranks together had handed out the epoch's first
// Index*World positions, whatever their number.
func TestSamplerResumeOtherWorld(t *testing.T) {
	const n, seed = 34, 5
	drawn := func(world, perRank int) (map[int]int, Position) {
		seen := map[int]int{}
		var pos Position
		for r := 0; r < world; r++ {
			s, err := NewDistributedSampler(n, r, world, seed, true)
			require.NoError(t, err)
			for _, i := range s.Next(perRank) {
				seen[i]++
			}
			pos = s.Position()
		}
		return seen, pos
	}
	for _, c := range []struct{ from, to, perRank int }{{2, 1, 4}, {1, 2, 4}, {2, 4, 4}, {4, 2, 3}, {2, 2, 5}} {
		seen, pos := drawn(c.from, c.perRank)
		rest := n/c.to - pos.Index*pos.World/c.to // what each new rank has left of the epoch
		for r := 0; r < c.to; r++ {
			s, err := NewDistributedSampler(n, r, c.to, seed, true)
			require.NoError(t, err)
			require.NoError(t, s.SetPosition(pos), "%+v", c)
			for _, i := range s.Next(rest) {
				seen[i]++
			}
			assert.Equal(t, 1, s.Position().Epoch-pos.Epoch+boolInt(s.Position().Index != 0), "%+v: still in the epoch", c)
		}
		for i, k := range seen {
			assert.Equal(t, 1, k, "%+v: sample %d seen %d times", c, i, k)
		}
		assert.Len(t, seen, c.to*(n/c.to), "%+v: the epoch covered once", c)
	}
	s, err := NewDistributedSampler(n, 0, 4, seed, true)
	require.NoError(t, err)
	assert.ErrorContains(t, s.SetPosition(Position{Epoch: 0, Index: 3, World: 2}), "cannot continue without repeating or skipping", "6 samples over 4 ranks")
	// the end of an epoch (Next moves on lazily) resumes at the next one
	require.NoError(t, s.SetPosition(Position{Epoch: 0, Index: n / 2, World: 2}))
	assert.Equal(t, Position{Epoch: 1, Index: 0, World: 4}, s.Position())
	assert.ErrorContains(t, s.SetPosition(Position{Epoch: -1}), "epoch -1: must be >= 0")
	assert.ErrorContains(t, s.UnmarshalPosition([]byte(`{"epok":3}`)), "unknown field")
	assert.Panics(t, func() { s.Next(-1) })
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestMarkovEntropy: the empirical cross-entropy of the true transition
// probabilities on a long sample matches EntropyRate.
func TestMarkovEntropy(t *testing.T) {
	for _, order := range []int{1, 2} {
		m, err := NewMarkov(16, order, 3, 4)
		require.NoError(t, err)
		h := m.EntropyRate()
		require.Greater(t, h, 0.0, "order %d: entropy rate outside (0, ln 3]", order)
		require.LessOrEqual(t, h, math.Log(3), "order %d: entropy rate outside (0, ln 3]", order)
		seq := m.Generate(400000, 1)
		nll := 0.0
		for i := 2; i < len(seq); i++ {
			c := m.ctx(seq[i-2], seq[i-1])
			k := slices.Index(m.next[c], seq[i])
			if k < 0 { // checked here: an assertion per token of 400000 is slow
				require.Failf(t, "impossible token", "token %d impossible after context %d", seq[i], c)
			}
			nll -= math.Log(m.probs[c][k])
		}
		emp := nll / float64(len(seq)-2)
		assert.InDelta(t, h, emp, 0.01, "order %d: empirical nats/token against EntropyRate", order)
	}
	_, err := NewMarkov(1, 3, 1, 0)
	assert.Error(t, err, "bad Markov accepted")
}

// A window past the stream's end panics like an index expression; it used
// to read zeros out of the slice's spare capacity.
func TestWindowOutOfRange(t *testing.T) {
	ids := make([]int32, 9, 64) // spare capacity, as an append leaves
	for i := range ids {
		ids[i] = int32(i + 1)
	}
	tk, err := newTokens(ids, 0)
	require.NoError(t, err)
	require.Equal(t, 2, tk.NumWindows(4))
	in, tg := tk.Window(1, 4)
	assert.Equal(t, []int32{5, 6, 7, 8}, in)
	assert.Equal(t, []int32{6, 7, 8, 9}, tg)
	assert.PanicsWithValue(t, "data.Tokens.Window(2, 4): window index out of range [0, 2) of a 9-token stream", func() { tk.Window(2, 4) })
	assert.Panics(t, func() { tk.MakeBatch([]int{0, 2}, 4) })
	assert.Panics(t, func() { tk.Window(-1, 4) })
}

// A file with no tokens is an error where it is read, not a sampler's
// "0 samples" later.
func TestNoTokens(t *testing.T) {
	_, err := tokensOrErr("x.parquet", "input_ids", nil)
	var ce *ColumnError
	require.ErrorAs(t, err, &ce)
	assert.ErrorContains(t, err, "no tokens")
}
