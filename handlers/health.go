package handlers

import (
	"net/http"

	"github.com/leasegate/leasegate/api"
)

// healthz answers 200 while the process runs.
func healthz(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, api.Health{Status: "ok"})
}

// readyz answers 200 when Redis answers, 503 otherwise.
func (h *lockHandlers) readyz(w http.ResponseWriter, r *http.Request) {
	if err := h.locker.Ping(r.Context()); err != nil {
		writeError(w, r, h.log, err)
		return
	}
	writeJSON(w, http.StatusOK, api.Health{Status: "ok"})
}

// spec serves the OpenAPI document the gateway implements.
func spec(doc []byte) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/yaml")
		_, _ = w.Write(doc)
	}
}
