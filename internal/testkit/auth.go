package testkit

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/leasegate/leasegate/auth"
	"github.com/leasegate/leasegate/internal/harness"
)

// ProbUnauthenticated is the problem type of a 401 (api/problem.go); spelled out so that a
// renamed constant breaks the tests instead of silently changing the contract.
const ProbUnauthenticated = "urn:leasegate:problem:unauthenticated"

// Principal is one principal of a test's auth file, with its key in clear.
type Principal struct {
	Name, Key   string
	Prefixes    []string
	Permissions []auth.Permission
	Quotas      string // its "quotas" member, JSON ("": none)
}

// Principals are the principals every auth test starts with: keys fresh per test.
func Principals() map[string]*Principal {
	ps := map[string]*Principal{
		"billing":      {Prefixes: []string{"billing.", "shared.reports."}, Permissions: []auth.Permission{auth.Lock, auth.Inspect}},
		"billing-2":    {Prefixes: []string{"billing."}, Permissions: []auth.Permission{auth.Lock, auth.Inspect}},
		"reader":       {Prefixes: []string{"billing."}, Permissions: []auth.Permission{auth.Inspect}},
		"ops":          {Prefixes: []string{"*"}, Permissions: []auth.Permission{auth.Lock, auth.Inspect, auth.Admin}},
		"billing-ops":  {Prefixes: []string{"billing."}, Permissions: []auth.Permission{auth.Admin}},
		"inspect-only": {Prefixes: []string{"*"}, Permissions: []auth.Permission{auth.Inspect}},
	}
	for name, p := range ps {
		p.Name = name
		p.Key, _ = auth.NewKey()
	}
	return ps
}

// AuthFile renders an auth file of ps.
func AuthFile(ps map[string]*Principal) []byte {
	var entries []string
	for _, p := range ps {
		quotas := ""
		if p.Quotas != "" {
			quotas = `,"quotas":` + p.Quotas
		}
		entries = append(entries, fmt.Sprintf(`{"name":%q,"keys":[%q],"prefixes":%s,"permissions":%s%s}`,
			p.Name, auth.HashKey(p.Key), jsonList(p.Prefixes), jsonList(p.Permissions), quotas))
	}
	return []byte(`{"principals":[` + strings.Join(entries, ",\n") + "]}\n")
}

func jsonList[T ~string](items []T) string {
	q := make([]string, len(items))
	for i, s := range items {
		q[i] = fmt.Sprintf("%q", s)
	}
	return "[" + strings.Join(q, ",") + "]"
}

// SecuredEnv is a gateway that authenticates (an auth file of Principals) and serves HTTPS
// with a certificate of a private CA: what the clients' --api-key and --ca-file options are for.
type SecuredEnv struct {
	Gateway    *harness.Gateway
	CAFile     string
	Principals map[string]*Principal
	// Client trusts the CA and sends no API key (see As).
	Client *harness.Client
}

// NewSecuredEnv starts t's Redis deployment and a SecuredEnv's gateway on it, with fresh keys.
func NewSecuredEnv(t *testing.T) *SecuredEnv {
	t.Helper()
	dir := t.TempDir()
	ca, pair, err := harness.WriteServerCertificates(dir)
	require.NoError(t, err)
	ps := Principals()
	authPath := filepath.Join(dir, "auth.json")
	require.NoError(t, os.WriteFile(authPath, AuthFile(ps), 0o600))
	_, deploy := Redis(t)
	opts := WithEnv(deploy, "", map[string]string{"LEASEGATE_AUTH_FILE": authPath})
	opts.TLS = &harness.GatewayTLS{CertFile: pair.CertFile, KeyFile: pair.KeyFile, RootCAs: ca.Pool}
	gw := harness.NewGateway(t, opts)
	require.True(t, strings.HasPrefix(gw.URL, "https://"), gw.URL)
	return &SecuredEnv{Gateway: gw, CAFile: ca.File, Principals: ps, Client: harness.NewTLSClient(t, gw.URL, opts.TLS.ClientConfig())}
}

// As returns headers authenticating as principal name.
func (e *SecuredEnv) As(name string) harness.Headers {
	return harness.Headers{"Authorization": "Bearer " + e.Principals[name].Key}
}

// Held reports whether lock is held, asking as "ops".
func (e *SecuredEnv) Held(t *testing.T, lock string) bool {
	t.Helper()
	r := e.Client.Do(http.MethodGet, "/locks/"+lock, e.As("ops"), "")
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	return r.JSON()["held"] == true
}
