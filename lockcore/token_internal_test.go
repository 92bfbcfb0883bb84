package lockcore

import (
	"encoding/json"
	"testing"
)

// FuzzPayload: appendPayload writes what json.Marshal writes for a version 1 payload, and a payload
// readPayload reads is one json.Unmarshal reads the same lease from.
func FuzzPayload(f *testing.F) {
	f.Add("orders.42", "billing-worker-7", "3f2b8c1e-5d4a-4e6f-9a7b-1c2d3e4f5a6b", int64(17), "")
	f.Add("a", `"quoted" <b>&\`, "x", int64(1), "billing")
	f.Add("a", "Jürgen 😀", "x", int64(-3), "p\",\"fence\":1")
	f.Add("a", "\xff\x00", "", int64(0), "\u2028")
	f.Fuzz(func(t *testing.T, lock, owner, id string, fence int64, principal string) {
		l := Lease{Lock: lock, Owner: owner, ID: id, Fence: fence, Principal: principal}
		want, err := json.Marshal(tokenPayload{V: 1, Lease: l})
		if err != nil {
			t.Fatal(err)
		}
		if got := appendPayload(nil, l); string(got) != string(want) {
			t.Fatalf("appendPayload(%+v) = %s, json.Marshal writes %s", l, got, want)
		}
		for _, raw := range [][]byte{want, []byte(lock), []byte(owner + id + principal)} {
			read, ok := readPayload(raw)
			if !ok {
				continue
			}
			var tp tokenPayload
			if err := json.Unmarshal(raw, &tp); err != nil || tp.V != 1 || tp.Lease != read {
				t.Fatalf("readPayload(%s) = %+v; json.Unmarshal reads %+v (v %d, %v)", raw, read, tp.Lease, tp.V, err)
			}
		}
	})
}
