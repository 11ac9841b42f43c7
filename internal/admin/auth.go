package admin

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"strings"
)

// authorize wraps h so that every request must carry the token (Options.Token): as "Authorization: Bearer
// <token>", or as the password of HTTP basic auth with any user name (what a browser prompts for). /metrics
// passes without it when Options.MetricsPublic is set. Without a token every request passes.
//
// Tokens are compared as SHA-256 digests in constant time, so neither the content nor the length of the token
// leaks through response timing.
func (s *Server) authorize(h http.Handler) http.Handler {
	if s.o.Token == "" {
		return h
	}
	want := sha256.Sum256([]byte(s.o.Token))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.o.MetricsPublic && r.URL.Path == "/metrics" {
			h.ServeHTTP(w, r)
			return
		}
		if got, ok := credential(r); ok {
			sum := sha256.Sum256([]byte(got))
			if subtle.ConstantTimeCompare(sum[:], want[:]) == 1 {
				h.ServeHTTP(w, r)
				return
			}
		}
		// Basic first: browsers prompt for the first challenge they support.
		w.Header().Add("WWW-Authenticate", `Basic realm="keyway admin", charset="UTF-8"`)
		w.Header().Add("WWW-Authenticate", `Bearer realm="keyway admin"`)
		http.Error(w, "401 unauthorized: send the [admin] token as \"Authorization: Bearer <token>\" or as the basic-auth password", http.StatusUnauthorized)
	})
}

// credential is the token a request offers: a bearer token, or a basic-auth password.
func credential(r *http.Request) (string, bool) {
	if _, pw, ok := r.BasicAuth(); ok {
		return pw, true
	}
	h := r.Header.Get("Authorization")
	if scheme, tok, ok := strings.Cut(h, " "); ok && strings.EqualFold(scheme, "Bearer") {
		return strings.TrimSpace(tok), true
	}
	return "", false
}
