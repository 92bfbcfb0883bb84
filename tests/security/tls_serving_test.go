package security

import (
	"context"
	"crypto/tls"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leasegate/leasegate/internal/harness"
	"github.com/leasegate/leasegate/internal/testkit"
)

// tlsGateway starts a Redis and a gateway serving HTTPS with a fresh CA's certificate for
// 127.0.0.1; clientCA, when true, makes it require client certificates from that CA (the harness
// presents one it issued).
func tlsGateway(t *testing.T, clientCA bool) (*harness.Gateway, *harness.CA, *harness.Client) {
	t.Helper()
	dir := t.TempDir()
	ca, pair, err := harness.WriteServerCertificates(dir)
	require.NoError(t, err)
	opts := &harness.GatewayTLS{CertFile: pair.CertFile, KeyFile: pair.KeyFile, RootCAs: ca.Pool}
	if clientCA {
		client, err := ca.Issue(dir, "client", "worker-1")
		require.NoError(t, err)
		cert, err := client.Load()
		require.NoError(t, err)
		opts.ClientCAFile, opts.ClientCert = ca.File, &cert
	}
	r := harness.NewRedis(t, harness.RedisOptions{})
	gw := harness.NewGateway(t, harness.GatewayOptions{Redis: r, TLS: opts})
	require.True(t, strings.HasPrefix(gw.URL, "https://"), gw.URL)
	return gw, ca, harness.NewTLSClient(t, gw.URL, opts.ClientConfig())
}

// hostPort is a gateway URL's host:port.
func hostPort(url string) string {
	_, hp, _ := strings.Cut(url, "://")
	return hp
}

// servedSerial makes a new TLS handshake with the gateway and returns the serial number of the
// certificate it presented.
func servedSerial(gw *harness.Gateway) (*big.Int, error) {
	d := &tls.Dialer{NetDialer: &net.Dialer{Timeout: 5 * time.Second}, Config: gw.TLS.ClientConfig()}
	conn, err := d.Dial("tcp", hostPort(gw.URL))
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	return conn.(*tls.Conn).ConnectionState().PeerCertificates[0].SerialNumber, nil
}

// parkWaiter starts a long-poll on lock that waits up to 30 s; its answer arrives on the channel.
// It returns once the gateway counts it as waiting.
func parkWaiter(t *testing.T, c *harness.Client, lock string) <-chan *harness.Response {
	t.Helper()
	ch := make(chan *harness.Response, 1)
	go func() {
		ch <- c.Do(http.MethodPost, "/locks/"+lock, nil, `{"owner":"next","ttl_ms":60000,"wait_ms":30000}`)
	}()
	harness.Eventually(t, 5*time.Second, "the waiter parked", func() bool {
		return c.Do(http.MethodGet, "/locks/"+lock, nil, "").Int("waiters") == 1
	})
	return ch
}

// TestTLSServingLocksAndLongPolls: over HTTPS a lock is taken and released, a parked long-poll is
// granted when the holder releases, HTTP/2 is offered, and neither plain HTTP nor TLS 1.1 is
// served.
func TestTLSServingLocksAndLongPolls(t *testing.T) {
	t.Parallel()
	gw, _, c := tlsGateway(t, false)

	g := c.Do(http.MethodPost, "/locks/secure", nil, testkit.AcquireBody("holder", 60000))
	require.Equal(t, http.StatusCreated, g.Status, "%s", g.Body)
	ch := parkWaiter(t, c, "secure")
	require.Equal(t, http.StatusOK, c.Do(http.MethodDelete, "/locks/secure", testkit.TokenHeader(g.Str("token")), "").Status)
	n := testkit.Receive(t, ch, 10*time.Second, "the parked waiter's grant over TLS")
	require.Equal(t, http.StatusCreated, n.Status, "%s", n.Body)
	require.Equal(t, http.StatusOK, c.Do(http.MethodDelete, "/locks/secure", testkit.TokenHeader(n.Str("token")), "").Status)

	tr := &http.Transport{TLSClientConfig: gw.TLS.ClientConfig(), ForceAttemptHTTP2: true}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Get(gw.URL + "/healthz")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, "HTTP/2.0", resp.Proto)

	// Plain HTTP to the TLS port reaches no handler (net/http answers a bare 400).
	plain, err := (&http.Client{Timeout: 10 * time.Second}).Post("http://"+hostPort(gw.URL)+"/locks/plain",
		"application/json", strings.NewReader(testkit.AcquireBody("cleartext", 60000)))
	if err == nil {
		plain.Body.Close()
		assert.NotEqual(t, http.StatusCreated, plain.StatusCode)
	}
	assert.Equal(t, false, c.Do(http.MethodGet, "/locks/plain", nil, "").JSON()["held"], "nothing taken over plain HTTP")

	old := gw.TLS.ClientConfig()
	old.MaxVersion = tls.VersionTLS11
	_, err = tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", hostPort(gw.URL), old)
	assert.Error(t, err, "TLS 1.1 refused")
}

