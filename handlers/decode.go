package handlers

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/leasegate/leasegate/api"
)

// lockName returns the validated {name} path parameter.
func lockName(r *http.Request) (string, error) {
	name := chi.URLParam(r, "name")
	if err := api.ValidateLockName(name); err != nil {
		return "", &requestError{http.StatusBadRequest, api.TypeInvalidLockName, "Invalid lock name", err.Error(),
			[]api.InvalidParam{{Name: "name", Reason: err.Error()}}}
	}
	return name, nil
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
		return invalidRequest("request body is not valid: "+describeJSONError(err), nil)
	}
	return nil
}

// describeJSONError phrases a decoding error for a client, naming the field where it can.
func describeJSONError(err error) string {
	var typeErr *json.UnmarshalTypeError
	if errors.As(err, &typeErr) {
		return fmt.Sprintf("field %q must be of type %s", typeErr.Field, typeErr.Type)
	}
	return err.Error()
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
