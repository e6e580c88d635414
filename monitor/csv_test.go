package monitor

import (
	"encoding/csv"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The csv layout is DeepSpeed's: file from the tag, header "step,<last
// part>", one "step,value" row per event, CRLF; a second writer appends
// with its own header, as DeepSpeed's 'a+' does.
func TestCSVLayout(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "out", "job")
	w, err := NewCSVWriter(dir)
	require.NoError(t, err)
	require.NoError(t, w.WriteEvents(1, []Event{{Tag: TagLoss, Value: 2.5, Step: 1}, {Tag: TagSkippedSteps, Value: 0, Int: true, Step: 1}}))
	require.NoError(t, w.WriteEvents(2, []Event{{Tag: TagLoss, Value: 2, Step: 2}, {Tag: TagSkippedSteps, Value: 1, Int: true, Step: 2}}))
	require.NoError(t, w.Close())

	assert.Equal(t, "Train_Samples_train_loss.csv", CSVFileName(TagLoss))
	assert.Equal(t, "a_b_c.csv", CSVFileName("a/b c"))
	b, err := os.ReadFile(filepath.Join(dir, "Train_Samples_train_loss.csv"))
	require.NoError(t, err)
	assert.Equal(t, "step,train_loss\r\n1,2.5\r\n2,2.0\r\n", string(b))
	b, err = os.ReadFile(filepath.Join(dir, "Train_deepgo_skipped_steps.csv"))
	require.NoError(t, err)
	assert.Equal(t, "step,skipped_steps\r\n1,0\r\n2,1\r\n", string(b))

	w2, err := NewCSVWriter(dir)
	require.NoError(t, err)
	require.NoError(t, w2.WriteEvents(3, []Event{{Tag: TagLoss, Value: 1.75, Step: 3}}))
	require.NoError(t, w2.Close())
	rows, err := csv.NewReader(strings.NewReader(string(must(os.ReadFile(filepath.Join(dir, "Train_Samples_train_loss.csv")))))).ReadAll()
	require.NoError(t, err)
	assert.Equal(t, [][]string{{"step", "train_loss"}, {"1", "2.5"}, {"2", "2.0"}, {"step", "train_loss"}, {"3", "1.75"}}, rows)
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
