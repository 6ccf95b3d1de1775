package httplimit

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"
)

// Problem types of draft-ietf-httpapi-ratelimit-headers, registered with IANA.
const (
	ProblemQuotaExceeded            = "https://iana.org/assignments/http-problem-types#quota-exceeded"
	ProblemTemporaryReducedCapacity = "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity"
)

type problemKind int

const (
	quotaExceeded problemKind = iota
	reducedCapacity
)

// problem is an RFC 9457 problem details object.
type problem struct {
	Type     string   `json:"type"`
	Title    string   `json:"title"`
	Status   int      `json:"status"`
	Detail   string   `json:"detail,omitempty"`
	Violated []string `json:"violated-policies,omitempty"`
}

// writeProblem answers with status, Retry-After (when retry > 0) and a
// problem+json body. A rejection is never stored by caches (RFC 6585 s4).
func writeProblem(w http.ResponseWriter, status int, retry time.Duration, kind problemKind, detail string, violated []string) {
	p := problem{Status: status, Detail: detail, Violated: violated}
	switch kind {
	case quotaExceeded:
		p.Type, p.Title = ProblemQuotaExceeded, "Request cannot be satisfied as assigned quota has been exceeded"
	default:
		p.Type, p.Title = ProblemTemporaryReducedCapacity, "Request cannot be satisfied due to temporarily reduced capacity"
	}
	body, _ := json.Marshal(p) // strings and ints only: cannot fail
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Length", strconv.Itoa(len(body)+1))
	if retry > 0 {
		h.Set(HeaderRetryAfter, strconv.FormatInt(retrySeconds(retry), 10))
	}
	w.WriteHeader(status)
	_, _ = w.Write(append(body, '\n'))
}
