// Package ui serves the gateway's dashboard at /ui: one page of plain HTML, CSS and JavaScript,
// embedded in the binary, that reads the admin API (GET /locks, GET /semaphores, GET /elections,
// GET /admin/top), follows a few events streams (GET /locks/{name}/events,
// GET /semaphores/{name}/events, GET /elections/{name}/events) and force-releases on request
// (DELETE …?force=true). It needs nothing outside the gateway: no CDN, no
// framework.
//
// The files carry no data, not even the gateway's settings: everything the page shows comes from
// the API calls it makes, with the API key it asks for when the gateway authenticates. So the
// files are served to anyone, and the calls are authorized as any other.
package ui

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"encoding/json"
	"io/fs"
	"net/http"
	"strings"
	"time"

	"github.com/leasegate/leasegate/api"
)

//go:embed static
var static embed.FS

// Prefix is the path the dashboard is served under: the page at /ui (and /ui/), its assets at
// /ui/app.js and /ui/style.css.
const Prefix = "/ui"

// securityHeaders keep the page to its own scripts and styles and out of other sites' frames (the
// force-release button must not be clickjacked).
var securityHeaders = map[string]string{
	"Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; " +
		"img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
	"X-Content-Type-Options": "nosniff",
	"Referrer-Policy":        "no-referrer",
	"Cache-Control":          "no-cache",
}

// asset is one embedded file, ready to serve.
type asset struct {
	name string // for ServeContent's Content-Type by extension
	body []byte
	etag string
}

func newAsset(name string, body []byte) asset {
	sum := sha256.Sum256(body)
	return asset{name: name, body: body, etag: `"` + hex.EncodeToString(sum[:8]) + `"`}
}

// Handler returns the dashboard's handler for GET (and HEAD) /ui, /ui/ and /ui/{asset}; mount it on
// both "/ui" and "/ui/*". Other paths under /ui answer 404 and other methods 405, as problem+json.
// Safe for concurrent use.
func Handler() http.Handler {
	index, err := fs.ReadFile(static, "static/index.html")
	if err != nil {
		panic(err) // embedded at build time
	}
	assets := map[string]asset{
		Prefix:                 newAsset("index.html", index),
		Prefix + "/":           newAsset("index.html", index),
		Prefix + "/index.html": newAsset("index.html", index),
	}
	for _, name := range []string{"app.js", "style.css"} {
		body, err := fs.ReadFile(static, "static/"+name)
		if err != nil {
			panic(err) // embedded at build time
		}
		assets[Prefix+"/"+name] = newAsset(name, body)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			writeProblem(w, http.StatusMethodNotAllowed, api.TypeMethodNotAllowed, "Method not allowed",
				"this route does not accept that method")
			return
		}
		a, ok := assets[r.URL.Path]
		if !ok {
			writeProblem(w, http.StatusNotFound, api.TypeNotFound, "Not found",
				"no such dashboard file: "+strings.TrimPrefix(r.URL.Path, Prefix+"/"))
			return
		}
		for k, v := range securityHeaders {
			w.Header().Set(k, v)
		}
		w.Header().Set("ETag", a.etag)
		http.ServeContent(w, r, a.name, time.Time{}, bytes.NewReader(a.body))
	})
}

// writeProblem answers with a problem+json body like the rest of the API's, carrying the request
// ID the gateway's middleware put on the response.
func writeProblem(w http.ResponseWriter, status int, typ, title, detail string) {
	body, _ := json.Marshal(api.Problem{
		Type: typ, Title: title, Status: status, Detail: detail,
		RequestID: w.Header().Get("X-Request-Id"),
	})
	w.Header().Set("Content-Type", api.ContentTypeProblem)
	w.WriteHeader(status)
	_, _ = w.Write(append(body, '\n'))
}
