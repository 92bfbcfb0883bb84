package handlers

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"

	"github.com/go-chi/chi/v5"

	"github.com/leasegate/leasegate/api"
)

// lockName returns the validated {name} path parameter. chi matches the raw path, so the
// parameter is unescaped first: /locks/orders%3A42 names the lock "orders:42".
func lockName(r *http.Request) (string, error) {
	name, err := url.PathUnescape(chi.URLParam(r, "name"))
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
// maxBodyBytes. An empty body leaves v as it is when optional is true.
func decodeBody(w http.ResponseWriter, r *http.Request, v any, optional bool) error {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if errors.Is(err, io.EOF) {
		if optional {
			return nil
		}
		return invalidRequest("request body must be a JSON object", nil)
	}
	if err == nil {
		if _, extra := dec.Token(); extra != io.EOF {
			err = errors.New("unexpected data after the JSON object")
		}
	}
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		return &requestError{http.StatusRequestEntityTooLarge, api.TypeBodyTooLarge, "Body too large",
			fmt.Sprintf("request body exceeds %d bytes", maxBodyBytes), nil}
	}
	if err != nil {
		return describeJSONError(err)
	}
	return nil
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

// writeJSON answers v as JSON with a newline.
func writeJSON(w http.ResponseWriter, status int, v any) {
	body := bodies.Get().(*bytes.Buffer)
	defer bodies.Put(body)
	body.Reset()
	if err := json.NewEncoder(body).Encode(v); err != nil {
		panic(err) // the wire types always marshal; the recoverer answers 500
	}
	// A Content-Length lets a handler flush the answer whole (see acquire), without chunking.
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(body.Len()))
	w.WriteHeader(status)
	_, _ = w.Write(body.Bytes())
}