// TestTLSServingCertificateReload: replacing the certificate files puts the new pair in service
// for new handshakes without a restart, while a long-poll parked before stays parked and is granted
// after; a broken replacement keeps the last good pair in service (logged once), and a good one
// after it is taken.
func TestTLSServingCertificateReload(t *testing.T) {
	t.Parallel()
	gw, ca, c := tlsGateway(t, false)
	first, err := servedSerial(gw)
	require.NoError(t, err)

	g := c.Do(http.MethodPost, "/locks/rotating", nil, testkit.AcquireBody("holder", 60000))
	require.Equal(t, http.StatusCreated, g.Status, "%s", g.Body)
	ch := parkWaiter(t, c, "rotating")

	// replace puts a new pair of ca's in place of the served files, each by an atomic rename.
	replace := func() *big.Int {
		next, err := ca.Issue(t.TempDir(), "next", "127.0.0.1")
		require.NoError(t, err)
		require.NoError(t, os.Rename(next.CertFile, gw.TLS.CertFile))
		require.NoError(t, os.Rename(next.KeyFile, gw.TLS.KeyFile))
		return next.Serial
	}
	second := replace()
	require.NotEqual(t, first, second)
	harness.Eventually(t, 10*time.Second, "new handshakes present the new certificate", func() bool {
		s, err := servedSerial(gw)
		return err == nil && s.Cmp(second) == 0
	})
	assert.Contains(t, gw.Logs(), "TLS certificate reloaded")
	select {
	case r := <-ch:
		t.Fatalf("the parked long-poll ended at the reload: %d %s", r.Status, r.Body)
	default:
	}
	assert.Equal(t, int64(1), c.Do(http.MethodGet, "/locks/rotating", nil, "").Int("waiters"), "still parked")
	require.Equal(t, http.StatusOK, c.Do(http.MethodDelete, "/locks/rotating", testkit.TokenHeader(g.Str("token")), "").Status)
	n := testkit.Receive(t, ch, 10*time.Second, "the grant of the long-poll parked before the reload")
	require.Equal(t, http.StatusCreated, n.Status, "%s", n.Body)

	// A garbage key: the failure is logged, once, and the last good pair stays in service.
	require.NoError(t, os.WriteFile(gw.TLS.KeyFile, []byte("-----BEGIN PRIVATE KEY-----\ngarbage\n-----END PRIVATE KEY-----\n"), 0o600))
	const failed = "TLS certificate reload failed"
	harness.Eventually(t, 10*time.Second, "the broken replacement logged", func() bool {
		_, _ = servedSerial(gw)
		return strings.Contains(gw.Logs(), failed)
	})
	seen := time.Now()
	harness.Eventually(t, 10*time.Second, "handshakes for more than a check interval after the failure", func() bool {
		s, err := servedSerial(gw)
		require.NoError(t, err)
		require.Equal(t, 0, s.Cmp(second), "the last good certificate is served")
		return time.Since(seen) > 1500*time.Millisecond
	})
	assert.Equal(t, 1, strings.Count(gw.Logs(), failed), "logged once per change")
	assert.Equal(t, http.StatusOK, c.Do(http.MethodGet, "/healthz", nil, "").Status)

	third := replace()
	harness.Eventually(t, 10*time.Second, "a good replacement after a broken one is taken", func() bool {
		s, err := servedSerial(gw)
		return err == nil && s.Cmp(third) == 0
	})
}

