// Command leasegate is an HTTP/JSON distributed-lock gateway backed by Redis. Run with no
// arguments (or "serve") it serves; "healthcheck" probes a running gateway's /healthz; "run",
// "acquire", "release", "renew" and "inspect" are the command line client (package cli).
package main

import (
	"context"
	"crypto/rand"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/kelseyhightower/envconfig"
	"github.com/redis/rueidis"

	"github.com/leasegate/leasegate/api"
	"github.com/leasegate/leasegate/cli"
	"github.com/leasegate/leasegate/handlers"
	"github.com/leasegate/leasegate/lockcore"
)

//go:embed openapi.yaml
var openapiSpec []byte

// Config is read from LEASEGATE_* environment variables (see README's configuration table).
type Config struct {
	Listen          string        `default:"127.0.0.1:8080"`
	RedisAddr       string        `split_words:"true" default:"127.0.0.1:6379"`
	RedisPassword   string        `split_words:"true"`
	TokenSecret     string        `split_words:"true"`
	KeyPrefix       string        `split_words:"true" default:"leasegate:"`
	DefaultTTL      time.Duration `split_words:"true" default:"30s"`
	MaxTTL          time.Duration `split_words:"true" default:"1h"`
	MaxWait         time.Duration `split_words:"true" default:"60s"`
	MaxHold         time.Duration `split_words:"true" default:"1h"`
	ShutdownTimeout time.Duration `split_words:"true" default:"30s"`
	LogLevel        string        `split_words:"true" default:"info"`
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if len(os.Args) > 1 && slices.Contains(cli.Commands, os.Args[1]) {
		host, _ := os.Hostname()
		os.Exit(cli.Run(ctx, os.Args[1:], cli.Env{Server: os.Getenv("LEASEGATE_SERVER"), Hostname: host}, os.Stdout, os.Stderr))
	}
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "leasegate:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout io.Writer) error {
	cmd := "serve"
	if len(args) > 0 {
		cmd = args[0]
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
		return fmt.Errorf("unknown command %q (want serve, healthcheck, %s)", cmd, strings.Join(cli.Commands, ", "))
	}
}

// loadConfig reads the environment and rejects bad values, naming the variable.
func loadConfig() (Config, error) {
	var cfg Config
	if err := envconfig.Process("leasegate", &cfg); err != nil {
		return Config{}, err
	}
	// envconfig lets a set-but-empty variable bypass its default; an empty value is a mistake.
	for _, name := range []string{"LISTEN", "REDIS_ADDR", "REDIS_PASSWORD", "TOKEN_SECRET", "KEY_PREFIX",
		"DEFAULT_TTL", "MAX_TTL", "MAX_WAIT", "MAX_HOLD", "SHUTDOWN_TIMEOUT", "LOG_LEVEL"} {
		if v, ok := os.LookupEnv("LEASEGATE_" + name); ok && strings.TrimSpace(v) == "" {
			return Config{}, fmt.Errorf("LEASEGATE_%s is set but empty; unset it to use the default", name)
		}
	}
	check := func(ok bool, name, format string, a ...any) error {
		if ok {
			return nil
		}
		return fmt.Errorf("LEASEGATE_%s: "+format, append([]any{name}, a...)...)
	}
	_, _, listenErr := net.SplitHostPort(cfg.Listen)
	_, _, redisErr := net.SplitHostPort(cfg.RedisAddr)
	var level slog.Level
	levelErr := level.UnmarshalText([]byte(cfg.LogLevel))
	return cfg, errors.Join(
		check(listenErr == nil, "LISTEN", "%q is not host:port", cfg.Listen),
		check(redisErr == nil, "REDIS_ADDR", "%q is not host:port", cfg.RedisAddr),
		check(cfg.TokenSecret == "" || len(cfg.TokenSecret) >= 16, "TOKEN_SECRET", "must be at least 16 bytes"),
		check(!strings.ContainsAny(cfg.KeyPrefix, "{}"), "KEY_PREFIX", "%q must not contain '{' or '}'", cfg.KeyPrefix),
		check(cfg.MaxTTL > 0, "MAX_TTL", "must be positive, got %v", cfg.MaxTTL),
		check(cfg.DefaultTTL > 0 && cfg.DefaultTTL <= cfg.MaxTTL, "DEFAULT_TTL", "must be positive and at most LEASEGATE_MAX_TTL (%v), got %v", cfg.MaxTTL, cfg.DefaultTTL),
		check(cfg.MaxWait > 0, "MAX_WAIT", "must be positive, got %v", cfg.MaxWait),
		check(cfg.MaxHold > 0, "MAX_HOLD", "must be positive, got %v", cfg.MaxHold),
		check(cfg.ShutdownTimeout > 0, "SHUTDOWN_TIMEOUT", "must be positive, got %v", cfg.ShutdownTimeout),
		check(levelErr == nil, "LOG_LEVEL", "%q is not debug, info, warn or error", cfg.LogLevel),
	)
}

