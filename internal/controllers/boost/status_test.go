package boost

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseStatusRefusesHostileBodies(t *testing.T) {
	good := `{"format":1,"now":1000,"step":12,"committed_step":10,"committed_at":990,"save_seconds":0.5}`
	s, err := ParseStatus([]byte(good))
	require.NoError(t, err)
	secs, steps, ok := s.Since()
	assert.True(t, ok)
	assert.InDelta(t, 10, secs, 0)
	assert.Equal(t, int64(2), steps)

	_, err = ParseStatus([]byte(`{"format":1,"now":1000,"step":0,"committed_step":null,"committed_at":null,"save_seconds":null}`))
	require.NoError(t, err, "nothing committed yet")

	for name, body := range map[string]string{
		"unknown field":           `{"format":1,"now":1000,"step":1,"x":1}`,
		"trailing data":           good + `{}`,
		"format":                  strings.Replace(good, `"format":1`, `"format":2`, 1),
		"negative step":           strings.Replace(good, `"step":12`, `"step":-1`, 1),
		"huge step":               strings.Replace(good, `"step":12`, `"step":9007199254740993`, 1),
		"commit in the future":    strings.Replace(good, `"committed_at":990`, `"committed_at":2000`, 1),
		"commit without its time": `{"format":1,"now":1000,"step":1,"committed_step":1}`,
		"negative save":           strings.Replace(good, `"save_seconds":0.5`, `"save_seconds":-1`, 1),
		"a save of years":         strings.Replace(good, `"save_seconds":0.5`, `"save_seconds":1e12`, 1),
		"not JSON":                `trainguard`,
		"too long":                `{"format":1,"now":1000,"step":1}` + strings.Repeat(" ", 2000),
		"no now":                  `{"format":1,"step":1}`,
	} {
		_, err := ParseStatus([]byte(body))
		assert.Error(t, err, name)
	}
}

func TestHTTPFetcherDialsOnlyAnIP(t *testing.T) {
	_, err := HTTPFetcher()(context.Background(), "example.com")
	require.ErrorContains(t, err, "not an IP", "a name is never dialled")
}
