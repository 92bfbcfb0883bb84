package handlers

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"sync"

	"github.com/go-chi/chi/v5"

	"github.com/leasegate/leasegate/api"
)

// lockName returns the validated {name} path parameter, percent-decoded exactly once, as a proxy
// that decodes the path once reads it. chi routes on the raw path when net/url kept one (the path
// has escapes it would not have written, such as %3A): the parameter is then still escaped, and
// /locks/orders%3A42 names the lock "orders:42". Otherwise chi routes on the decoded path and the
// parameter is taken as it is: /locks/%2562.dbl names "%62.dbl" (refused: '%' is no name
// character), never "b.dbl".
func lockName(r *http.Request) (string, error) {
	name, err := chi.URLParam(r, "name"), error(nil)
	if r.URL.RawPath != "" {
		name, err = url.PathUnescape(name)
	}
	if err == nil {
		err = api.ValidateLockName(name)
	}
	if err != nil {
		return "", &requestError{http.StatusBadRequest, api.TypeInvalidLockName, "Invalid lock name", err.Error(),
			[]api.InvalidParam{{Name: "name", Reason: err.Error()}}}
	}
	return name, nil
}

// validating is a request body that validates itself against the limits into a T.
type validating[T any] interface {
	Validate(api.Limits) (T, []api.InvalidParam)
}

// readBody decodes r's JSON body (see decodeBody) into a B and validates it: the validated value,
// or the problem to answer (400 with every invalid field).
func readBody[T any, B validating[T]](w http.ResponseWriter, r *http.Request, limits api.Limits, optional bool) (T, error) {
	var body B
	if err := decodeBody(w, r, &body, optional); err != nil {
		var zero T
		return zero, err
	}
	v, bad := body.Validate(limits)
	if bad != nil {
		return v, invalidRequest("request body has invalid fields", bad)
	}
	return v, nil
}

