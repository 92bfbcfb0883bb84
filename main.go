// Command leasegate is an HTTP/JSON distributed-lock gateway backed by Redis. Run with no
// arguments (or "serve") it serves; "healthcheck" probes a running gateway's /healthz; "auth-key"
// makes an API key; "run", "elect", "acquire", "release", "renew", "inspect", "list",
// "force-release", "observe" and "watch" are the command line client (package cli).
package main

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	_ "embed"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime/debug"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/google/uuid"
	"github.com/redis/rueidis"

	"github.com/leasegate/leasegate/api"
	"github.com/leasegate/leasegate/auth"
	"github.com/leasegate/leasegate/cli"
	"github.com/leasegate/leasegate/handlers"
	"github.com/leasegate/leasegate/lockcore"
	"github.com/leasegate/leasegate/metrics"
)

//go:embed openapi.yaml
var openapiSpec []byte

// authCheckInterval is how often the auth file's stamp is looked at for a change.
const authCheckInterval = time.Second

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if len(os.Args) > 1 && slices.Contains(cli.Commands, os.Args[1]) {
		host, _ := os.Hostname()
		env := cli.Env{Server: os.Getenv("LEASEGATE_SERVER"), APIKey: os.Getenv("LEASEGATE_API_KEY"),
			APIKeyFile: os.Getenv("LEASEGATE_API_KEY_FILE"), CAFile: os.Getenv("LEASEGATE_CA_FILE"), Hostname: host}
		os.Exit(cli.Run(ctx, os.Args[1:], env, os.Stdout, os.Stderr))
	}
	// Lease IDs are random UUIDs, public in the tokens that carry them: their random bytes are
	// read 256 at a time rather than with a getrandom call per acquire. Set before anything
	// makes one (the pool is not safe to switch on concurrently).
	uuid.EnableRandPool()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "leasegate:", err)
		os.Exit(1)
	}
}

// usage is the top-level help (leasegate help, -h, --help).
const usage = `leasegate: an HTTP/JSON distributed-lock gateway backed by Redis, and its command line.

Usage:
  leasegate [serve]          run the gateway (configured by LEASEGATE_* variables; see docs/configuration.md)
  leasegate healthcheck      exit 0 if the gateway on LEASEGATE_LISTEN answers /healthz (over HTTPS
                             when LEASEGATE_TLS_CERT_FILE is set)
  leasegate run (--lock NAME [--lock NAME...] [--shared] | --semaphore NAME --permits N) [flags] -- COMMAND [ARGS...]
                             run a command while holding a lock (several --lock: all of them, as
                             one multi-lock; or a semaphore's permit); it is stopped before the
                             lease can lapse
  leasegate elect NAME --value V [flags] -- COMMAND [ARGS...]
                             campaign in an election and run a command only while leader; it is
                             stopped before the lead can lapse (--again: campaign again after)
  leasegate acquire|release|renew|inspect (--lock NAME | --semaphore NAME | --multilock ID) [flags]
  leasegate inspect --election NAME
                             one call, printing the gateway's JSON answer
  leasegate list [--prefix P] [--kind lock|semaphore|election] [--json]
                             what is held and who waits, one line per name (admin)
  leasegate force-release (--lock NAME | --semaphore NAME | --election NAME)
                             take every hold off the name (admin), printing each one removed
  leasegate watch (--lock NAME | --semaphore NAME) [--json]
                             print a lock's or semaphore's live events until interrupted
  leasegate observe NAME [--after ID] [--json]
                             print an election's leaders, one event a line, until interrupted
  leasegate auth-key         print a new random API key and the hash line to put in the auth
                             file (LEASEGATE_AUTH_FILE; see docs/auth.md) on stdout, what to do
                             with them on stderr
  leasegate version          print the version
  leasegate COMMAND --help   a command's flags

The client commands talk to --server (default $LEASEGATE_SERVER, else http://127.0.0.1:8080).
To a gateway with an auth file they send an API key ("Authorization: Bearer KEY") from
--api-key-file FILE, $LEASEGATE_API_KEY_FILE or $LEASEGATE_API_KEY (or --api-key KEY, which
other users can see in ps); to an https:// gateway whose certificate a private CA signed, they
trust that CA's certificate from --ca-file FILE or $LEASEGATE_CA_FILE.
`

