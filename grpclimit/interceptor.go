package grpclimit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/hybridlimit/hybridlimit/internal/ruleset"
	"github.com/hybridlimit/hybridlimit/internal/usage"
	"github.com/hybridlimit/hybridlimit/rules"
)

// A Rule is one quota policy of the interceptors: Limit per key, the key
// being what Key returns for the call (a KeyFunc, such as Method or
// Metadata). It is the gRPC instance of the rule all front ends share; see
// rules.Rule for its fields. A call an enforced rule denies fails with
// ResourceExhausted and a RetryInfo; one whose limit could not be checked
// (OnError FailClosed, or a limiter's own FailClosed policy) with
// Unavailable. rules.OutcomeMisconfigured is HTTP's alone (a route key where no
// route is known): an Interceptor never counts it.
type Rule = rules.Rule[*Call]

// Decision is the interceptor's verdict on one call.
type Decision struct {
	// Code is codes.OK when the call may proceed, codes.ResourceExhausted
	// when an enforced rule denied it (its limiter's fallback share
	// included), and codes.Unavailable when a FailClosed rule's limiter
	// failed, or a limiter's own FailClosed policy denied
	// (Result.FailedClosed).
	Code codes.Code
	// RetryAfter is how long the client should wait, as the RetryInfo
	// detail says: 0 when the call may proceed, or when no wait admits
	// it (a cost above the rule's burst).
	RetryAfter time.Duration
	// Policies are the rules the response metadata reports, tightest
	// first.
	Policies []rules.Policy
	// Violated names the enforced rule that denied the call.
	Violated []string
}

// Interceptor enforces a list of rules on gRPC calls: Unary and Stream
// return the server interceptors. It holds no goroutine and is safe for
// concurrent use.
type Interceptor struct {
	eng *ruleset.Engine[*Call]
	cfg config
}

// New returns an Interceptor enforcing rules, in the given order. It
// rejects invalid rules with an error naming the rule and field and
// wrapping rules.ErrInvalidRule.
func New(rules []Rule, opts ...Option) (*Interceptor, error) {
	cfg := config{logger: slog.New(slog.DiscardHandler), headers: true}
	for _, o := range opts {
		if o == nil {
			return nil, errors.New("grpclimit: nil option")
		}
		if err := o.apply(&cfg); err != nil {
			return nil, err
		}
	}
	eng, err := ruleset.New(rules, cfg.logger.With("component", "grpclimit"), func(c *Call) string { return c.FullMethod })
	if err != nil {
		return nil, fmt.Errorf("grpclimit: %w", err)
	}
	return &Interceptor{eng: eng, cfg: cfg}, nil
}

// Reload replaces the rules atomically, as httplimit.Middleware.Reload
// does: limiters keep their state, rules that keep their name their
// counters, and invalid rules change nothing.
func (i *Interceptor) Reload(rules []Rule) error {
	if err := i.eng.Reload(rules); err != nil {
		return fmt.Errorf("grpclimit: %w", err)
	}
	return nil
}

// Reset forgets key under the named rule, as httplimit.Middleware.Reset
// does; key is what the rule's KeyFunc returns (for MetadataDigest, the
// digest: see ResetCall).
func (i *Interceptor) Reset(ctx context.Context, rule, key string) error {
	if err := i.eng.Reset(ctx, rule, key); err != nil {
		return fmt.Errorf("grpclimit: reset: %w", err)
	}
	return nil
}

// ResetCall forgets the key the named rule finds in c, such as an API key
// in its metadata.
func (i *Interceptor) ResetCall(ctx context.Context, rule string, c *Call) error {
	key, ok, err := i.eng.KeyOf(rule, c)
	switch {
	case err != nil:
		return fmt.Errorf("grpclimit: reset: %w", err)
	case !ok:
		return fmt.Errorf("grpclimit: reset: rule %q finds no key in the call", rule)
	}
	return i.Reset(ctx, rule, key)
}

// Stats returns a snapshot of the counters.
func (i *Interceptor) Stats() rules.Stats { return i.eng.Stats() }

// Check evaluates the rules for c and returns the verdict, as the
// interceptors do, without answering anything. It returns an error only
// when c's context ends during a decision, or for a nil c or c.Ctx.
func (i *Interceptor) Check(c *Call) (Decision, error) {
	if c == nil || c.Ctx == nil {
		return Decision{}, errors.New("grpclimit: nil call or context")
	}
	d, _, err := i.check(c)
	return d, err
}