// TestTLSServingClientCertificates: with LEASEGATE_TLS_CLIENT_CA_FILE a client without a
// certificate, or with one of another CA, is refused at the handshake; one with a certificate
// from the CA is served.
func TestTLSServingClientCertificates(t *testing.T) {
	t.Parallel()
	gw, _, c := tlsGateway(t, true)
	g := c.Do(http.MethodPost, "/locks/mtls", nil, testkit.AcquireBody("worker-1", 60000))
	require.Equal(t, http.StatusCreated, g.Status, "%s", g.Body)

	other, err := harness.NewCA(t.TempDir())
	require.NoError(t, err)
	stranger, err := other.Issue(t.TempDir(), "stranger", "stranger")
	require.NoError(t, err)
	strangerCert, err := stranger.Load()
	require.NoError(t, err)
	for name, certs := range map[string][]tls.Certificate{"no certificate": nil, "another CA's certificate": {strangerCert}} {
		cfg := gw.TLS.ClientConfig()
		cfg.Certificates = certs
		tr := &http.Transport{TLSClientConfig: cfg}
		_, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Get(gw.URL + "/healthz")
		tr.CloseIdleConnections()
		assert.Error(t, err, name)
		// In TLS 1.3 the client learns of the refusal on its first read, so look at one
		// handshake in TLS 1.2 too, where it fails the handshake itself.
		cfg.MaxVersion = tls.VersionTLS12
		_, err = tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", hostPort(gw.URL), cfg)
		assert.Error(t, err, "%s, TLS 1.2 handshake", name)
	}
	assert.Equal(t, http.StatusOK, c.Do(http.MethodDelete, "/locks/mtls", testkit.TokenHeader(g.Str("token")), "").Status)
}

// TestHealthcheckOverTLS: "leasegate healthcheck" probes a TLS gateway over HTTPS (verifying the
// configured certificate), also when client certificates are required (it presents the server's
// pair), and fails against a gateway serving another certificate.
func TestHealthcheckOverTLS(t *testing.T) {
	t.Parallel()
	bin, err := harness.GatewayBinary()
	require.NoError(t, err)
	healthcheck := func(gw *harness.Gateway, certFile, keyFile string) (int, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, "healthcheck")
		cmd.Env = append(os.Environ(), "LEASEGATE_LISTEN="+hostPort(gw.URL),
			"LEASEGATE_TLS_CERT_FILE="+certFile, "LEASEGATE_TLS_KEY_FILE="+keyFile)
		if gw.TLS.ClientCAFile != "" {
			cmd.Env = append(cmd.Env, "LEASEGATE_TLS_CLIENT_CA_FILE="+gw.TLS.ClientCAFile)
		}
		out, err := cmd.CombinedOutput()
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode(), string(out)
		}
		require.NoError(t, err)
		return 0, string(out)
	}
	for _, clientCA := range []bool{false, true} {
		gw, _, _ := tlsGateway(t, clientCA)
		code, out := healthcheck(gw, gw.TLS.CertFile, gw.TLS.KeyFile)
		assert.Equal(t, 0, code, "client certificates %v: %s", clientCA, out)
	}

	gw, _, _ := tlsGateway(t, false)
	_, elsewhere, err := harness.WriteServerCertificates(t.TempDir())
	require.NoError(t, err)
	code, out := healthcheck(gw, elsewhere.CertFile, elsewhere.KeyFile)
	assert.NotEqual(t, 0, code, "another certificate configured than the one served: %s", out)
	assert.Contains(t, out, "LEASEGATE_TLS_CERT_FILE")
}

// TestTLSServingConfigErrors: one of the pair alone, or an unreadable pair, stops the gateway at
// start with the variable named.
func TestTLSServingConfigErrors(t *testing.T) {
	t.Parallel()
	bin, err := harness.GatewayBinary()
	require.NoError(t, err)
	dir := t.TempDir()
	_, pair, err := harness.WriteServerCertificates(dir)
	require.NoError(t, err)
	garbage := dir + "/garbage.key"
	require.NoError(t, os.WriteFile(garbage, []byte("garbage"), 0o600))
	for want, env := range map[string][]string{
		"LEASEGATE_TLS_CERT_FILE: is set without LEASEGATE_TLS_KEY_FILE": {"LEASEGATE_TLS_CERT_FILE=" + pair.CertFile},
		"LEASEGATE_TLS_KEY_FILE: is set without LEASEGATE_TLS_CERT_FILE": {"LEASEGATE_TLS_KEY_FILE=" + pair.KeyFile},
		"LEASEGATE_TLS_CLIENT_CA_FILE: needs":                            {"LEASEGATE_TLS_CLIENT_CA_FILE=" + pair.CertFile},
		"LEASEGATE_TLS_CERT_FILE, LEASEGATE_TLS_KEY_FILE":                {"LEASEGATE_TLS_CERT_FILE=" + pair.CertFile, "LEASEGATE_TLS_KEY_FILE=" + garbage},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		cmd := exec.CommandContext(ctx, bin)
		cmd.Env = append(os.Environ(), append(env, "LEASEGATE_LISTEN=127.0.0.1:0")...)
		out, err := cmd.CombinedOutput()
		cancel()
		var ee *exec.ExitError
		require.ErrorAs(t, err, &ee, "%s: %s", want, out)
		assert.NotEqual(t, 0, ee.ExitCode())
		assert.Contains(t, string(out), want)
	}
}
