package sync

import (
	"context"
	"errors"
	"io"
	"net"
	"syscall"

	"github.com/redis/go-redis/v9"

	"github.com/hybridlimit/hybridlimit"
	"github.com/hybridlimit/hybridlimit/internal/scripts"
)

// classify returns the class of a failed call's error, one of
// hybridlimit.RedisErrorClasses. A Redis error reply
// is told by its type (go-redis marks it with a RedisError method), not by
// its text, so any reply counts whatever its prefix.
func classify(err error) hybridlimit.ErrorClass {
	var (
		reply redis.Error
		nerr  net.Error
		op    *net.OpError
	)
	switch {
	case errors.Is(err, scripts.ErrMalformedReply):
		return hybridlimit.ErrorMalformed
	case errors.As(err, &reply):
		return hybridlimit.ErrorReply
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, redis.ErrPoolTimeout), errors.Is(err, errNotDurable),
		errors.As(err, &nerr) && nerr.Timeout():
		return hybridlimit.ErrorTimeout
	case errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, net.ErrClosed),
		errors.Is(err, redis.ErrClosed), errors.As(err, &op):
		return hybridlimit.ErrorConnection
	}
	return hybridlimit.ErrorOther
}
