package sync

import "github.com/hybridlimit/hybridlimit"

// Traits says what the Limiter is: the hybrid limiter, a token bucket whose
// Results are as of its last sync with Redis.
func (l *Limiter) Traits() hybridlimit.Traits {
	return hybridlimit.Traits{Kind: "hybrid", Shape: hybridlimit.ShapeTokens, AsOfSync: true}
}
