package harness

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
)

var (
	specOnce   sync.Once
	specRouter routers.Router
	specErr    error
)

// specRoutes loads openapi.yaml once and returns a router over its operations.
func specRoutes() (routers.Router, error) {
	specOnce.Do(func() {
		root, err := ModuleRoot()
		if err != nil {
			specErr = err
			return
		}
		doc, err := openapi3.NewLoader().LoadFromFile(filepath.Join(root, "openapi.yaml"))
		if err != nil {
			specErr = err
			return
		}
		if specErr = doc.Validate(context.Background()); specErr != nil {
			return
		}
		specRouter, specErr = gorillamux.NewRouter(doc)
	})
	return specRouter, specErr
}

// specHost is the host requests are matched under: the spec's first server.
const specHost = "127.0.0.1:8080"

// Client talks HTTP to a gateway and checks every response against openapi.yaml, reporting a
// mismatch with t.Errorf. Safe for concurrent use, also from goroutines other than the test's.
type Client struct {
	t    testing.TB
	base string
	http *http.Client
}

// NewClient returns a client for the gateway at base (e.g. Gateway.URL).
func NewClient(t testing.TB, base string) *Client {
	t.Helper()
	return NewTLSClient(t, base, nil)
}

// NewTLSClient is NewClient for an https:// base, with that TLS configuration (e.g.
// GatewayTLS.ClientConfig()); nil means Go's defaults. Over TLS it speaks HTTP/2 when the gateway
// offers it, as browsers and curl do.
func NewTLSClient(t testing.TB, base string, cfg *tls.Config) *Client {
	t.Helper()
	if _, err := specRoutes(); err != nil {
		t.Fatalf("openapi.yaml: %v", err)
	}
	tr := &http.Transport{MaxIdleConns: 1024, MaxIdleConnsPerHost: 1024, IdleConnTimeout: 30 * time.Second,
		TLSClientConfig: cfg, ForceAttemptHTTP2: cfg != nil}
	t.Cleanup(tr.CloseIdleConnections)
	return &Client{t: t, base: strings.TrimRight(base, "/"), http: &http.Client{Transport: tr, Timeout: 2 * time.Minute}}
}

// Response is a gateway's answer, read in full.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
}

// JSON decodes the body into a map; numbers stay json.Number.
func (r *Response) JSON() map[string]any {
	m := map[string]any{}
	dec := json.NewDecoder(bytes.NewReader(r.Body))
	dec.UseNumber()
	_ = dec.Decode(&m)
	return m
}

// Str returns the body's string field key, or "".
func (r *Response) Str(key string) string {
	s, _ := r.JSON()[key].(string)
	return s
}

// Int returns the body's integer field key, or -1 when absent.
func (r *Response) Int(key string) int64 {
	n, ok := r.JSON()[key].(json.Number)
	if !ok {
		return -1
	}
	v, _ := n.Int64()
	return v
}

// Headers is a request's extra headers.
type Headers map[string]string

// Do sends one request with an optional body (sent as application/json when non-empty) and
// returns the response. A transport error is reported with t.Errorf and yields Status 0.
func (c *Client) Do(method, path string, h Headers, body string) *Response {
	return c.DoContext(context.Background(), method, path, h, body)
}

// DoContext is Do bounded by ctx; a cancelled request yields Status 0 without an error report.
func (c *Client) DoContext(ctx context.Context, method, path string, h Headers, body string) *Response {
	resp, err := c.Send(ctx, method, path, h, body)
	if err != nil && ctx.Err() == nil {
		c.t.Errorf("%s %s: %v", method, path, err)
	}
	return resp
}

// Send is DoContext for requests expected to fail in transport (e.g. to a gateway being killed):
// it returns the transport error instead of reporting it. Responses are still checked against the
// spec.
func (c *Client) Send(ctx context.Context, method, path string, h Headers, body string) (*Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, strings.NewReader(body))
	if err != nil {
		return &Response{}, err
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range h {
		req.Header.Set(k, v)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return &Response{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	out := &Response{Status: resp.StatusCode, Header: resp.Header, Body: b}
	if err != nil {
		return out, fmt.Errorf("reading body: %w", err)
	}
	c.validate(req, body, out)
	return out, nil
}

// validate reports, through t, a response that does not match the spec.
func (c *Client) validate(req *http.Request, body string, resp *Response) {
	if err := CheckResponse(req, body, resp); err != nil {
		c.t.Errorf("%v", err)
	}
}

// CheckResponse checks resp against the operation openapi.yaml defines for req (whose body was
// body). Routes outside the spec (404s) must still answer with a problem body.
func CheckResponse(req *http.Request, body string, resp *Response) error {
	router, err := specRoutes()
	if err != nil {
		return fmt.Errorf("openapi.yaml: %w", err)
	}
	u := *req.URL
	u.Scheme, u.Host = "http", specHost // the spec's server; a TLS gateway serves the same routes
	match := req.Clone(context.Background())
	match.URL = &u
	match.Host = specHost
	match.Body = io.NopCloser(strings.NewReader(body))
	route, params, err := router.FindRoute(match)
	if err != nil {
		if ct := resp.Header.Get("Content-Type"); resp.Status < 400 || !strings.HasPrefix(ct, "application/problem+json") {
			return fmt.Errorf("%s %s: off-spec route answered %d %q: %s", req.Method, req.URL.Path, resp.Status, ct, resp.Body)
		}
		return nil
	}
	// Path parameters are passed unvalidated: tests send bad names on purpose.
	for k, v := range params {
		params[k], _ = url.PathUnescape(v)
	}
	input := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{Request: match, PathParams: params, Route: route},
		Status:                 resp.Status,
		Header:                 resp.Header,
		Body:                   io.NopCloser(bytes.NewReader(resp.Body)),
		Options:                &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true},
	}
	if err := openapi3filter.ValidateResponse(context.Background(), input); err != nil {
		return fmt.Errorf("%s %s answered %d off-spec: %v\nbody: %s", req.Method, req.URL.Path, resp.Status, err, resp.Body)
	}
	return nil
}
