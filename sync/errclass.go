package sync

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"

	"github.com/redis/go-redis/v9"

	"github.com/hybridlimit/hybridlimit/internal/scripts"
)

// ErrorClass sorts the failed calls to Redis that Stats.Errors counts by
// what an operator would do about them (docs/design.md 6.9 lists what
// falls in each).
type ErrorClass uint8

// The classes; NumErrorClasses sizes arrays indexed by them.
const (
	ErrorTimeout    ErrorClass = iota // no reply in time (a deadline, a socket timeout, too few replicas under WithDurableSync)
	ErrorConnection                   // refused, reset, closed, no route
	ErrorReply                        // Redis answered an error: OOM, CLUSTERDOWN, READONLY, BUSY, ...
	ErrorMalformed                    // a reply not of the shape its script's header gives (package lua)
	ErrorOther                        // anything else, a cancelled context among them
	NumErrorClasses
)

var errorClassNames = [NumErrorClasses]string{"timeout", "connection", "error_reply", "malformed_reply", "other"}

// String returns the class's metrics label, such as "error_reply".
func (c ErrorClass) String() string {
	if c < NumErrorClasses {
		return errorClassNames[c]
	}
	return fmt.Sprintf("ErrorClass(%d)", int(c))
}

// classify returns the class of a failed call's error. A Redis error reply
// is told by its type (go-redis marks it with a RedisError method), not by
// its text, so any reply counts whatever its prefix.
func classify(err error) ErrorClass {
	var (
		reply redis.Error
		nerr  net.Error
		op    *net.OpError
	)
	switch {
	case errors.Is(err, scripts.ErrMalformedReply):
		return ErrorMalformed
	case errors.As(err, &reply):
		return ErrorReply
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, redis.ErrPoolTimeout), errors.Is(err, errNotDurable),
		errors.As(err, &nerr) && nerr.Timeout():
		return ErrorTimeout
	case errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, net.ErrClosed),
		errors.Is(err, redis.ErrClosed), errors.As(err, &op):
		return ErrorConnection
	}
	return ErrorOther
}