// run runs the command args[0] (serve when none): the gateway, or one of its own small commands.
// stdout gets what a command prints for a pipe; stderr, what it says to the person running it.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cmd := "serve"
	if len(args) > 0 {
		cmd = args[0]
	}
	switch {
	case slices.Contains([]string{"help", "-h", "-help", "--help"}, cmd),
		len(args) > 1 && slices.Contains([]string{"-h", "-help", "--help"}, args[1]):
		_, err := io.WriteString(stdout, usage)
		return err
	case slices.Contains([]string{"version", "-version", "--version"}, cmd):
		_, err := fmt.Fprintln(stdout, "leasegate", version())
		return err
	case cmd == "auth-key":
		return authKey(stdout, stderr)
	}
	cfg, err := loadConfig()
	if err != nil {
		return err
	}
	switch cmd {
	case "serve":
		return serve(ctx, cfg, stdout)
	case "healthcheck":
		return healthcheck(ctx, cfg)
	default:
		return fmt.Errorf("unknown command %q (want serve, healthcheck, auth-key, %s)", cmd, strings.Join(cli.Commands, ", "))
	}
}

// authKey prints a new API key and its hash line on stdout, two lines a script can take apart
// (`leasegate auth-key | grep hash` keeps the hash alone), and the advice on stderr.
func authKey(stdout, stderr io.Writer) error {
	key, hash := auth.NewKey()
	if _, err := fmt.Fprintf(stdout, "key:  %s\nhash: %q\n", key, hash); err != nil {
		return err
	}
	_, _ = fmt.Fprint(stderr, "Give the key to its client (Authorization: Bearer <key>); it is not stored anywhere.\n"+
		"Add the hash to the principal's \"keys\" in the auth file; the gateway picks it up within a second.\n")
	return nil
}

// newService connects to the deployment cfg names: one Redis, Sentinel or Cluster
// (LEASEGATE_REDIS_*), or RedLock's independent masters (LEASEGATE_REDLOCK_URLS). It returns the
// deployment's name for the logs, and what closes the Redis client once the Service is closed
// (a RedLock Service closes its masters' clients itself).
func newService(ctx context.Context, cfg Config, tokens *lockcore.Tokens, opts lockcore.Options, log *slog.Logger) (*lockcore.Service, string, func(), error) {
	if len(cfg.RedlockURLs) > 0 {
		masters, deployment, err := redlockOptions(cfg)
		if err != nil {
			return nil, "", nil, err
		}
		svc, err := lockcore.NewRedLock(masters, tokens, opts)
		return svc, deployment, func() {}, err
	}
	opt, deployment, err := redisOption(cfg)
	if err != nil {
		return nil, "", nil, err
	}
	client, err := rueidis.NewClient(opt)
	if client == nil {
		return nil, "", nil, fmt.Errorf("redis client for %s: %w", deployment, err)
	}
	if err != nil {
		log.Warn("redis is unreachable at start; lock calls answer 503 until it is back", "redis", deployment, "err", err)
	} else if err := refuseLoneClusterNode(ctx, client, deployment); err != nil {
		client.Close()
		return nil, "", nil, err
	}
	if cfg.ReplicaAcks.All {
		if opts.CountReplicas, err = replicaCounter(opt, client); err != nil {
			client.Close()
			return nil, "", nil, err
		}
	}
	svc, err := lockcore.New(client, tokens, opts)
	if err != nil {
		client.Close()
		return nil, "", nil, err
	}
	return svc, deployment, client.Close, nil
}

// serve runs the gateway until ctx ends, then shuts down gracefully: it stops accepting, lets
// in-flight requests finish, and releases nobody's lease.
func serve(ctx context.Context, cfg Config, stdout io.Writer) error {
	log := newLogger(cfg, stdout)
	tokens, err := newTokens(cfg, log)
	if err != nil {
		return err
	}
	tlsConfig, err := httpsConfig(cfg, log)
	if err != nil {
		return err
	}
	authn, stopAuth, err := startAuth(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer stopAuth()

	m := metrics.New(cfg.LongHold)
	svc, deployment, closeRedis, err := newService(ctx, cfg, tokens, engineOptions(cfg, log, m), log)
	if err != nil {
		return err
	}
	defer closeRedis()
	m.Parked(svc.Parked)
	if svc.Masters() != nil {
		m.RedLockMasters(svc.Masters)
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return err
	}
	srv := newHTTPServer(cfg, log, tlsConfig, newRouter(cfg, log, svc, m, authn))
	log.Info("listening", "addr", ln.Addr().String(), "redis", deployment, "replica_acks", cfg.ReplicaAcks.String(), "key_prefix", cfg.KeyPrefix)
	return serveUntilDone(ctx, cfg, log, srv, ln, svc)
}

// newLogger writes JSON lines to stdout at LEASEGATE_LOG_LEVEL.
func newLogger(cfg Config, stdout io.Writer) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(cfg.LogLevel))
	return slog.New(slog.NewJSONHandler(stdout, &slog.HandlerOptions{Level: level}))
}

