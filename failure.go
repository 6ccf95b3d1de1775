package hybridlimit

import "fmt"

// FailurePolicy says what a decision does when its limit cannot be checked:
// Redis unreachable or too slow for the hybrid limiter (sync.WithFailurePolicy)
// and the Envoy service (rls), or a limiter that returned an error instead
// of a decision for a rule of the HTTP and gRPC front ends (Rule.OnError).
// Front ends render a denial by FailClosed as their own kind of outage:
// HTTP 503 and gRPC Unavailable for httplimit and grpclimit, OVER_LIMIT for
// the Envoy service.
type FailurePolicy uint8

const (
	// FallbackLocal (the zero value, and the default everywhere) enforces on
	// each instance its share of the limit among the live instances, from
	// what it last heard of the key; Redis takes what was admitted once it
	// answers. For a rule, whose limiter has already applied its own
	// policy, it lets through what the limiter still could not decide, as
	// FailOpen does.
	FallbackLocal FailurePolicy = iota
	// FailOpen admits.
	FailOpen
	// FailClosed denies, as an outage rather than a limit's denial.
	FailClosed
	// FailError decides nothing and answers with an error: the Envoy
	// service returns gRPC UNAVAILABLE for Envoy's failure_mode_deny to
	// decide. Only the Envoy service accepts it.
	FailError
	// NumFailurePolicies is the number of policies.
	NumFailurePolicies
)

var failurePolicyNames = [NumFailurePolicies]string{"fallback-local", "fail-open", "fail-closed", "error"}

// String returns the policy's name as configuration and logs spell it, such
// as "fallback-local".
func (p FailurePolicy) String() string {
	if p < NumFailurePolicies {
		return failurePolicyNames[p]
	}
	return fmt.Sprintf("FailurePolicy(%d)", int(p))
}
