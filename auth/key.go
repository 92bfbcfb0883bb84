package auth

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
)

// keyPrefix starts every generated key, so that secret scanners and people can tell one.
const keyPrefix = "lgk_"

// NewKey returns a new API key (keyPrefix and 256 random bits in base64url) and the hash line to
// put in a principal's "keys": the key itself is shown once and stored nowhere.
func NewKey() (key, hash string) {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (Go 1.24)
	key = keyPrefix + base64.RawURLEncoding.EncodeToString(b)
	return key, HashKey(key)
}

// HashKey returns the stored form of key: "sha256:" and the hex SHA-256 of its bytes.
func HashKey(key string) string {
	sum := sha256.Sum256([]byte(key))
	return keyHashPrefix + hex.EncodeToString(sum[:])
}
