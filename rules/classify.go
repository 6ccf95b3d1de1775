package rules

import (
	"context"
	"errors"

	hlsync "github.com/hybridlimit/hybridlimit/sync"

	"github.com/hybridlimit/hybridlimit"
)

// Classify returns the class of a limiter's error, one of
// hybridlimit.LimiterErrorClasses.
func Classify(err error) hybridlimit.ErrorClass {
	switch {
	case errors.Is(err, hybridlimit.ErrUnavailable):
		return hybridlimit.ErrorUnavailable
	case errors.Is(err, hlsync.ErrClosed):
		return hybridlimit.ErrorClosed
	case errors.Is(err, hybridlimit.ErrInvalidKey), errors.Is(err, hybridlimit.ErrInvalidLimit),
		errors.Is(err, hybridlimit.ErrInvalidCost), errors.Is(err, hybridlimit.ErrCostExceedsBurst):
		return hybridlimit.ErrorInvalid
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return hybridlimit.ErrorCanceled
	}
	return hybridlimit.ErrorOther
}
