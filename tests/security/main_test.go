// Package security tests authentication and permissions (API keys, JWTs), quotas, TLS
// serving and TLS to Redis as an ACL user, input validation and hostile or malformed requests.
package security

import (
	"testing"

	"github.com/leasegate/leasegate/internal/testkit"
)

func TestMain(m *testing.M) { testkit.Main(m) }
