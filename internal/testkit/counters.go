package testkit

import (
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Readers of what Redis and the gateway count.

// Atoi parses s (a Redis integer reply, say) as an int64, failing t if it is not one.
func Atoi(t *testing.T, s string) int64 {
	t.Helper()
	var v int64
	_, err := fmt.Sscan(s, &v)
	require.NoError(t, err, s)
	return v
}

// Scrape reads GET /metrics into series -> value, keyed as the text format writes them
// (`name{label="v",...}`, labels in name order).
func Scrape(t *testing.T, base string) map[string]float64 {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	out := map[string]float64{}
	for _, line := range strings.Split(string(body), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		require.NoError(t, err, line)
		out[line[:i]] = v
	}
	return out
}

// EvalCalls reads how often Redis ran each script command, from INFO commandstats.
func EvalCalls(t *testing.T, e *Env) map[string]int64 {
	t.Helper()
	calls := map[string]int64{"evalsha": 0, "eval": 0, "evalsha_ro": 0, "eval_ro": 0}
	for _, line := range strings.Split(e.Redis.MustDo(t, "INFO", "commandstats"), "\n") {
		name, stats, ok := strings.Cut(strings.TrimSpace(line), ":")
		cmd, isStat := strings.CutPrefix(name, "cmdstat_")
		if _, counted := calls[cmd]; !ok || !isStat || !counted {
			continue
		}
		for _, kv := range strings.Split(stats, ",") {
			if n, found := strings.CutPrefix(kv, "calls="); found {
				v, err := strconv.ParseInt(n, 10, 64)
				require.NoError(t, err, line)
				calls[cmd] = v
			}
		}
	}
	return calls
}
