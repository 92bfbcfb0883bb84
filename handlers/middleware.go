package handlers

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"net/http"
	"runtime/debug"
	"strconv"
	"sync/atomic"
	"time"
)

type ctxKey int

const (
	requestIDKey ctxKey = iota
	statusKey
)

// requestIDHeader carries the request ID: the client's when it sends a sane one, else ours.
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

func requestID(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get(requestIDHeader)
		if !saneID(id) {
			id = idPrefix + "-" + strconv.FormatUint(idCounter.Add(1), 10)
		}
		w.Header().Set(requestIDHeader, id)
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), requestIDKey, id)))
	})
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
	id, _ := ctx.Value(requestIDKey).(string)
	return id
}

// statusRecorder remembers the status a handler wrote. A handler that writes nothing because its
// client left overrides it through setStatus; one whose answer is written later, by a parked
// long-poll, takes the log line with it through detachAccessLog.
type statusRecorder struct {
	http.ResponseWriter
	status   int
	entry    accessEntry
	detached bool
}

func (s *statusRecorder) WriteHeader(code int) {
	if s.status == 0 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (s *statusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }

func setStatus(ctx context.Context, code int) {
	if rec, ok := ctx.Value(statusKey).(*statusRecorder); ok && rec.status == 0 {
		rec.status = code
	}
}

// accessEntry is one request's access-log line, written once its answer is.
type accessEntry struct {
	log          *slog.Logger
	id           string
	method, path string
	start        time.Time
}

func (e *accessEntry) write(status int) {
	if e.log == nil {
		return
	}
	e.log.LogAttrs(context.Background(), slog.LevelInfo, "request",
		slog.String("request_id", e.id),
		slog.String("method", e.method),
		slog.String("path", e.path),
		slog.Int("status", status),
		slog.Float64("duration_ms", float64(time.Since(e.start).Microseconds())/1000),
	)
}

// detachAccessLog takes ctx's log line away from the access log middleware, for a request whose
// answer is written after its handler returned.
func detachAccessLog(ctx context.Context) *accessEntry {
	rec, ok := ctx.Value(statusKey).(*statusRecorder)
	if !ok {
		return &accessEntry{}
	}
	rec.detached = true
	e := rec.entry
	return &e
}

// accessLog writes one line per request: ID, method, path, status and duration. It never logs
// headers, so lease tokens stay out of the logs.
func accessLog(log *slog.Logger) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			rec := &statusRecorder{ResponseWriter: w, entry: accessEntry{
				log: log, id: requestIDFrom(r.Context()), method: r.Method, path: r.URL.Path, start: time.Now(),
			}}
			next.ServeHTTP(rec, r.WithContext(context.WithValue(r.Context(), statusKey, rec)))
			if !rec.detached {
				rec.entry.write(rec.status)
			}
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
