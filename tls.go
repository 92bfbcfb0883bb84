package main

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"
)

// certCheckInterval is how often, at most, a handshake looks at the certificate files.
const certCheckInterval = time.Second

// certFiles is what was read of the pair's two files, and their digests: a file's change is told
// by its content, since a replacement renamed into place within the file system's timestamp
// granularity can keep both the modification time and the size.
type certFiles struct {
	cert, key []byte
	digest    [2][sha256.Size]byte // zero for a file that cannot be read
}

func readCertFiles(certFile, keyFile string) (certFiles, error) {
	var f certFiles
	var err error
	if f.cert, err = os.ReadFile(certFile); err != nil {
		return certFiles{}, err
	}
	if f.key, err = os.ReadFile(keyFile); err != nil {
		return certFiles{}, err
	}
	f.digest = [2][sha256.Size]byte{sha256.Sum256(f.cert), sha256.Sum256(f.key)}
	return f, nil
}

// certReloader serves the certificate pair in two files and reloads it when either file changes,
// without a restart: new handshakes get the new pair, established connections keep theirs.
// Its GetCertificate is safe for concurrent use.
type certReloader struct {
	certFile, keyFile string
	log               *slog.Logger

	mu      sync.Mutex
	cert    *tls.Certificate
	loaded  [2][sha256.Size]byte // the files' digests when cert was read
	failing bool                 // the files with digests failed have been tried, and the error logged
	failed  [2][sha256.Size]byte
	checked time.Time
}

// newCertReloader loads the pair; an error here is a start-up error.
func newCertReloader(certFile, keyFile string, log *slog.Logger) (*certReloader, error) {
	r := &certReloader{certFile: certFile, keyFile: keyFile, log: log}
	files, err := readCertFiles(certFile, keyFile)
	if err == nil {
		r.cert, err = parsePair(files.cert, files.key)
	}
	if err != nil {
		return nil, fmt.Errorf("LEASEGATE_TLS_CERT_FILE, LEASEGATE_TLS_KEY_FILE: %w", err)
	}
	r.loaded, r.checked = files.digest, time.Now()
	return r, nil
}

// GetCertificate is tls.Config.GetCertificate: the current pair, re-read first when the files'
// contents changed since it was read (checked at most once per certCheckInterval). A pair that
// fails to load leaves the last good one in service; the failure is logged once per change of the
// files.
func (r *certReloader) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	if now.Sub(r.checked) < certCheckInterval {
		return r.cert, nil
	}
	r.checked = now
	files, err := readCertFiles(r.certFile, r.keyFile)
	if err == nil && files.digest == r.loaded || r.failing && files.digest == r.failed {
		return r.cert, nil
	}
	var cert *tls.Certificate
	if err == nil {
		cert, err = parsePair(files.cert, files.key)
	}
	if err != nil {
		r.failing, r.failed = true, files.digest
		r.log.Error("TLS certificate reload failed; still serving the last good certificate",
			"cert_file", r.certFile, "key_file", r.keyFile, "err", err)
		return r.cert, nil
	}
	r.cert, r.loaded, r.failing = cert, files.digest, false
	r.log.Info("TLS certificate reloaded", certAttrs(cert)...)
	return r.cert, nil
}

// loadPair reads a PEM certificate chain and its key, refusing a certificate outside its validity.
func loadPair(certFile, keyFile string) (*tls.Certificate, error) {
	files, err := readCertFiles(certFile, keyFile)
	if err != nil {
		return nil, err
	}
	return parsePair(files.cert, files.key)
}

// parsePair parses a PEM certificate chain and its key, refusing a certificate outside its validity.
func parsePair(certPEM, keyPEM []byte) (*tls.Certificate, error) {
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, err
	}
	if now := time.Now(); now.After(cert.Leaf.NotAfter) {
		return nil, fmt.Errorf("certificate expired at %s", cert.Leaf.NotAfter.UTC().Format(time.RFC3339))
	}
	return &cert, nil
}

// certAttrs are a certificate's log attributes.
func certAttrs(cert *tls.Certificate) []any {
	return []any{"subject", cert.Leaf.Subject.String(), "serial", cert.Leaf.SerialNumber.Text(16),
		"not_after", cert.Leaf.NotAfter.UTC().Format(time.RFC3339)}
}

// serverTLS is the gateway's TLS configuration when cfg sets a certificate, else nil: TLS 1.2 or
// later with Go's default cipher suites (HTTP/2 is offered by net/http's ServeTLS), the pair from
// reloader, and with LEASEGATE_TLS_CLIENT_CA_FILE a verified client certificate required.
func serverTLS(cfg Config, reloader *certReloader) (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: reloader.GetCertificate}
	if cfg.TLSClientCAFile != "" {
		pool, err := readCertPool(cfg.TLSClientCAFile)
		if err != nil {
			return nil, fmt.Errorf("LEASEGATE_TLS_CLIENT_CA_FILE: %w", err)
		}
		tc.ClientCAs, tc.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	return tc, nil
}

// readCertPool reads every certificate of a PEM file into a pool; a file without one is an error.
func readCertPool(path string) (*x509.CertPool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, errors.New(path + ": no PEM certificate in it")
	}
	return pool, nil
}

// healthcheckTLS is the TLS configuration of the healthcheck's probe of its own listener.
//
// The probe dials loopback, whose address the served certificate rarely names, so the host name
// is not checked; instead the chain presented must verify against the certificates in
// LEASEGATE_TLS_CERT_FILE itself (the leaf and any intermediates given with it). That proves the
// listener serves the configured certificate (or one issued by an intermediate in that file)
// without needing the root CA, which the file seldom holds. A consequence: for up to a second after
// the files are replaced, and for as long as a broken replacement is kept out of service, the
// probe fails, which flags the mismatch.
//
// With LEASEGATE_TLS_CLIENT_CA_FILE the gateway requires a client certificate, and the probe
// presents the server's own pair: it is the only pair the process is sure to be able to read, so
// the server certificate must then also be valid as a client certificate under that CA (issued by
// it, with the clientAuth extended key usage or none).
func healthcheckTLS(cfg Config) (*tls.Config, error) {
	own, err := readCertPool(cfg.TLSCertFile)
	if err != nil {
		return nil, fmt.Errorf("LEASEGATE_TLS_CERT_FILE: %w", err)
	}
	tc := &tls.Config{
		MinVersion: tls.VersionTLS12,
		// Verification is not skipped: VerifyConnection does it, without the host name.
		InsecureSkipVerify: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("the gateway presented no certificate")
			}
			inter := x509.NewCertPool()
			for _, c := range cs.PeerCertificates[1:] {
				inter.AddCert(c)
			}
			_, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{Roots: own, Intermediates: inter,
				KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
			if err != nil {
				return fmt.Errorf("the gateway does not serve the certificate of LEASEGATE_TLS_CERT_FILE: %w", err)
			}
			return nil
		},
	}
	if cfg.TLSClientCAFile != "" {
		pair, err := loadPair(cfg.TLSCertFile, cfg.TLSKeyFile)
		if err != nil {
			return nil, fmt.Errorf("LEASEGATE_TLS_CERT_FILE, LEASEGATE_TLS_KEY_FILE: %w", err)
		}
		tc.Certificates = []tls.Certificate{*pair}
	}
	return tc, nil
}
