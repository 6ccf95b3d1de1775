package httplimit

import "github.com/hybridlimit/hybridlimit/rules"

// Stats returns a snapshot of the counters: requests by fate (Admitted,
// Limited: 429, Unavailable: 503, Canceled), the CheckDuration histogram
// (how long each request's check of its rules took, in seconds), and per
// rule its Outcomes and Errors. Counters are read one by one
// while requests go on, so the snapshot is not atomic as a whole.
func (m *Middleware) Stats() rules.Stats { return m.eng.Stats() }
