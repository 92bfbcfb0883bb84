package harness

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/MicahParks/jwkset"
	"github.com/golang-jwt/jwt/v5"
)

// CA is a certificate authority of a test's own (ECDSA P-256, valid for a day) that issues
// certificates for servers and clients on loopback.
type CA struct {
	// File is the PEM file holding the CA's certificate (ca.crt in the directory given to NewCA).
	File string
	// Pool holds the CA's certificate, to trust it as a client (RootCAs) or a server (ClientCAs).
	Pool *x509.CertPool

	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

// CertPair is a certificate and its private key in PEM files, as Issue wrote them.
type CertPair struct {
	CertFile, KeyFile string
	// Serial is the certificate's serial number (each Issue draws a fresh random one).
	Serial *big.Int
}

// Load reads the pair, e.g. for tls.Config.Certificates.
func (p CertPair) Load() (tls.Certificate, error) { return tls.LoadX509KeyPair(p.CertFile, p.KeyFile) }

// NewCA generates a self-signed CA and writes its certificate to dir/ca.crt.
func NewCA(dir string) (*CA, error) {
	now := time.Now()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	template := &x509.Certificate{
		SerialNumber:          serialNumber(),
		Subject:               pkix.Name{CommonName: "leasegate test CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, template, template, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	file := filepath.Join(dir, "ca.crt")
	if err := writePEM(file, "CERTIFICATE", der); err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &CA{File: file, Pool: pool, cert: cert, key: key}, nil
}

// Issue writes dir/name.crt and dir/name.key: a certificate the CA signed for 127.0.0.1, ::1 and
// localhost with subject CN=commonName, usable by a server and as a client certificate (so it
// serves for a gateway's replacement pair as well as for a client of a gateway that requires
// client certificates).
func (ca *CA) Issue(dir, name, commonName string) (CertPair, error) {
	now := time.Now()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return CertPair{}, err
	}
	serial := serialNumber()
	template := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: commonName},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		DNSNames:     []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, template, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return CertPair{}, err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return CertPair{}, err
	}
	p := CertPair{CertFile: filepath.Join(dir, name+".crt"), KeyFile: filepath.Join(dir, name+".key"), Serial: serial}
	if err := writePEM(p.CertFile, "CERTIFICATE", der); err != nil {
		return CertPair{}, err
	}
	if err := writePEM(p.KeyFile, "PRIVATE KEY", keyDER); err != nil {
		return CertPair{}, err
	}
	return p, nil
}

// WriteServerCertificates writes a fresh CA (dir/ca.crt) and a server certificate it signed for
// 127.0.0.1 (dir/server.crt, dir/server.key) into dir.
func WriteServerCertificates(dir string) (*CA, CertPair, error) {
	ca, err := NewCA(dir)
	if err != nil {
		return nil, CertPair{}, err
	}
	pair, err := ca.Issue(dir, "server", "127.0.0.1")
	return ca, pair, err
}

func writePEM(path, kind string, der []byte) error {
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// serialNumber returns a random 128-bit certificate serial number.
func serialNumber() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	return n
}

// JWTKey is a JWT signing key of a test's own with its key ID: ECDSA P-256 (ES256) from
// NewJWTKey, RSA 2048 (RS256) from NewRSAJWTKey.
type JWTKey struct {
	KID    string
	key    crypto.Signer
	method jwt.SigningMethod
	alg    jwkset.ALG
}

// NewJWTKey generates an ES256 JWTKey.
func NewJWTKey(kid string) (*JWTKey, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	return &JWTKey{KID: kid, key: key, method: jwt.SigningMethodES256, alg: jwkset.AlgES256}, nil
}

// NewRSAJWTKey generates an RS256 JWTKey.
func NewRSAJWTKey(kid string) (*JWTKey, error) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	return &JWTKey{KID: kid, key: key, method: jwt.SigningMethodRS256, alg: jwkset.AlgRS256}, nil
}

// Sign returns a compact JWT of claims, with the key's kid in its header when withKID.
func (k *JWTKey) Sign(claims map[string]any, withKID bool) (string, error) {
	t := jwt.NewWithClaims(k.method, jwt.MapClaims(claims))
	if withKID {
		t.Header["kid"] = k.KID
	}
	return t.SignedString(k.key)
}

// WriteJWKS writes a JWK Set of the keys' public halves to path (jwkset does the encoding).
func WriteJWKS(path string, keys ...*JWTKey) error {
	var set jwkset.JWKSMarshal
	for _, k := range keys {
		jwk, err := jwkset.NewJWKFromKey(k.key.Public(), jwkset.JWKOptions{
			Metadata: jwkset.JWKMetadataOptions{KID: k.KID, ALG: k.alg, USE: jwkset.UseSig}})
		if err != nil {
			return err
		}
		set.Keys = append(set.Keys, jwk.Marshal())
	}
	b, err := json.Marshal(set)
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o600)
}

// WritePublicKeyPEM writes the keys' public halves to path as PEM "PUBLIC KEY" blocks.
func WritePublicKeyPEM(path string, keys ...*JWTKey) error {
	var out []byte
	for _, k := range keys {
		der, err := x509.MarshalPKIXPublicKey(k.key.Public())
		if err != nil {
			return err
		}
		out = append(out, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})...)
	}
	return os.WriteFile(path, out, 0o600)
}
