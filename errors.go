package hybridlimit

import "errors"

// Errors shared by every limiter. Limiters wrap them with detail; branch on
// them with errors.Is.
var (
	// ErrInvalidCost means a cost below 1.
	ErrInvalidCost = errors.New("hybridlimit: cost must be at least 1")
	// ErrCostExceedsBurst means a cost that no bucket of this limit could
	// ever hold, so waiting would never help.
	ErrCostExceedsBurst = errors.New("hybridlimit: cost exceeds burst")
	// ErrInvalidKey means an empty key or a key longer than MaxKeyLen.
	ErrInvalidKey = errors.New("hybridlimit: invalid key")
	// ErrNilClient means a limiter was built without a Redis client.
	ErrNilClient = errors.New("hybridlimit: nil Redis client")
	// ErrUnavailable means the limiter could not reach a decision (Redis
	// unreachable, timed out, or the breaker open) and its failure policy
	// is to report that rather than decide.
	ErrUnavailable = errors.New("hybridlimit: limiter unavailable")
)
