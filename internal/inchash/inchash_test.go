package inchash

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestSum(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644))
	}
	_, err := Sum(dir)
	require.Error(t, err, "no headers")
	write("a.h", "int a;\n")
	write("b.h", "int b;\n")
	write("c.c", "ignored")
	s1, err := Sum(dir)
	require.NoError(t, err)
	write("c.c", "still ignored")
	s2, _ := Sum(dir)
	require.Equal(t, s1, s2, "only headers count")
	write("b.h", "int b2;\n")
	s3, _ := Sum(dir)
	require.NotEqual(t, s1, s3, "a header's edit changes the sum")
	// moving bytes from one header to the next is a change too
	write("a.h", "int a;\nint b2;\n")
	write("b.h", "")
	s4, _ := Sum(dir)
	require.NotEqual(t, s3, s4)
	require.Contains(t, string(Source("csrc", s4)), `const includeHash = "`+s4+`"`)
}