// serve runs the gateway until ctx ends, then shuts down gracefully: it stops accepting, lets
// in-flight requests finish, and releases nobody's lease.
func serve(ctx context.Context, cfg Config, stdout io.Writer) error {
	var level slog.Level
	_ = level.UnmarshalText([]byte(cfg.LogLevel))
	log := slog.New(slog.NewJSONHandler(stdout, &slog.HandlerOptions{Level: level}))

	secret := []byte(cfg.TokenSecret)
	if len(secret) == 0 {
		secret = make([]byte, 32)
		_, _ = rand.Read(secret)
		log.Warn("LEASEGATE_TOKEN_SECRET is unset: using a random secret, so tokens from this process are valid on no other replica and not after a restart")
	}
	tokens, err := lockcore.NewTokens(secret)
	if err != nil {
		return err
	}

	client, err := rueidis.NewClient(lockcore.ClientOption(cfg.RedisAddr, cfg.RedisPassword))
	if client == nil {
		return fmt.Errorf("redis client for %s: %w", cfg.RedisAddr, err)
	}
	defer client.Close()
	if err != nil {
		log.Warn("redis is unreachable at start; lock calls answer 503 until it is back", "redis_addr", cfg.RedisAddr, "err", err)
	}

	svc, err := lockcore.New(client, tokens, lockcore.Options{KeyPrefix: cfg.KeyPrefix, Logger: log})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return err
	}
	const idleTimeout = 2 * time.Minute
	parking := handlers.NewParking(ln.Addr(), idleTimeout)
	router := handlers.NewRouter(svc, handlers.Options{
		Limits:  api.Limits{DefaultTTL: cfg.DefaultTTL, MaxTTL: cfg.MaxTTL, MaxWait: cfg.MaxWait, MaxHold: cfg.MaxHold},
		Logger:  log,
		Spec:    openapiSpec,
		Parking: parking,
	})
	srv := &http.Server{
		Addr:              cfg.Listen,
		Handler:           router,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       15 * time.Second,
		// A long-poll may hold a request for up to MaxWait before answering.
		WriteTimeout:   cfg.MaxWait + 15*time.Second,
		IdleTimeout:    idleTimeout,
		MaxHeaderBytes: 64 << 10,
		ErrorLog:       slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	log.Info("listening", "addr", ln.Addr().String(), "redis_addr", cfg.RedisAddr, "key_prefix", cfg.KeyPrefix)

	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	go func() { _ = srv.Serve(parking) }() // answered long-polls come back for their next request
	select {
	case err := <-served:
		_ = parking.Close()
		svc.Close()
		return err
	case <-ctx.Done():
	}
	log.Info("shutting down", "timeout", cfg.ShutdownTimeout.String())
	// Long-polls end first (they leave their queues and answer 503 with "Connection: close", so
	// their clients retry on another replica); then in-flight requests finish. Nobody's lease is
	// released.
	shutdownCtx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
	defer cancel()
	_ = parking.Close() // first: answered long-polls must not wait for a server that stops accepting
	closed := make(chan struct{})
	go func() { svc.Close(); close(closed) }() // returns once every wait has answered
	select {
	case <-closed:
	case <-shutdownCtx.Done():
		return fmt.Errorf("shutdown: ending waits: %w", shutdownCtx.Err())
	}
	if err := srv.Shutdown(shutdownCtx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	// A handler that parked its request while Shutdown waited for it has counted it in Parking.
	if err := parking.Wait(shutdownCtx); err != nil {
		return fmt.Errorf("shutdown: answering parked long-polls: %w", err)
	}
	<-served
	log.Info("stopped")
	return nil
}

// healthcheck GETs /healthz of the gateway listening on cfg.Listen; for container HEALTHCHECKs.
func healthcheck(ctx context.Context, cfg Config) error {
	_, port, _ := net.SplitHostPort(cfg.Listen)
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://127.0.0.1:"+port+"/healthz", nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("healthz answered %s", resp.Status)
	}
	return nil
}
