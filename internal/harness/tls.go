package harness

import (
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"net/url"
	"testing"
)

// TLSOptions configure a TLSRedis. The zero value is ACL user "gate" with a random password.
type TLSOptions struct {
	// Username is the ACL user the rig creates, with every permission (~* &* +@all); default
	// "gate".
	Username string
	// Password is that user's password; default 32 random hex digits.
	Password string
	// Args are extra redis-server arguments.
	Args []string
}

// TLSRedis is a redis-server that accepts TLS connections only, with a certificate for
// 127.0.0.1 signed by a CA of its own, and one ACL user: the default user is disabled, so every
// client must authenticate as that user. Its Do and DoList speak TLS and authenticate as the user;
// DoAs tries other credentials.
type TLSRedis struct {
	*Redis
	caFile    string
	tlsConfig *tls.Config
}

// NewTLSRedis generates a CA and a server certificate (ECDSA P-256, valid for a day) into a
// directory of t's, starts the server with them (--port 0 --tls-port PORT --tls-auth-clients no)
// and stops it when t ends.
func NewTLSRedis(t testing.TB, opts TLSOptions) *TLSRedis {
	t.Helper()
	if opts.Username == "" {
		opts.Username = "gate"
	}
	if opts.Password == "" {
		b := make([]byte, 16)
		_, _ = rand.Read(b)
		opts.Password = hex.EncodeToString(b)
	}
	dir := t.TempDir()
	caFile, certFile, keyFile, pool, err := writeCertificates(dir)
	if err != nil {
		t.Fatalf("tls rig: certificates: %v", err)
	}
	cfg := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	args := append([]string{
		"--tls-cert-file", certFile, "--tls-key-file", keyFile, "--tls-ca-cert-file", caFile,
		"--tls-auth-clients", "no",
		"--user", "default", "off",
		"--user", opts.Username, "on", ">" + opts.Password, "~*", "&*", "+@all",
	}, opts.Args...)
	r, err := StartRedis(dir, RedisOptions{Args: args, TLS: cfg, Username: opts.Username, Password: opts.Password})
	if err != nil {
		t.Fatalf("tls rig: start redis-server: %v", err)
	}
	t.Cleanup(func() { stopAll(t, []*Redis{r}) })
	return &TLSRedis{Redis: r, caFile: caFile, tlsConfig: cfg}
}

// CAFile returns the path of the PEM file holding the CA that signed the server's certificate
// (for LEASEGATE_REDIS_TLS_CA, or redis-cli --cacert).
func (r *TLSRedis) CAFile() string { return r.caFile }

// TLSConfig returns a client configuration trusting that CA.
func (r *TLSRedis) TLSConfig() *tls.Config { return r.tlsConfig.Clone() }

// Username returns the ACL user's name.
func (r *TLSRedis) Username() string { return r.opts.Username }

// Password returns the ACL user's password.
func (r *TLSRedis) Password() string { return r.opts.Password }

// URL returns rediss://USER:PASSWORD@127.0.0.1:PORT.
func (r *TLSRedis) URL() string {
	return (&url.URL{Scheme: "rediss", User: url.UserPassword(r.Username(), r.Password()), Host: r.Addr}).String()
}

// writeCertificates writes ca.crt, redis.crt and redis.key into dir: a self-signed CA and a
// certificate it signed for 127.0.0.1, ::1 and localhost, usable by a server and as a client
// (Redis presents it on replication links too). It returns the paths and a pool holding the CA.
func writeCertificates(dir string) (caFile, certFile, keyFile string, pool *x509.CertPool, err error) {
	ca, err := NewCA(dir)
	if err != nil {
		return "", "", "", nil, err
	}
	pair, err := ca.Issue(dir, "redis", "127.0.0.1")
	if err != nil {
		return "", "", "", nil, err
	}
	return ca.File, pair.CertFile, pair.KeyFile, ca.Pool, nil
}