// check is Check, and also returns what the rules that settle their cost
// spent, for the interceptors to settle.
func (i *Interceptor) check(c *Call) (Decision, *usage.Tab, error) {
	d, err := i.eng.Check(c.Ctx, c, ruleset.Options[*Call]{AllPolicies: i.cfg.reportAll})
	if err != nil {
		return Decision{}, nil, err
	}
	out := Decision{Code: codes.OK, RetryAfter: d.RetryAfter, Policies: d.Policies, Violated: d.Violated}
	switch d.Verdict {
	case ruleset.Limited:
		out.Code = codes.ResourceExhausted
	case ruleset.Unavailable:
		out.Code = codes.Unavailable
	}
	return out, d.Tab, nil
}

// Unary returns the unary server interceptor.
func (i *Interceptor) Unary() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		c := &Call{Ctx: ctx, FullMethod: info.FullMethod}
		d, tab, err := i.check(c)
		if err != nil {
			return nil, status.FromContextError(err).Err()
		}
		if md := i.header(&d); md != nil {
			_ = grpc.SetHeader(ctx, md) // fails only for a call whose headers went out, which is none yet
		}
		if err := i.verdict(c, &d); err != nil {
			return nil, err
		}
		if tab == nil {
			return handler(ctx, req)
		}
		// A rule settles its cost: the handler reports it in ctx
		// (rules.ReportCost), and it is settled once the handler returns.
		defer i.eng.Settle(ctx, tab)
		return handler(usage.With(ctx, tab), req)
	}
}

// Stream returns the stream server interceptor: a stream is checked once,
// when it opens, at the cost of one call.
func (i *Interceptor) Stream() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		c := &Call{Ctx: ss.Context(), FullMethod: info.FullMethod, Stream: true}
		d, tab, err := i.check(c)
		if err != nil {
			return status.FromContextError(err).Err()
		}
		if md := i.header(&d); md != nil {
			_ = ss.SetHeader(md)
		}
		if err := i.verdict(c, &d); err != nil {
			return err
		}
		if tab == nil {
			return handler(srv, ss)
		}
		defer i.eng.Settle(c.Ctx, tab)
		return handler(srv, settledStream{ss, usage.With(c.Ctx, tab)})
	}
}

// settledStream is a stream whose context carries what its call spent
// under rules that settle their cost, for the handler to report against.
type settledStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s settledStream) Context() context.Context { return s.ctx }

// verdict returns the status error of a rejected call, nil for an admitted
// one.
func (i *Interceptor) verdict(c *Call, d *Decision) error {
	switch d.Code {
	case codes.OK:
		return nil
	case codes.ResourceExhausted:
		if i.cfg.onLimited != nil {
			return i.cfg.onLimited(c, d)
		}
	default:
		if i.cfg.onError != nil {
			return i.cfg.onError(c, d)
		}
	}
	return Status(d).Err()
}

// Status returns the status of a rejected call as the interceptors send
// it: d's code, a message naming the violated policy, a RetryInfo detail
// when a wait admits the call, and for a denial a QuotaFailure with one
// violation per violated policy. An OnLimited hook may start from it.
func Status(d *Decision) *status.Status {
	var msg string
	switch d.Code {
	case codes.OK:
		return status.New(codes.OK, "")
	case codes.ResourceExhausted:
		q := make([]string, len(d.Violated))
		for i, n := range d.Violated {
			q[i] = strconv.Quote(n)
		}
		msg = "grpclimit: quota exceeded for policy " + strings.Join(q, ", ")
	default:
		msg = "grpclimit: rate limits could not be checked; try again later"
	}
	var details []protoadapt.MessageV1
	if d.RetryAfter > 0 {
		details = append(details, &errdetails.RetryInfo{RetryDelay: durationpb.New(d.RetryAfter)})
	}
	if d.Code == codes.ResourceExhausted && len(d.Violated) > 0 {
		qf := &errdetails.QuotaFailure{}
		for _, n := range d.Violated {
			qf.Violations = append(qf.Violations, &errdetails.QuotaFailure_Violation{Subject: n, Description: "policy " + strconv.Quote(n) + " is exhausted"})
		}
		details = append(details, qf)
	}
	st := status.New(d.Code, msg)
	if len(details) > 0 {
		if withDetails, err := st.WithDetails(details...); err == nil {
			st = withDetails
		}
	}
	return st
}

// header returns the response metadata of d: the RateLimit-Policy and
// RateLimit field values under the keys "ratelimit-policy" and "ratelimit",
// or nil when there is nothing to report or WithHeaders(false).
func (i *Interceptor) header(d *Decision) metadata.MD {
	if !i.cfg.headers || len(d.Policies) == 0 {
		return nil
	}
	policy, state := ruleset.Fields(d.Policies)
	return metadata.Pairs("ratelimit-policy", policy, "ratelimit", state)
}
