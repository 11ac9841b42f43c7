package admin

import (
	"net/http"
)

// Part is one part of keyway in /readyz: a door, the store, a backend group.
type Part struct {
	Name  string `json:"name"`  // e.g. "memcache door", "store", "group main"
	Ready bool   `json:"ready"` // the part does its job now
	State string `json:"state"` // what it is doing, e.g. "listening on 127.0.0.1:11211", "down: connection refused"
}

// Readiness is the body of /readyz.
type Readiness struct {
	Ready bool   `json:"ready"` // every part is ready
	Parts []Part `json:"parts"`
}

// healthz answers 200 while the process serves HTTP: liveness, nothing more.
func (s *Server) healthz(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write([]byte("ok\n"))
}

// readyz answers 200 when every part Options.Ready reports is ready, 503 otherwise, with each part's state.
func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	rd := Readiness{Ready: true, Parts: []Part{}}
	if s.o.Ready != nil {
		rd.Parts = append(rd.Parts, s.o.Ready()...)
	}
	for _, p := range rd.Parts {
		rd.Ready = rd.Ready && p.Ready
	}
	w.Header().Set("Cache-Control", "no-store")
	if !rd.Ready {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	s.writeJSON(w, rd)
}
