package harness

import "strings"

// Token surgery for tests of token verification. A token is
// base64url(JSON payload) "." base64url(HMAC-SHA256 of the payload).

// AlterSignature changes the first signature character, whose 6 bits all carry signature data.
func AlterSignature(token string) string {
	p, sig, _ := strings.Cut(token, ".")
	c := byte('A')
	if sig[0] == 'A' {
		c = 'B'
	}
	return p + "." + string(c) + sig[1:]
}

// NoncanonicalSignature sets the unused low bits of the signature's last character: 32 bytes
// take 43 base64 characters, whose last carries 4 bits of data and 2 bits that must be zero. The
// decoded bytes stay the same, so only a strict decoder rejects it.
func NoncanonicalSignature(token string) string {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	p, sig, _ := strings.Cut(token, ".")
	last := strings.IndexByte(alphabet, sig[len(sig)-1])
	return p + "." + sig[:len(sig)-1] + string(alphabet[last|1])
}
