package cli

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestShort(t *testing.T) {
	for _, c := range []struct {
		d    time.Duration
		want string
	}{
		{0, "0.0s"},
		{420 * time.Millisecond, "0.4s"},
		{9949 * time.Millisecond, "9.9s"},
		{12400 * time.Millisecond, "12s"},
		{59600 * time.Millisecond, "60s"},
		{time.Minute, "1m"},
		{3*time.Minute + 12*time.Second, "3m12s"},
		{2 * time.Hour, "2h"},
		{2*time.Hour + 5*time.Minute + 20*time.Second, "2h5m"},
	} {
		assert.Equal(t, c.want, short(c.d), "%v", c.d)
	}
}