// newTokens is the lease-token codec, keyed by LEASEGATE_TOKEN_SECRET (a random key when unset).
func newTokens(cfg Config, log *slog.Logger) (*lockcore.Tokens, error) {
	secret := []byte(cfg.TokenSecret)
	if len(secret) == 0 {
		secret = make([]byte, 32)
		_, _ = rand.Read(secret)
		log.Warn("LEASEGATE_TOKEN_SECRET is unset: using a random secret, so tokens from this process are valid on no other replica and not after a restart")
	}
	return lockcore.NewTokens(secret)
}

// httpsConfig is the TLS configuration when LEASEGATE_TLS_CERT_FILE is set (nil: plain HTTP); the
// certificate is reloaded when its files change.
func httpsConfig(cfg Config, log *slog.Logger) (*tls.Config, error) {
	if cfg.TLSCertFile == "" {
		return nil, nil
	}
	reloader, err := newCertReloader(cfg.TLSCertFile, cfg.TLSKeyFile, log)
	if err != nil {
		return nil, err
	}
	tlsConfig, err := serverTLS(cfg, reloader)
	if err != nil {
		return nil, err
	}
	log.Info("serving HTTPS", append(certAttrs(reloader.cert), "client_certificates", cfg.TLSClientCAFile != "")...)
	return tlsConfig, nil
}

