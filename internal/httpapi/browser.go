package httpapi

import (
	"mime"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/strata-mesh/strata/api"
	"github.com/strata-mesh/strata/internal/httpjson"
	"github.com/strata-mesh/strata/mesh/dataplane"
)

// Why a request was refused before it reached a route, as the reason
// label of strata_api_requests_refused_total.
const (
	// RefusedHost: the Host header names a host this agent does not
	// answer to (DNS rebinding).
	RefusedHost = "host"
	// RefusedOrigin: a write from a browser page of another origin (CSRF).
	RefusedOrigin = "origin"
	// RefusedContentType: a write from a browser with a body a page of
	// any origin can send without asking (a form, text/plain).
	RefusedContentType = "content_type"
)

// hostPolicy is the set of Host header values the API answers to.
type hostPolicy struct {
	// bound is the IP the API listens on; invalid when unknown.
	bound netip.Addr
	// anyIP: bound to every interface, so every IP literal names this host.
	anyIP bool
	// allowed are Config.AllowedHosts, canonical (lower case, no port).
	allowed map[string]bool
}

func newHostPolicy(addr func() string, allowed []string) hostPolicy {
	p := hostPolicy{allowed: map[string]bool{}}
	if addr != nil {
		if host, _, err := net.SplitHostPort(addr()); err == nil {
			if ip, err := netip.ParseAddr(host); err == nil {
				p.bound = ip.Unmap().WithZone("")
				p.anyIP = ip.IsUnspecified()
			}
		}
	}
	for _, h := range allowed {
		p.allowed[canonicalHost(h)] = true
	}
	return p
}

// canonicalHost is the host of a Host header or an allowed_hosts entry:
// lower case, without port, brackets or a trailing dot; an IP literal in
// its standard form.
func canonicalHost(hostport string) string {
	h := hostport
	if host, _, err := net.SplitHostPort(hostport); err == nil {
		h = host
	}
	h = strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")
	h = strings.ToLower(strings.TrimSuffix(h, "."))
	if ip, err := netip.ParseAddr(h); err == nil {
		return ip.Unmap().WithZone("").String()
	}
	return h
}

// allows reports whether a request with this Host header is for this
// agent: localhost and loopback IPs, the address the API is bound to
// (every IP literal when it is bound to all interfaces), and the allowed
// hosts. A request without a Host (HTTP/1.0) does not come from a browser
// and is let through.
func (p hostPolicy) allows(hostport string) bool {
	if hostport == "" {
		return true
	}
	h := canonicalHost(hostport)
	if h == "localhost" || p.allowed[h] {
		return true
	}
	ip, err := netip.ParseAddr(h)
	if err != nil {
		return false
	}
	return ip.IsLoopback() || p.anyIP || ip == p.bound
}

