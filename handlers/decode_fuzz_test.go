package handlers

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"testing"

	"github.com/leasegate/leasegate/api"
)

// FuzzDecodeAcquireBody feeds an acquire body through decodeBody: it never panics, answers every
// refusal with a 4xx problem, and what it accepts is one JSON object whose field names are exactly
// the wire type's, each once and written without escapes.
func FuzzDecodeAcquireBody(f *testing.F) {
	for _, seed := range []string{
		`{"owner":"w1","ttl_ms":30000}`, `{"owner":"w1","ttl_ms":30000,"wait_ms":5000,"watchdog":true,"max_hold_ms":60000}`,
		`{"OWNER":"w1"}`, `{"owner":"w1","owner":"w2"}`, `{"owner":"w1"} {}`, `{"owner":"w1"}x`, `[]`, `null`, ``, `{`,
		`{"owner":"w1","colour":1}`, `{"owner":5}`, `{"owner":"w1","ttl_ms":1e3}`, "{\"owner\":\"w\xff\"}",
		`{"owner":"w1","mode":"shared"}`, `{"own\u0065r":"w1"}`, `{"owner":"w1","queue_ticket":"x"}`, ` {"owner":"w1"} `,
	} {
		f.Add([]byte(seed))
	}
	fields := jsonFields(reflect.TypeFor[*api.AcquireRequest]())
	f.Fuzz(func(t *testing.T, body []byte) {
		var req api.AcquireRequest
		r := httptest.NewRequest(http.MethodPost, "/locks/x", bytes.NewReader(body))
		err := decodeBody(httptest.NewRecorder(), r, &req, false)
		if err != nil {
			re, ok := err.(*requestError)
			if !ok || re.status < 400 || re.status >= 500 || re.typ == "" {
				t.Fatalf("refusal %v is not a 4xx problem", err)
			}
			return
		}
		var top map[string]json.RawMessage
		dec := json.NewDecoder(bytes.NewReader(body))
		if err := dec.Decode(&top); err != nil {
			t.Fatalf("accepted %q, which is not one JSON object: %v", body, err)
		}
		seen := map[string]int{}
		keys := json.NewDecoder(bytes.NewReader(body))
		_, _ = keys.Token()
		for keys.More() {
			start := keys.InputOffset()
			tok, _ := keys.Token()
			name, _ := tok.(string)
			if bytes.IndexByte(body[start:keys.InputOffset()], '\\') >= 0 {
				t.Fatalf("accepted %q: field %q is written with an escape", body, name)
			}
			seen[name]++
			if !slices.Contains(fields, name) || seen[name] > 1 {
				t.Fatalf("accepted %q: field %q is not exactly one of %v, once", body, name, fields)
			}
			var skip json.RawMessage
			_ = keys.Decode(&skip)
		}
	})
}
