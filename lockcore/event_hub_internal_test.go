package lockcore

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestParseEventMsg(t *testing.T) {
	at := time.UnixMilli(1795455143954)
	for _, c := range []struct {
		name string
		raw  string
		want *eventMsg
	}{
		{"waiters", "v p:{x} 17954 3 w 2 1795455143954",
			&eventMsg{key: "p:{x}", epoch: "17954", seq: 3, typ: "w", waiters: 2, at: at}},
		{"a hand-off, an owner with spaces", "v p:{x}:sem 1 12 h 0 1795455143954\n1795455143954348 s 750 billing worker 7",
			&eventMsg{key: "p:{x}:sem", epoch: "1", seq: 12, typ: "h", at: at,
				holds: []msgHold{{fence: 1795455143954348, mode: Shared, ttl: 750 * time.Millisecond, owner: "billing worker 7"}}}},
		{"forced, two holds", "v k 1 4 f 0 1795455143954\n5 x 0 a\n6 s 0 b",
			&eventMsg{key: "k", epoch: "1", seq: 4, typ: "f", at: at,
				holds: []msgHold{{fence: 5, mode: Exclusive, owner: "a"}, {fence: 6, mode: Shared, owner: "b"}}}},
		{"an empty owner", "v k 1 4 r 0 1795455143954\n5 x 0 ", &eventMsg{key: "k", epoch: "1", seq: 4, typ: "r", at: at,
			holds: []msgHold{{fence: 5, mode: Exclusive}}}},
		{"a TTL set anew", "v k 1 5 t 0 1795455143954\n5 x 500 a", &eventMsg{key: "k", epoch: "1", seq: 5, typ: "t", at: at,
			holds: []msgHold{{fence: 5, mode: Exclusive, ttl: 500 * time.Millisecond, owner: "a"}}}},
		{"unknown type", "v k 1 4 z 0 1795455143954", nil},
		{"two-letter type", "v k 1 4 gh 0 1795455143954", nil},
		{"a grant message", "g lease 17", nil},
		{"short header", "v k 1 4 g 0", nil},
		{"bad seq", "v k 1 x g 0 1795455143954", nil},
		{"bad mode", "v k 1 4 g 0 1795455143954\n5 q 0 a", nil},
		{"short hold", "v k 1 4 g 0 1795455143954\n5 x", nil},
	} {
		got, ok := parseEventMsg(c.raw)
		assert.Equal(t, c.want != nil, ok, c.name)
		if c.want != nil {
			assert.Equal(t, c.want, got, c.name)
		}
	}
}
