package data

import (
	"errors"
	"math"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
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
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(tok.IDs, want) {
				t.Errorf("tokens %v, want %v", tok.IDs, want)
			}
			if tok.Vocab != 50 {
				t.Errorf("vocab %d, want 50", tok.Vocab)
			}
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
	if out, err := exec.Command(py, "testdata/gen.py", dir).CombinedOutput(); err != nil {
		t.Fatalf("gen.py: %v\n%s", err, out)
	}
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
			if err == nil {
				t.Fatal("no error")
			}
			for _, s := range c.wantSubstr {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q lacks %q", err, s)
				}
			}
			var ce *ColumnError
			if errors.As(err, &ce) != c.wantCol {
				t.Errorf("ColumnError: %v, want %v", errors.As(err, &ce), c.wantCol)
			}
		})
	}
}

func TestReadText(t *testing.T) {
	tok, err := ReadText("testdata/hello.txt")
	if err != nil {
		t.Fatal(err)
	}
	if tok.Vocab != 256 || len(tok.IDs) != 13 || tok.IDs[0] != 'h' {
		t.Errorf("got %+v", tok)
	}
	in, tg := tok.Window(1, 4)
	if string(bytes(in)) != "o, w" || string(bytes(tg)) != ", wo" {
		t.Errorf("window 1: %q -> %q", bytes(in), bytes(tg))
	}
	if n := tok.NumWindows(4); n != 3 {
		t.Errorf("NumWindows(4) = %d, want 3", n)
	}
	if _, err := ReadText("testdata/missing.txt"); err == nil || !strings.Contains(err.Error(), "missing.txt") {
		t.Errorf("missing file: %v", err)
	}
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
		if err != nil {
			t.Fatal(err)
		}
		ranks = append(ranks, s)
		for _, i := range s.Next(s.PerRank()) {
			seen[i]++
		}
	}
	if len(seen) != world*(n/world) {
		t.Errorf("epoch 0 covers %d distinct samples, want %d", len(seen), world*(n/world))
	}
	for i, c := range seen {
		if c != 1 {
			t.Errorf("sample %d seen %d times", i, c)
		}
	}
	// a new epoch reshuffles; the same seed and epoch give the same order
	a := ranks[0].Next(4)
	if p := ranks[0].Position(); p != (Position{Epoch: 1, Index: 4}) {
		t.Errorf("position %+v", p)
	}
	b, _ := NewDistributedSampler(n, 0, world, 9, true)
	if err := b.SetPosition(Position{Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	if got := b.Next(4); !slices.Equal(got, a) {
		t.Errorf("epoch 1 from a fresh sampler %v, want %v", got, a)
	}
	// resume through JSON
	js, _ := ranks[0].MarshalPosition()
	if string(js) != `{"epoch":1,"index":4}` {
		t.Errorf("JSON %s", js)
	}
	c, _ := NewDistributedSampler(n, 0, world, 9, true)
	if err := c.UnmarshalPosition(js); err != nil {
		t.Fatal(err)
	}
	if got, want := c.Next(3), ranks[0].Next(3); !slices.Equal(got, want) {
		t.Errorf("resumed %v, want %v", got, want)
	}
	for _, bad := range []struct{ n, r, w int }{{5, 3, 3}, {5, 0, 0}, {2, 0, 3}} {
		if _, err := NewDistributedSampler(bad.n, bad.r, bad.w, 0, false); err == nil {
			t.Errorf("NewDistributedSampler(%v) accepted", bad)
		}
	}
}

// TestMarkovEntropy: the empirical cross-entropy of the true transition
// probabilities on a long sample matches EntropyRate.
func TestMarkovEntropy(t *testing.T) {
	for _, order := range []int{1, 2} {
		m, err := NewMarkov(16, order, 3, 4)
		if err != nil {
			t.Fatal(err)
		}
		h := m.EntropyRate()
		if h <= 0 || h > math.Log(3) {
			t.Fatalf("order %d: entropy rate %v outside (0, ln 3]", order, h)
		}
		seq := m.Generate(400000, 1)
		nll := 0.0
		for i := 2; i < len(seq); i++ {
			c := m.ctx(seq[i-2], seq[i-1])
			k := slices.Index(m.next[c], seq[i])
			if k < 0 {
				t.Fatalf("token %d impossible after context %d", seq[i], c)
			}
			nll -= math.Log(m.probs[c][k])
		}
		emp := nll / float64(len(seq)-2)
		if math.Abs(emp-h) > 0.01 {
			t.Errorf("order %d: empirical %.4f nats/token, EntropyRate %.4f", order, emp, h)
		}
	}
	if _, err := NewMarkov(1, 3, 1, 0); err == nil {
		t.Error("bad Markov accepted")
	}
}
