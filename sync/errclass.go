package sync

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"

	"github.com/redis/go-redis/v9"

	"github.com/hybridlimit/hybridlimit/lua"
)

// ErrorClass sorts the failed calls to Redis that Stats.Errors counts, by
// what a operator would do about them.
type ErrorClass uint8

const (
	// ErrorTimeout: no reply in time. The round timeout or another context
	// deadline passed, a socket read or write timed out, no pooled
	// connection freed up in time, or too few replicas acknowledged a
	// durable sync in time (ErrNotDurable). A refused connection shows as a timeout
	// too when the client is still retrying the dial at the deadline
	// (go-redis tries 5 times, some 0.4s in all).
	ErrorTimeout ErrorClass = iota
	// ErrorConnection: the connection failed. Refused, reset, closed
	// mid-reply, no route, or the client was closed.
	ErrorConnection
	// ErrorReply: Redis answered with an error, such as OOM, NOSCRIPT even
	// after the EVAL retry, CLUSTERDOWN, READONLY, BUSY, or MOVED or ASK
	// once the client's redirects ran out.
	ErrorReply
	// ErrorMalformed: Redis answered, but not in the shape the script
	// returns (lua.ErrMalformedReply).
	ErrorMalformed
	// ErrorOther: anything else, a cancelled context among them.
	ErrorOther
	// NumErrorClasses is the number of classes, for arrays indexed by them.
	NumErrorClasses
)

var errorClassNames = [NumErrorClasses]string{"timeout", "connection", "error_reply", "malformed_reply", "other"}

// String returns the class's name as metrics label it, such as "error_reply".
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
	case errors.Is(err, lua.ErrMalformedReply):
		return ErrorMalformed
	case errors.As(err, &reply):
		return ErrorReply
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, redis.ErrPoolTimeout), errors.Is(err, ErrNotDurable),
		errors.As(err, &nerr) && nerr.Timeout():
		return ErrorTimeout
	case errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, net.ErrClosed),
		errors.Is(err, redis.ErrClosed), errors.As(err, &op):
		return ErrorConnection
	}
	return ErrorOther
}