// guard refuses, in front of every route and before any token check, the
// requests a browser can be made to send on a page's behalf:
//   - any request whose Host is not one this agent answers to (421): a
//     page whose DNS name was pointed at this host (DNS rebinding) is
//     same-origin with itself, and would otherwise read and write here;
//   - a write (any method but GET, HEAD and OPTIONS) with an Origin that
//     is not this API's own, or with Sec-Fetch-Site cross-site or
//     same-site (403): a page of another origin (CSRF);
//   - a write with a body from a browser (Origin or Sec-Fetch-* present)
//     whose Content-Type is not JSON, YAML or octet-stream and that lacks
//     the Strata-Client header (415): the bodies a page of any origin can
//     send without a CORS preflight (text/plain, forms, multipart).
//
// Clients that are not browsers (the CLI, curl, other agents) send no
// Origin and are not refused for their Content-Type: curl -d sends
// application/x-www-form-urlencoded. The API never sends CORS headers, so
// a page of another origin cannot read its answers either.
func (s *Server) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Only the data plane names an authenticated peer; a client of
		// this API that names one is not one.
		r.Header.Del(dataplane.HeaderPeer)
		if !s.hosts.allows(r.Host) {
			s.refuse(RefusedHost)
			h := canonicalHost(r.Host)
			httpjson.Error(w, http.StatusMisdirectedRequest, "", "this agent does not answer to host %q: a web page can point a DNS name it controls at this host (DNS rebinding). "+
				"Use 127.0.0.1 or localhost, an IP address of the host the API is bound to, or add %q to api_allowed_hosts in the agent's config", h, h)
			return
		}
		if safeMethod(r.Method) {
			next.ServeHTTP(w, r)
			return
		}
		if o := r.Header.Get("Origin"); o != "" && !sameOrigin(o, r.Host) {
			s.refuse(RefusedOrigin)
			httpjson.Error(w, http.StatusForbidden, "", "%s %s from a web page of origin %q refused: this API takes writes from its own pages (origin http://%s) and from clients that are not browsers",
				r.Method, r.URL.Path, o, r.Host)
			return
		}
		if site := r.Header.Get("Sec-Fetch-Site"); site == "cross-site" || site == "same-site" {
			s.refuse(RefusedOrigin)
			httpjson.Error(w, http.StatusForbidden, "", "%s %s from a %s web page refused: this API takes writes from its own pages and from clients that are not browsers",
				r.Method, r.URL.Path, site)
			return
		}
		if r.ContentLength != 0 && fromBrowser(r) && r.Header.Get(api.HeaderClient) == "" && !apiContentType(r.Header.Get("Content-Type")) {
			s.refuse(RefusedContentType)
			httpjson.Error(w, http.StatusUnsupportedMediaType, "", "%s %s from a browser with Content-Type %q refused: send application/json, application/yaml or application/octet-stream",
				r.Method, r.URL.Path, r.Header.Get("Content-Type"))
			return
		}
		next.ServeHTTP(w, r)
	})
}

func (s *Server) refuse(reason string) {
	if s.refused != nil {
		s.refused.WithLabelValues(reason).Inc()
	}
}

// newRefusedCounter makes strata_api_requests_refused_total, registered
// with reg when it is not nil.
func newRefusedCounter(reg prometheus.Registerer) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "strata_api_requests_refused_total",
		Help: "API requests refused before any route: for a Host this agent does not answer to (reason host: DNS rebinding), a write from a browser page of another origin (origin), or a browser's write with a form or text body (content_type).",
	}, []string{"reason"})
	for _, r := range []string{RefusedHost, RefusedOrigin, RefusedContentType} {
		c.WithLabelValues(r)
	}
	if reg != nil {
		reg.MustRegister(c)
	}
	return c
}

func safeMethod(m string) bool {
	return m == http.MethodGet || m == http.MethodHead || m == http.MethodOptions
}

// sameOrigin says whether the Origin header names the host and port the
// request was sent to. The scheme is not compared: behind a proxy that
// ends TLS the page is https and the request it forwards is not, and no
// other origin can serve pages from this host and port.
func sameOrigin(origin, host string) bool {
	u, err := url.Parse(origin)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Path != "" {
		return false // "null" included: sandboxed frames, file: pages
	}
	return canonicalHostPort(u.Host) == canonicalHostPort(host)
}

// canonicalHostPort is canonicalHost with the port kept.
func canonicalHostPort(hostport string) string {
	if _, port, err := net.SplitHostPort(hostport); err == nil {
		return net.JoinHostPort(canonicalHost(hostport), port)
	}
	return canonicalHost(hostport)
}

// fromBrowser says whether a request carries the headers only browsers
// send.
func fromBrowser(r *http.Request) bool {
	return r.Header.Get("Origin") != "" || r.Header.Get("Sec-Fetch-Site") != "" || r.Header.Get("Sec-Fetch-Mode") != ""
}

// apiContentType says whether a body's Content-Type is one the API reads
// (JSON, YAML, raw bytes): a browser sends one of these only from a page
// of this origin, or after a CORS preflight that the API never grants.
func apiContentType(ct string) bool {
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return false
	}
	switch mt {
	case "application/json", "application/yaml", "application/x-yaml", "text/yaml", "text/x-yaml", "application/octet-stream":
		return true
	}
	return strings.HasSuffix(mt, "+json") || strings.HasSuffix(mt, "+yaml")
}
