package handlers

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// TrustedProxies is LEASEGATE_TRUSTED_PROXIES: the peers whose X-Forwarded-For (or Forwarded)
// header is believed about who the client is, for the failed-authentication throttle and the
// access log. Empty: every request's client is its peer, and those headers are ignored (anyone
// can send them).
type TrustedProxies []netip.Prefix

// ParseTrustedProxies reads a comma-separated list of CIDR prefixes; a bare address stands for
// itself alone (/32 or /128).
func ParseTrustedProxies(s string) (TrustedProxies, error) {
	var tp TrustedProxies
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		if p, err := netip.ParsePrefix(part); err == nil {
			tp = append(tp, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(part)
		if err != nil {
			return nil, fmt.Errorf("%q is neither a CIDR prefix (10.0.0.0/8, fd00::/8) nor an address", part)
		}
		tp = append(tp, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
	}
	return tp, nil
}

func (tp TrustedProxies) trusts(a netip.Addr) bool {
	a = a.Unmap()
	for _, p := range tp {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// client returns who sent r: its peer's address; or, when the peer is a trusted proxy, the
// nearest address the proxies forwarded that is not a trusted proxy itself (X-Forwarded-For,
// walked from the right, as each proxy appends the address it got the request from; without one,
// Forwarded's for= likewise). A forwarded value that is no address ends the walk there: what lies
// left of it is the client's to write. ok is false when even the peer's address is unreadable.
func (tp TrustedProxies) client(r *http.Request) (addr netip.Addr, ok bool) {
	peer, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return netip.Addr{}, false
	}
	addr = peer.Addr().Unmap()
	if len(tp) == 0 || !tp.trusts(addr) {
		return addr, true
	}
	hops := forwardedFor(r.Header.Values("X-Forwarded-For"), xffHop)
	if len(hops) == 0 {
		hops = forwardedFor(r.Header.Values("Forwarded"), forwardedHop)
	}
	for i := len(hops) - 1; i >= 0; i-- {
		a, err := netip.ParseAddr(hops[i])
		if err != nil {
			return addr, true
		}
		addr = a.Unmap()
		if !tp.trusts(addr) {
			return addr, true
		}
	}
	return addr, true
}

// forwardedFor lists the hops of every header line in order, each read by hop ("" when a
// hop names no address; it still counts).
func forwardedFor(lines []string, hop func(string) string) []string {
	var out []string
	for _, line := range lines {
		for _, h := range strings.Split(line, ",") {
			out = append(out, hop(strings.TrimSpace(h)))
		}
	}
	return out
}

// xffHop is one X-Forwarded-For element: an address, perhaps in brackets or with a port.
func xffHop(h string) string { return bareHost(h) }

// forwardedHop is the address of one Forwarded element's for= parameter (RFC 7239), or "".
func forwardedHop(h string) string {
	for _, pair := range strings.Split(h, ";") {
		k, v, ok := strings.Cut(strings.TrimSpace(pair), "=")
		if ok && strings.EqualFold(k, "for") {
			return bareHost(strings.Trim(v, `"`))
		}
	}
	return ""
}

// bareHost strips a port and IPv6 brackets: "[2001:db8::1]:4711" → "2001:db8::1".
func bareHost(h string) string {
	if host, _, err := net.SplitHostPort(h); err == nil {
		return host
	}
	return strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")
}

// throttleKey is what the failed-authentication throttle counts an address by: an IPv4 address
// alone, an IPv6 address by its /64 (one host's or one site's usual share: an attacker holding a
// /64 has more addresses than any table could keep).
func throttleKey(a netip.Addr) string {
	if a.Is4() {
		return a.String()
	}
	p, _ := a.Prefix(64)
	return p.String()
}
