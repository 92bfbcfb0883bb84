package handlers

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"net/http"
	"runtime/debug"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/leasegate/leasegate/api"
	"github.com/leasegate/leasegate/auth"
)

// requestKey is the context key of a request's *requestInfo.
type requestKey struct{}

// requestInfo is what the middleware knows of a request: its ID and the status it answered. One
// context value holds both, so the middleware copies the request once (each WithContext copies it).
type requestInfo struct {
	rec       statusRecorder  // the request's ResponseWriter (&rec), in the same allocation; it holds the ID
	principal *auth.Principal // set by guard.need once the request is authorized
	// authorizedBy is the guard that authorized the request, for what and which names (set by
	// guard.need; nil without authentication): an event stream authorizes it again while it lasts
	// (see reauthorizer).
	authorizedBy *guard
	perm         auth.Permission
	scope        scope
}

// requestIDHeader carries the request ID: the client's when it sends a sane one, else ours. In
// canonical form (see statusRecorder.sendID).
const requestIDHeader = "X-Request-Id"

var (
	idPrefix  = newIDPrefix()
	idCounter atomic.Uint64
)

func newIDPrefix() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// saneID accepts 1-64 bytes of visible ASCII, so a client's ID cannot forge log lines.
func saneID(id string) bool {
	if id == "" || len(id) > 64 {
		return false
	}
	for i := 0; i < len(id); i++ {
		if id[i] <= ' ' || id[i] > '~' {
			return false
		}
	}
	return true
}

func requestIDFrom(ctx context.Context) string {
	if info, ok := ctx.Value(requestKey{}).(*requestInfo); ok {
		return info.rec.id
	}
	return ""
}

// statusRecorder remembers the status a handler wrote. A handler that writes nothing because its
// client left, or whose answer could not be delivered, overrides it through setStatus.
//
// It adds the request ID header to the answer as the answer's header goes out (or as the request
// ends, see accessLog), not as the request comes in: the first header set in the answer's header
// map grows it by about 370 bytes, which a waiting request would hold all the while it waits
// (measured with go run ./bench -only waitmem).
type statusRecorder struct {
	http.ResponseWriter
	id     string // the request ID
	status int
	idSent bool // the ID is in the answer's header
	// idValue is the header's value, [id]: in the recorder's allocation rather than one of its own.
	idValue [1]string
}

// sendID puts the request ID in the answer's header once (under its canonical name).
func (s *statusRecorder) sendID() {
	if !s.idSent {
		s.idSent = true
		s.idValue[0] = s.id
		s.ResponseWriter.Header()[requestIDHeader] = s.idValue[:]
	}
}

func (s *statusRecorder) WriteHeader(code int) {
	s.sendID()
	if s.status == 0 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Write(b []byte) (int, error) {
	s.sendID()
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

// FlushError sends the header, with the request ID, if it is not out yet, and flushes (for
// http.ResponseController, which finds it before Unwrap).
func (s *statusRecorder) FlushError() error {
	s.sendID()
	return http.NewResponseController(s.ResponseWriter).Flush()
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (s *statusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// setStatus records code as the request's logged status when nothing was written yet, or, with
// force, in place of what was written (an answer that never reached its client).
func setStatus(ctx context.Context, code int, force bool) {
	if info, ok := ctx.Value(requestKey{}).(*requestInfo); ok && (info.rec.status == 0 || force) {
		info.rec.status = code
	}
}

// AccessLog says which requests get an access log line.
type AccessLog string

const (
	// AccessLogErrors logs the requests answered with an error status (400 and above), except 409
	// (a lock that is held: an ordinary answer under contention). The default.
	AccessLogErrors AccessLog = "errors"
	// AccessLogAll logs every request.
	AccessLogAll AccessLog = "all"
	// AccessLogOff logs none.
	AccessLogOff AccessLog = "off"
)

// logs says whether a request answered with status gets a line under this setting.
func (a AccessLog) logs(status int) bool {
	switch a {
	case AccessLogAll:
		return true
	case AccessLogOff:
		return false
	}
	return status >= 400 && status != http.StatusConflict
}

// accessLog gives each request its ID (X-Request-Id: the client's when sane, else ours, echoed in
// the answer), counts it in m (when set) by route pattern, method and status, and writes one line
// per request that policy logs: ID, method, path, status, duration, the client's address (see
// TrustedProxies.client) and the authenticated principal, if any. It never logs other headers, so
// lease tokens and API keys stay out of the logs.
//
// It runs in front of chi's router routes, giving it the routing context.
func accessLog(log *slog.Logger, policy AccessLog, m Metrics, proxies TrustedProxies, routes chi.Routes) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			start := time.Now()
			info := newRequestInfo(w, r)
			// One copy of the request carries the request's info and chi's routing context: chi
			// takes a routing context it finds (as a mounted router does), so it makes no second copy.
			// Both stay referenced while a request waits (about 350 bytes less per waiting request).
			// The routing context comes from a pool, as chi's own do: reset, it keeps the room its
			// URL parameters and patterns took, which a fresh one allocates again on every request.
			rctx := routeContexts.Get().(*chi.Context)
			rctx.Reset()
			rctx.Routes = routes
			ctx := context.WithValue(context.WithValue(r.Context(), requestKey{}, info), chi.RouteCtxKey, rctx)
			next.ServeHTTP(&info.rec, r.WithContext(ctx))
			info.rec.sendID() // an answer that wrote nothing goes out as the handler returns
			info.finish(log, policy, m, proxies, r, rctx, start)
			routeContexts.Put(rctx)
		})
	}
}

