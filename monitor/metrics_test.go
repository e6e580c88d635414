package monitor

import (
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// scrape reads /metrics and returns the value of the sample named name.
func scrape(t *testing.T, addr, name string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + ` (\S+)$`).FindStringSubmatch(string(b))
	require.NotNil(t, m, "%s not in\n%s", name, b)
	v, err := strconv.ParseFloat(m[1], 64)
	require.NoError(t, err)
	return v
}

// A host-less address binds the loopback; the step counter and gauges follow
// the events.
func TestServeMetrics(t *testing.T) {
	s, err := ServeMetrics(":0")
	require.NoError(t, err)
	defer s.Close()
	assert.True(t, strings.HasPrefix(s.Addr(), "127.0.0.1:"), s.Addr())
	require.NoError(t, s.WriteEvents(3, []Event{{Tag: TagLoss, Value: 2.5}, {Tag: TagMemoryHost, Value: 4096, Int: true}}))
	assert.Equal(t, 3.0, scrape(t, s.Addr(), "deepgo_step"))
	assert.Equal(t, 2.5, scrape(t, s.Addr(), "deepgo_loss"))
	assert.Equal(t, 4096.0, scrape(t, s.Addr(), `deepgo_memory_bytes{kind="host"}`))
	require.NoError(t, s.WriteEvents(7, nil))
	assert.Equal(t, 7.0, scrape(t, s.Addr(), "deepgo_step"))
	require.NoError(t, s.Close())
	require.NoError(t, s.Close(), "a second Close")

	_, err = ServeMetrics("9090")
	assert.ErrorContains(t, err, `metrics address "9090"`)
}