// decodeBody reads r's JSON body into v strictly: one object, no unknown fields, at most
// maxBodyBytes. An empty body leaves v as it is when optional is true. Field names must match
// exactly, be written without escapes and appear once: encoding/json would take "TTL_MS" and
// "ttl\u005fms" for "ttl_ms" and keep the last of two, so a proxy or WAF rule on a field could be
// bypassed (see checkFieldNames).
func decodeBody(w http.ResponseWriter, r *http.Request, v any, optional bool) error {
	buf := bodies.Get().(*bytes.Buffer)
	defer bodies.Put(buf)
	buf.Reset()
	_, err := buf.ReadFrom(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		return &requestError{http.StatusRequestEntityTooLarge, api.TypeBodyTooLarge, "Body too large",
			fmt.Sprintf("request body exceeds %d bytes", maxBodyBytes), nil}
	}
	if err != nil {
		return invalidRequest("request body could not be read: "+err.Error(), nil)
	}
	// Read to its end: closed now, net/http has nothing left to discard before the answer.
	_ = r.Body.Close()
	data := buf.Bytes()
	if len(bytes.TrimSpace(data)) == 0 {
		if optional {
			return nil
		}
		return invalidRequest("request body must be a JSON object", nil)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	err = dec.Decode(v)
	if err == nil {
		if _, extra := dec.Token(); extra != io.EOF {
			err = errors.New("unexpected data after the JSON object")
		}
	}
	if err != nil {
		return describeJSONError(err)
	}
	return checkFieldNames(data, jsonFields(reflect.TypeOf(v)))
}

// checkFieldNames checks the names of the top-level object in data, which the decoder has just
// accepted as one valid JSON object, against fields (the wire type's JSON names): each must match
// one exactly (encoding/json matches up to case), be written without escapes ("ttl\u005fms" is
// ttl_ms to the decoder, not to a proxy rule) and appear once (the decoder keeps the last). Since
// the JSON is known valid, a name is simply a string at depth 1 followed by ':'. A byte scan
// rather than the decoder's token stream: that cost 1.4-2 µs and 30 allocations per body, this
// none (go test ./handlers -bench CheckFieldNames). FuzzDecodeAcquireBody checks it against the
// decoder.
func checkFieldNames(data []byte, fields []string) error {
	var seen uint64 // bit i: fields[i] appeared (request types have fewer than 64 fields)
	depth := 0
	for i := 0; i < len(data); i++ {
		switch data[i] {
		case '{', '[':
			depth++
		case '}', ']':
			depth--
		case '"':
			start, escaped := i+1, false
			for i++; data[i] != '"'; i++ {
				if data[i] == '\\' {
					escaped = true
					i++
				}
			}
			j := i + 1
			for j < len(data) && (data[j] == ' ' || data[j] == '\t' || data[j] == '\n' || data[j] == '\r') {
				j++
			}
			if depth != 1 || j == len(data) || data[j] != ':' {
				continue // a value, not a name
			}
			if err := checkFieldName(data[start-1:i+1], escaped, fields, &seen); err != nil {
				return err
			}
		}
	}
	return nil
}

// checkFieldName checks one name, quoted as written.
func checkFieldName(quoted []byte, escaped bool, fields []string, seen *uint64) error {
	raw := quoted[1 : len(quoted)-1]
	if escaped {
		var name string
		_ = json.Unmarshal(quoted, &name)
		reason := "field names must be written plainly, without escapes"
		return invalidRequest("request body is not valid: "+reason, []api.InvalidParam{{Name: name, Reason: reason}})
	}
	for k, f := range fields {
		if string(raw) == f {
			if *seen&(1<<k) != 0 {
				return invalidRequest("request body is not valid: field "+strconv.Quote(f)+" appears twice",
					[]api.InvalidParam{{Name: f, Reason: "appears more than once"}})
			}
			*seen |= 1 << k
			return nil
		}
	}
	for _, f := range fields {
		if strings.EqualFold(string(raw), f) {
			reason := fmt.Sprintf("field names are case-sensitive: %q, not %q", f, raw)
			return invalidRequest("request body is not valid: "+reason, []api.InvalidParam{{Name: string(raw), Reason: reason}})
		}
	}
	return nil // unknown names are the decoder's to refuse (DisallowUnknownFields)
}

// fieldNames caches jsonFields per type.
var fieldNames sync.Map // reflect.Type -> []string

// jsonFields returns the JSON names of the fields of the struct t points to.
func jsonFields(t reflect.Type) []string {
	if names, ok := fieldNames.Load(t); ok {
		return names.([]string)
	}
	var names []string
	if t.Kind() == reflect.Pointer && t.Elem().Kind() == reflect.Struct {
		for f := range t.Elem().Fields() {
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name != "" && name != "-" {
				names = append(names, name)
			}
		}
	}
	fieldNames.Store(t, names)
	return names
}

// describeJSONError turns a decoding error into a 400, naming the field where it can.
func describeJSONError(err error) error {
	var typeErr *json.UnmarshalTypeError
	if errors.As(err, &typeErr) {
		reason := fmt.Sprintf("must be of type %s", jsonType(typeErr.Type.String()))
		return invalidRequest("request body is not valid: field "+strconv.Quote(typeErr.Field)+" "+reason,
			[]api.InvalidParam{{Name: typeErr.Field, Reason: reason}})
	}
	if field, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		field, _ = strconv.Unquote(field)
		return invalidRequest("request body is not valid: unknown field "+strconv.Quote(field),
			[]api.InvalidParam{{Name: field, Reason: "unknown field"}})
	}
	return invalidRequest("request body is not valid JSON: "+err.Error(), nil)
}

// jsonType names a Go field type as JSON calls it.
func jsonType(goType string) string {
	switch strings.TrimPrefix(goType, "*") {
	case "int64":
		return "integer"
	case "bool":
		return "boolean"
	case "string":
		return "string"
	}
	return "object"
}

// bodies pools the buffers answers are encoded into.
var bodies = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// jsonContentType is the Content-Type of every JSON answer: one slice shared by all of them, which
// net/http only reads (a Header.Add would append to a copy, the slice being full).
var jsonContentType = []string{"application/json"}

// writeJSON answers v as JSON with a newline.
func writeJSON(w http.ResponseWriter, status int, v any) {
	body := bodies.Get().(*bytes.Buffer)
	defer bodies.Put(body)
	body.Reset()
	if err := json.NewEncoder(body).Encode(v); err != nil {
		panic(err) // the wire types always marshal; the recoverer answers 500
	}
	// A Content-Length lets a handler flush the answer whole (see acquire), without chunking. The
	// header map is written directly, under canonical names: Set would allocate the content type's
	// slice anew for every answer.
	h := w.Header()
	h["Content-Type"] = jsonContentType
	h["Content-Length"] = []string{strconv.Itoa(body.Len())}
	w.WriteHeader(status)
	_, _ = w.Write(body.Bytes())
}