// startAuth opens LEASEGATE_AUTH_FILE and re-reads it on SIGHUP and when it changes, until the
// returned stop is called; requests in flight, parked ones included, and leases are untouched by
// a reload. Without an auth file, authentication is off (nil).
func startAuth(ctx context.Context, cfg Config, log *slog.Logger) (authn handlers.Authenticator, stop func(), err error) {
	if cfg.AuthFile == "" {
		log.Warn("LEASEGATE_AUTH_FILE is unset: authentication is off, and anyone who can reach the gateway may take, inspect, list and force-release every lock")
		return nil, func() {}, nil
	}
	store, err := auth.Open(cfg.AuthFile, log)
	if err != nil {
		return nil, nil, err
	}
	if name := store.Config().OwnHeldQuota(); name != "" && cfg.QuotaHeld == 0 {
		return nil, nil, fmt.Errorf("LEASEGATE_AUTH_FILE: principal %q has a \"held\" quota of its own, which needs the holds counted: "+
			"set LEASEGATE_QUOTA_HELD (the cap of principals without one)", name)
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	watchCtx, stopWatch := context.WithCancel(ctx)
	watched := make(chan struct{})
	go func() { defer close(watched); store.Watch(watchCtx, authCheckInterval, hup) }()
	log.Info("authentication on", "auth_file", cfg.AuthFile, "principals", len(store.Config().Principals), "metrics_auth", cfg.MetricsAuth)
	return store, func() { stopWatch(); <-watched; signal.Stop(hup) }, nil
}

// engineOptions are lockcore's options from cfg, reporting to m unless metrics are off.
func engineOptions(cfg Config, log *slog.Logger, m *metrics.Metrics) lockcore.Options {
	var observer lockcore.Observer = m
	if !cfg.Metrics {
		observer = nil
	}
	return lockcore.Options{
		KeyPrefix: cfg.KeyPrefix, Logger: log, MaxWaiters: cfg.MaxWaiters, FenceTTL: cfg.FenceTTL,
		ReplicaAcks: cfg.ReplicaAcks.N, ReplicaAckTimeout: cfg.ReplicaAckTimeout,
		Observer: observer, LongHold: cfg.LongHold, OnLongHoldSweep: m.SetLongHolds, OnRedisCheck: m.SetRedisUp,
		// A restarted RedLock master counts again once every lease it may have held has run
		// out or been renewed without it (see lockcore/redlock.go).
		RestartGuard: cfg.MaxTTL + time.Second, RedLockNewDeployment: cfg.RedlockNew,
		MaxHeld:     cfg.QuotaHeld,
		ElectionLog: cfg.ElectionLog, ElectionLogBytes: cfg.ElectionLogBytes, ElectionRetention: cfg.ElectionRetention,
		Redisson: lockcore.RedissonNames{Locks: cfg.RedissonLocks, RWLocks: cfg.RedissonRWLocks,
			WatchdogTimeout: cfg.RedissonWatchdogTimeout},
	}
}

// newRouter is the HTTP API on svc.
func newRouter(cfg Config, log *slog.Logger, svc *lockcore.Service, m *metrics.Metrics, authn handlers.Authenticator) http.Handler {
	var routerMetrics handlers.Metrics = m
	if !cfg.Metrics {
		routerMetrics = nil
	}
	return handlers.NewRouter(svc, handlers.Options{
		Limits:         api.Limits{DefaultTTL: cfg.DefaultTTL, MaxTTL: cfg.MaxTTL, MaxWait: cfg.MaxWait, MaxHold: cfg.MaxHold},
		Logger:         log,
		AccessLog:      handlers.AccessLog(cfg.AccessLog),
		Metrics:        routerMetrics,
		Admin:          svc,
		LongHold:       cfg.LongHold,
		Spec:           openapiSpec,
		Auth:           authn,
		MetricsAuth:    cfg.MetricsAuth == "admin",
		Quotas:         handlers.Quotas{Rate: cfg.QuotaRate, Burst: cfg.QuotaBurst, Parked: cfg.QuotaParked, Streams: cfg.QuotaStreams},
		Streams:        handlers.Streams{Max: cfg.MaxStreams, Lifetime: cfg.MaxStreamLifetime},
		AuthFailures:   handlers.AuthFailures{Rate: cfg.AuthFailureRate, Evicted: m.AuthFailureForgotten},
		TrustedProxies: trustedProxies(cfg),
		Elections:      svc,
	})
}

// trustedProxies is LEASEGATE_TRUSTED_PROXIES, already checked with the rest of cfg (see
// Config's checks).
func trustedProxies(cfg Config) handlers.TrustedProxies {
	tp, _ := handlers.ParseTrustedProxies(cfg.TrustedProxies)
	return tp
}

// newHTTPServer serves router with the gateway's timeouts and header bounds.
func newHTTPServer(cfg Config, log *slog.Logger, tlsConfig *tls.Config, router http.Handler) *http.Server {
	return &http.Server{
		Handler:           router,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       15 * time.Second,
		// A long-poll may hold a request for up to MaxWait before answering.
		WriteTimeout: cfg.MaxWait + 15*time.Second,
		IdleTimeout:  2 * time.Minute,
		// Headers over handlers.MaxHeaderBytes reach the router, which answers 431 in
		// problem+json; only those over four times that are cut off by net/http, in plain text.
		MaxHeaderBytes: 4 * handlers.MaxHeaderBytes,
		ErrorLog:       slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		TLSConfig:      tlsConfig,
	}
}

// serveUntilDone serves on ln until ctx ends, then shuts down within LEASEGATE_SHUTDOWN_TIMEOUT:
// waiting requests end first (they leave their queues and answer 503 with "Connection: close", so
// their clients retry on another replica), other in-flight requests finish, and nobody's lease is
// released.
func serveUntilDone(ctx context.Context, cfg Config, log *slog.Logger, srv *http.Server, ln net.Listener, svc *lockcore.Service) error {
	served := make(chan error, 1)
	go func() {
		if srv.TLSConfig != nil {
			served <- srv.ServeTLS(ln, "", "") // the pair comes from TLSConfig.GetCertificate
		} else {
			served <- srv.Serve(ln)
		}
	}()
	select {
	case err := <-served:
		svc.Close()
		return err
	case <-ctx.Done():
	}
	log.Info("shutting down", "timeout", cfg.ShutdownTimeout.String())
	shutdownCtx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
	defer cancel()
	srv.SetKeepAlivesEnabled(false)
	closed := make(chan struct{})
	go func() { svc.Close(); close(closed) }()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	select {
	case <-closed:
	case <-shutdownCtx.Done():
		return fmt.Errorf("shutdown: ending waits: %w", shutdownCtx.Err())
	}
	<-served
	log.Info("stopped")
	return nil
}

// version is the module version and VCS revision this binary was built from.
func version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "(unknown)"
	}
	v := bi.Main.Version
	for _, s := range bi.Settings {
		if s.Key == "vcs.revision" && len(s.Value) >= 12 {
			v += " " + s.Value[:12]
		}
	}
	return v + " " + bi.GoVersion
}

// healthcheck GETs /healthz of the gateway listening on cfg.Listen (on loopback when it listens on
// every address), over HTTPS when cfg sets a certificate (see healthcheckTLS); for container
// HEALTHCHECKs.
func healthcheck(ctx context.Context, cfg Config) error {
	host, port, _ := net.SplitHostPort(cfg.Listen)
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1" // listening on every address: ask on loopback
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	scheme, client := "http", http.DefaultClient
	if cfg.TLSCertFile != "" {
		tc, err := healthcheckTLS(cfg)
		if err != nil {
			return err
		}
		scheme, client = "https", &http.Client{Transport: &http.Transport{TLSClientConfig: tc}}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, scheme+"://"+net.JoinHostPort(host, port)+"/healthz", nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("healthz answered %s", resp.Status)
	}
	return nil
}
