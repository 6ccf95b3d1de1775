package hybridlimit

import "context"

// Limiter decides: spend cost from key's quota under limit, or say why not.
// Every limiter of this module satisfies it: the hybrid limiter
// (*sync.Limiter), the exact ones (*global.Limiter, *sharding.Global) and
// rules.Local over a local table; the rules of the HTTP and gRPC front
// ends and the Envoy service decide through it.
//
// A Limiter returns an error only when it could not decide; the caller's
// FailurePolicy decides then. A denial is a Result with Allowed false.
//
// What a limiter can do beyond deciding, it says by the methods it has:
// Refunder, Charger, Peeker, Resetter, and Describer for what it is. Callers find
// them by interface assertion, so a custom limiter needs only AllowN.
type Limiter interface {
	AllowN(ctx context.Context, key string, limit Limit, cost int64) (Result, error)
}

// Refunder is a Limiter that can give back cost a decision took, for a
// request that did not go ahead (a later rule denied it).
type Refunder interface {
	Refund(ctx context.Context, key string, limit Limit, cost int64) error
}

// Charger is a Limiter that can spend a cost whatever the key holds, for
// usage known only after the fact (the tokens of a reply): what the key
// lacks becomes debt, repaid by refill before it admits again.
type Charger interface {
	Charge(ctx context.Context, key string, limit Limit, cost int64) (Result, error)
}

// Peeker is a Limiter that reports a key's state without spending, as a
// request of cost 1 would find it.
type Peeker interface {
	Peek(ctx context.Context, key string, limit Limit) (Result, error)
}

// Resetter is a Limiter that can forget a key: its next decision finds the
// full quota.
type Resetter interface {
	Reset(ctx context.Context, key string) error
}

// Describer is a Limiter that says what it is.
type Describer interface {
	Traits() Traits
}

// Traits is what a limiter says of itself, for logs, metrics and the
// RateLimit fields of the front ends. The zero value says nothing: a
// limiter of this module answers it only when it was not made by its
// constructor and cannot decide.
type Traits struct {
	// Kind names the limiter as logs and metrics label it: "hybrid",
	// "global" (the exact limiters) or "local".
	Kind string
	// Shape is how the limiter's quota comes back.
	Shape Shape
	// AsOfSync reports that the limiter's Results are as of its last sync
	// with Redis (the hybrid limiter), and that its Peek costs no Redis
	// call.
	AsOfSync bool
}

// Shape is how a limiter's quota comes back, which says how long until it
// does.
type Shape uint8

const (
	// ShapeUnknown: the limiter does not say.
	ShapeUnknown Shape = iota
	// ShapeTokens: a token bucket (or GCRA), a token at a time.
	ShapeTokens
	// ShapeFixedWindow: all of it at the end of a fixed window.
	ShapeFixedWindow
	// ShapeSliding: a sliding window or log, as requests age out.
	ShapeSliding
)
