package rules

import (
	"context"

	"github.com/hybridlimit/hybridlimit/internal/usage"
)

// Errors of ReportCost.
var (
	// ErrNotSettled: no rule of the name that settles its cost (Settle)
	// admitted the request ctx belongs to, or the request was not checked
	// by a front end's handler.
	ErrNotSettled = usage.ErrNoRule
	// ErrSettled: the handler had returned and the request was settled; a
	// report from a goroutine it left behind comes too late.
	ErrSettled = usage.ErrSettled
)

// ReportCost reports the actual cost of the request ctx belongs to under
// the rule named rule, one with Settle: once the handler returns, what
// the request used beyond what the rule spent for it is charged, and what
// it did not use is given back. A later report replaces an earlier one.
// Call it from the handler, with the request's context (r.Context() over
// HTTP, the call's context over gRPC). A negative cost is refused with
// hybridlimit.ErrInvalidCost.
func ReportCost(ctx context.Context, rule string, cost int64) error {
	return usage.Report(ctx, rule, cost)
}
