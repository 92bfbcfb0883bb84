package ui_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leasegate/leasegate/api"
	"github.com/leasegate/leasegate/handlers/ui"
)

func TestHandlerServesThePageAndItsAssets(t *testing.T) {
	h := ui.Handler()
	for _, tc := range []struct {
		path, contentType, contains string
	}{
		{"/ui", "text/html; charset=utf-8", `<form id="auth" hidden>`},
		{"/ui/", "text/html; charset=utf-8", `<script src="/ui/app.js" defer></script>`},
		{"/ui/app.js", "text/javascript; charset=utf-8", `"use strict";`},
		{"/ui/style.css", "text/css; charset=utf-8", `tr.long-hold`},
		{"/ui/index.html", "text/html; charset=utf-8", `<table id="semaphores">`},
	} {
		t.Run(tc.path, func(t *testing.T) {
			w := httptest.NewRecorder()
			h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, tc.path, nil))
			require.Equal(t, http.StatusOK, w.Code)
			assert.Equal(t, tc.contentType, w.Header().Get("Content-Type"))
			assert.Contains(t, w.Body.String(), tc.contains)
			assert.Contains(t, w.Header().Get("Content-Security-Policy"), "script-src 'self'")
			assert.Equal(t, "nosniff", w.Header().Get("X-Content-Type-Options"))

			again := httptest.NewRequest(http.MethodGet, tc.path, nil)
			again.Header.Set("If-None-Match", w.Header().Get("ETag"))
			w = httptest.NewRecorder()
			h.ServeHTTP(w, again)
			assert.Equal(t, http.StatusNotModified, w.Code, "a cached copy is revalidated by its ETag")
		})
	}
}

func TestHandlerAnswersProblems(t *testing.T) {
	h := ui.Handler()
	for _, tc := range []struct {
		method, path string
		status       int
		typ          string
	}{
		{http.MethodGet, "/ui/nope.js", http.StatusNotFound, api.TypeNotFound},
		{http.MethodGet, "/ui/static/app.js", http.StatusNotFound, api.TypeNotFound},
		{http.MethodPost, "/ui", http.StatusMethodNotAllowed, api.TypeMethodNotAllowed},
	} {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			w := httptest.NewRecorder()
			w.Header().Set("X-Request-Id", "req-1") // as the gateway's middleware does
			h.ServeHTTP(w, httptest.NewRequest(tc.method, tc.path, strings.NewReader("")))
			require.Equal(t, tc.status, w.Code)
			assert.Equal(t, api.ContentTypeProblem, w.Header().Get("Content-Type"))
			var p api.Problem
			require.NoError(t, json.Unmarshal(w.Body.Bytes(), &p))
			assert.Equal(t, tc.typ, p.Type)
			assert.Equal(t, tc.status, p.Status)
			assert.Equal(t, "req-1", p.RequestID)
		})
	}
}
