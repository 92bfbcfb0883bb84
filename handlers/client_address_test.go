package handlers

import (
	"net/http/httptest"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestClientAddressBehindTrustedProxies(t *testing.T) {
	tp, err := ParseTrustedProxies("127.0.0.1/32, 10.0.0.0/8,fd00::1")
	require.NoError(t, err)
	cases := []struct {
		name, peer, xff, forwarded, want string
	}{
		{"no proxy in the way", "192.0.2.1:4000", "203.0.113.9", "", "192.0.2.1"},
		{"a trusted proxy's client", "127.0.0.1:4000", "203.0.113.9", "", "203.0.113.9"},
		{"the nearest untrusted hop wins", "127.0.0.1:4000", "198.51.100.1, 203.0.113.9, 10.1.2.3", "", "203.0.113.9"},
		{"a trusted peer that forwards nobody", "127.0.0.1:4000", "", "", "127.0.0.1"},
		{"Forwarded when there is no X-Forwarded-For", "127.0.0.1:4000", "", `for="[2001:db8::5]:4711";proto=https, for=10.0.0.2`, "2001:db8::5"},
		{"a hop that is no address stops the walk", "127.0.0.1:4000", "203.0.113.9, garbage", "", "127.0.0.1"},
		{"all hops trusted", "[fd00::1]:4000", "10.0.0.7", "", "10.0.0.7"},
		{"an IPv4-mapped peer", "[::ffff:127.0.0.1]:4000", "203.0.113.9", "", "203.0.113.9"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", "/", nil)
			r.RemoteAddr = c.peer
			if c.xff != "" {
				r.Header.Set("X-Forwarded-For", c.xff)
			}
			if c.forwarded != "" {
				r.Header.Set("Forwarded", c.forwarded)
			}
			got, ok := tp.client(r)
			require.True(t, ok)
			assert.Equal(t, c.want, got.String())
		})
	}
	_, err = ParseTrustedProxies("10.0.0.0/8, proxy.example")
	assert.ErrorContains(t, err, `"proxy.example"`)
}

func TestThrottleKeyCountsAnIPv6AddressByItsSlash64(t *testing.T) {
	assert.Equal(t, "203.0.113.9", throttleKey(netip.MustParseAddr("203.0.113.9")))
	assert.Equal(t, "2001:db8:1:2::/64", throttleKey(netip.MustParseAddr("2001:db8:1:2:aaaa::1")))
	assert.Equal(t, throttleKey(netip.MustParseAddr("2001:db8:1:2::1")), throttleKey(netip.MustParseAddr("2001:db8:1:2:ffff::9")))
}