// routeContexts pools chi's routing contexts (see accessLog).
var routeContexts = sync.Pool{New: func() any { return chi.NewRouteContext() }}

// newRequestInfo gives a request its ID (X-Request-Id: the client's when sane, else ours, which the
// status recorder echoes in the answer) and its status recorder. Apart from accessLog's closure,
// whose frame stays on the stack of a waiting request.
func newRequestInfo(w http.ResponseWriter, r *http.Request) *requestInfo {
	id := r.Header.Get(requestIDHeader)
	if !saneID(id) {
		var b [32]byte // prefix, '-', counter: one allocation, the string
		id = string(strconv.AppendUint(append(append(b[:0], idPrefix...), '-'), idCounter.Add(1), 10))
	}
	return &requestInfo{rec: statusRecorder{ResponseWriter: w, id: id}}
}

// finish counts and logs a request that started at start (see accessLog).
func (info *requestInfo) finish(log *slog.Logger, policy AccessLog, m Metrics, proxies TrustedProxies, r *http.Request, rctx *chi.Context, start time.Time) {
	if m != nil {
		m.ObserveRequest(rctx.RoutePattern(), r.Method, info.rec.status, time.Since(start))
	}
	if !policy.logs(info.rec.status) || !log.Enabled(r.Context(), slog.LevelInfo) {
		return
	}
	attrs := []slog.Attr{
		slog.String("request_id", info.rec.id),
		slog.String("method", r.Method),
		slog.String("path", r.URL.Path),
		slog.Int("status", info.rec.status),
		slog.Float64("duration_ms", float64(time.Since(start).Microseconds())/1000),
	}
	if a, ok := proxies.client(r); ok {
		attrs = append(attrs, slog.String("client", a.String()))
	}
	if info.principal != nil {
		attrs = append(attrs, slog.String("principal", info.principal.Name))
	}
	log.LogAttrs(r.Context(), slog.LevelInfo, "request", attrs...)
}

// MaxHeaderBytes bounds a request's line and headers: a larger request is answered 431
// headers-too-large. The http.Server in front must let larger ones through to the handler (its
// own MaxHeaderBytes above this), else net/http answers them itself, in plain text.
const MaxHeaderBytes = 64 << 10

// limitHeaders answers 431 to a request whose line and headers take more than MaxHeaderBytes,
// counted as net/http reads them (a header line is its name, ": ", its value and CRLF).
func limitHeaders(log *slog.Logger) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			n := len(r.Method) + len(r.RequestURI) + len(r.Proto) + 4 + len("Host: \r\n") + len(r.Host)
			for k, vs := range r.Header {
				for _, v := range vs {
					n += len(k) + len(v) + 4
				}
			}
			if n > MaxHeaderBytes {
				writeError(w, r, log, errHeadersTooLarge)
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}

// singleHeaders answers 400 to a request that carries one of these headers more than once: which
// one a proxy in front acts on is anybody's guess (Go's Header.Get takes the first), so the
// gateway acts on none.
func singleHeaders(log *slog.Logger, names ...string) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			for _, name := range names {
				if len(r.Header.Values(name)) > 1 {
					writeError(w, r, log, invalidRequest("the "+name+" header appears more than once",
						[]api.InvalidParam{{Name: name, Reason: "must appear at most once"}}))
					return
				}
			}
			next.ServeHTTP(w, r)
		})
	}
}

// recoverer turns a panic into a 500 problem and logs its stack.
func recoverer(log *slog.Logger) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			defer func() {
				if v := recover(); v != nil {
					if v == http.ErrAbortHandler {
						panic(v)
					}
					log.Error("panic", "request_id", requestIDFrom(r.Context()), "panic", v, "stack", string(debug.Stack()))
					writeError(w, r, log, errPanic)
				}
			}()
			next.ServeHTTP(w, r)
		})
	}
}
