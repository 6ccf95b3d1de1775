package hybridlimit

import "fmt"

// ErrorClass sorts failures by what an operator would do about them, for
// metrics. Two kinds of failure are counted: a failed call to Redis, which
// the hybrid limiter counts (sync.Stats.Errors; docs/design.md 6.9 lists
// what falls in each class), and an error a limiter returned to a front
// end's rule (the rule statistics of httplimit, grpclimit). Each kind uses
// its own classes, listed by RedisErrorClasses and LimiterErrorClasses;
// ErrorOther serves both.
type ErrorClass uint8

const (
	// ErrorTimeout: Redis gave no reply in time (a deadline, a socket
	// timeout, too few replicas under sync.WithDurableSync).
	ErrorTimeout ErrorClass = iota
	// ErrorConnection: the connection to Redis was refused, reset, closed,
	// or had no route.
	ErrorConnection
	// ErrorReply: Redis answered an error: OOM, CLUSTERDOWN, READONLY,
	// BUSY, ...
	ErrorReply
	// ErrorMalformed: a reply not of the shape its script's header gives
	// (package lua).
	ErrorMalformed
	// ErrorUnavailable: a limiter could not reach Redis (ErrUnavailable).
	ErrorUnavailable
	// ErrorClosed: the limiter was closed.
	ErrorClosed
	// ErrorInvalid: the limiter rejected the key, limit or cost.
	ErrorInvalid
	// ErrorCanceled: the request's context ended during the decision.
	ErrorCanceled
	// ErrorOther: anything else (for a Redis call, a cancelled context
	// among them).
	ErrorOther
	// NumErrorClasses is the number of classes, for arrays indexed by them.
	NumErrorClasses
)

var errorClassNames = [NumErrorClasses]string{
	"timeout", "connection", "error_reply", "malformed_reply",
	"unavailable", "closed", "invalid", "canceled", "other",
}

// String returns the class's metrics label, such as "error_reply".
func (c ErrorClass) String() string {
	if c < NumErrorClasses {
		return errorClassNames[c]
	}
	return fmt.Sprintf("ErrorClass(%d)", int(c))
}

// RedisErrorClasses returns the classes of a failed call to Redis, in
// order: the ones sync.Stats.Errors counts.
func RedisErrorClasses() []ErrorClass {
	return []ErrorClass{ErrorTimeout, ErrorConnection, ErrorReply, ErrorMalformed, ErrorOther}
}

// LimiterErrorClasses returns the classes of an error a limiter returns to
// a rule, in order: the ones a rule's statistics count.
func LimiterErrorClasses() []ErrorClass {
	return []ErrorClass{ErrorUnavailable, ErrorClosed, ErrorInvalid, ErrorCanceled, ErrorOther}
}
