package launch

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// check asserts a table row's outcome: an error containing wantErr when it
// is set, else no error and got == want.
func check[T any](t *testing.T, got T, err error, want T, wantErr string) {
	t.Helper()
	if wantErr != "" {
		require.Error(t, err)
		assert.Contains(t, err.Error(), wantErr)
		return
	}
	require.NoError(t, err)
	assert.Equal(t, want, got)
}
