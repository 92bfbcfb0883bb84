package leasegate

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
)

// WithAPIKey makes the client send "Authorization: Bearer key" on every request: those of Lock,
// AcquireSemaphore, LockAll and the leases they return (renewals, releases, events streams
// included) and those made through Gateway.API. A gateway with an auth file (LEASEGATE_AUTH_FILE)
// answers a request without a key it knows 401 (ErrUnauthenticated), and one its principal may
// not make 403 (ErrForbidden). An empty key sends no header, so that a key read from an unset
// variable leaves the client as it was; a key holding a control character (a newline left from a
// file, say) is an error.
func WithAPIKey(key string) ClientOption {
	return func(c *Client) error {
		if key == "" {
			return nil
		}
		if strings.ContainsFunc(key, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
			return errors.New("API key: it holds a control character (a newline?), which no HTTP header can carry")
		}
		c.RequestEditors = append(c.RequestEditors, func(_ context.Context, req *http.Request) error {
			req.Header.Set("Authorization", "Bearer "+key)
			return nil
		})
		return nil
	}
}

// WithTLSConfig makes the client speak HTTPS with config (e.g. RootCAs for a gateway whose
// certificate a private CA signed, or Certificates for a gateway that requires client
// certificates): it gets an *http.Client of its own, whose transport is a clone of
// http.DefaultTransport (proxy from the environment, HTTP/2, the same timeouts) with a clone of
// config. It replaces an HTTP client given by an option before it (WithHTTPClient), and one given
// after it replaces it: to keep your own *http.Client, set its transport's TLSClientConfig
// instead (LoadCAFile reads a CA file for it).
func WithTLSConfig(config *tls.Config) ClientOption {
	return func(c *Client) error {
		transport := &http.Transport{Proxy: http.ProxyFromEnvironment, ForceAttemptHTTP2: true}
		if t, ok := http.DefaultTransport.(*http.Transport); ok { // unless a program replaced it
			transport = t.Clone()
		}
		transport.TLSClientConfig = config.Clone()
		c.Client = &http.Client{Transport: transport}
		return nil
	}
}

// WithCAFile makes the client trust the gateway's certificate only if one of the CA certificates
// in file (PEM) signed it, instead of the system's roots (as curl --cacert does): for a gateway
// serving HTTPS with a certificate of a private CA. It is WithTLSConfig with RootCAs from
// LoadCAFile and TLS 1.2 at least; New returns LoadCAFile's error.
func WithCAFile(file string) ClientOption {
	return func(c *Client) error {
		pool, err := LoadCAFile(file)
		if err != nil {
			return err
		}
		return WithTLSConfig(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12})(c)
	}
}

// LoadCAFile reads the PEM certificates in file into a pool, for tls.Config.RootCAs. It fails
// when the file cannot be read or holds no certificate.
func LoadCAFile(file string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("CA file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("CA file %s: no PEM certificate in it", file)
	}
	return pool, nil
}
