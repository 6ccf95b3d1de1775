package main_test

import (
	"context"
	"maps"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	rlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typepb "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/hybridlimit/hybridlimit/internal/redistest"
)

const basicYAML = `domain: basic
descriptors:
  - key: key1
    rate_limit:
      unit: minute
      requests_per_unit: 20
  - key: key2
    value: "*"
    share_threshold: true
    rate_limit:
      unit: hour
      requests_per_unit: 5
  - key: path
    value: /api/*
    rate_limit:
      unit: hour
      requests_per_unit: 3
  - key: path
    value: /api/v2/*
    rate_limit:
      unit: hour
      requests_per_unit: 100
  - key: unlimited
    rate_limit:
      unlimited: true
  - key: zero
    rate_limit:
      unit: second
      requests_per_unit: 0
  - key: shadow
    shadow_mode: true
    rate_limit:
      unit: hour
      requests_per_unit: 1
  - key: client
    descriptors:
      - key: route
        rate_limit:
          name: per_route
          unit: hour
          requests_per_unit: 2
      - key: tier
        rate_limit:
          unit: hour
          requests_per_unit: 1
          replaces:
            - name: per_route
`

// env is the environment of a service on the shared Redis under its own
// key prefix.
func env(t *testing.T, root string, extra ...string) map[string]string {
	s := redistest.StandaloneServer(t)
	e := map[string]string{
		"REDIS_URL": s.Addr, "RUNTIME_ROOT": root, "CACHE_KEY_PREFIX": redistest.Prefix(t),
		"HYBRIDLIMIT_CONFIG_POLL_INTERVAL": "0", "LOG_FORMAT": "json",
		// The sequences these tests check are Redis's answers: under -race
		// on a loaded machine a fetch can outlast the default 10ms, and the
		// failure policy, not Redis, would answer. The failure tests set
		// the default back.
		"HYBRIDLIMIT_MAX_WAIT": "2s",
	}
	for i := 0; i+1 < len(extra); i += 2 {
		e[extra[i]] = extra[i+1]
	}
	return e
}

var modes = []string{"hybrid", "fixed_window"}

// awayFromEdge waits, in fixed-window mode, until the current window of
// unit seconds has at least need seconds left, so that a sequence of
// calls stays in one window.
func awayFromEdge(t *testing.T, mode string, unit, need int64) {
	if mode != "fixed_window" {
		return
	}
	if left := unit - time.Now().Unix()%unit; left < need {
		t.Logf("waiting %ds for the next window", left)
		time.Sleep(time.Duration(left)*time.Second + 50*time.Millisecond)
	}
}

// TestTwentyPerMinute is the reference's own acceptance sequence: a rule
// of 20 a minute answers limit_remaining 19, 18, ... 0, then OVER_LIMIT on
// the 21st call, in both modes; every key written has a TTL.
func TestTwentyPerMinute(t *testing.T) {
	redistest.NoLeaks(t)
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			e := env(t, runtimeDir(t, map[string]string{"basic.yaml": basicYAML}), "HYBRIDLIMIT_MODE", mode)
			p := start(t, rlsBinary(t), e)
			awayFromEdge(t, mode, 60, 10)
			start := time.Now()
			for i := 1; i <= 22; i++ {
				before := time.Now().Unix()
				r := p.mustCall(request("basic", 0, entries("key1", "foo")))
				after := time.Now().Unix()
				st := r.Statuses[0]
				want, code := uint32(max(20-i, 0)), rlspb.RateLimitResponse_OK
				if i > 20 {
					code = rlspb.RateLimitResponse_OVER_LIMIT
				}
				if r.OverallCode != code || st.Code != code || st.LimitRemaining != want ||
					st.CurrentLimit.GetRequestsPerUnit() != 20 || st.CurrentLimit.GetUnit() != rlspb.RateLimitResponse_RateLimit_MINUTE {
					t.Fatalf("call %d: %v %s, want %v remaining %d", i, r.OverallCode, statusOf(st), code, want)
				}
				reset := st.DurationUntilReset.AsDuration()
				switch mode {
				case "fixed_window":
					if lo, hi := 60-after%60, 60-before%60; reset < time.Duration(lo)*time.Second || reset > time.Duration(hi)*time.Second {
						t.Fatalf("call %d: duration_until_reset %v, want the window's end, %d to %ds", i, reset, lo, hi)
					}
				default:
					// A token every 3 s: the bucket is full again after
					// 3 s per token spent, less the time since.
					full := time.Duration(20-want) * 3 * time.Second
					if i <= 20 && (reset > full || reset < full-time.Since(start)-time.Second) {
						t.Fatalf("call %d: duration_until_reset %v, want about %v", i, reset, full)
					}
					if i > 20 && (reset < time.Second || reset > 3*time.Second) {
						t.Fatalf("call %d: duration_until_reset %v, want the next token's 1-3s", i, reset)
					}
				}
			}
			c := redistest.Standalone(t)
			if noTTL, seen := redistest.KeysWithoutTTL(t, c, e["CACHE_KEY_PREFIX"]); len(noTTL) > 0 || seen == 0 {
				t.Fatalf("keys without TTL %v of %d", noTTL, seen)
			}
		})
	}
}

// TestMatching covers the rules' semantics through the gRPC API: several
// descriptors in one request, wildcards (first declared wins),
// share_threshold, unlimited, requests_per_unit 0, shadow_mode, replaces,
// hits_addend and its per-descriptor override, limit overrides, unknown
// domains and bad requests.
func TestMatching(t *testing.T) {
	redistest.NoLeaks(t)
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			p := start(t, rlsBinary(t), env(t, runtimeDir(t, map[string]string{"basic.yaml": basicYAML}), "HYBRIDLIMIT_MODE", mode))
			awayFromEdge(t, mode, 3600, 30)
			check := func(what string, r *rlspb.RateLimitResponse, overall rlspb.RateLimitResponse_Code, want ...string) {
				t.Helper()
				if r.OverallCode != overall || len(r.Statuses) != len(want) {
					t.Fatalf("%s: overall %v with %d statuses, want %v with %d", what, r.OverallCode, len(r.Statuses), overall, len(want))
				}
				for i, w := range want {
					if got := statusOf(r.Statuses[i]); got != w {
						t.Fatalf("%s: status %d = %s, want %s", what, i, got, w)
					}
				}
			}
			ok := func(limit, remaining int, unit string) string {
				return statusOf(&rlspb.RateLimitResponse_DescriptorStatus{Code: rlspb.RateLimitResponse_OK, LimitRemaining: uint32(remaining),
					CurrentLimit: &rlspb.RateLimitResponse_RateLimit{RequestsPerUnit: uint32(limit), Unit: rlspb.RateLimitResponse_RateLimit_Unit(rlspb.RateLimitResponse_RateLimit_Unit_value[unit])}})
			}
			over := func(limit int, unit string) string {
				return statusOf(&rlspb.RateLimitResponse_DescriptorStatus{Code: rlspb.RateLimitResponse_OVER_LIMIT,
					CurrentLimit: &rlspb.RateLimitResponse_RateLimit{RequestsPerUnit: uint32(limit), Unit: rlspb.RateLimitResponse_RateLimit_Unit(rlspb.RateLimitResponse_RateLimit_Unit_value[unit])}})
			}
			none := statusOf(&rlspb.RateLimitResponse_DescriptorStatus{Code: rlspb.RateLimitResponse_OK})
			unlimited := statusOf(&rlspb.RateLimitResponse_DescriptorStatus{Code: rlspb.RateLimitResponse_OK, LimitRemaining: math.MaxUint32})

			// Wildcards: /api/v2/x matches /api/*, declared first; each
			// value has its own counter.
			check("wildcard", p.mustCall(request("basic", 0, entries("path", "/api/v2/x"))), rlspb.RateLimitResponse_OK, ok(3, 2, "HOUR"))
			check("wildcard, another value", p.mustCall(request("basic", 0, entries("path", "/api/other"))), rlspb.RateLimitResponse_OK, ok(3, 2, "HOUR"))
			// share_threshold: every value of key2 counts against one bucket.
			for i, v := range []string{"a", "b", "c"} {
				check("shared "+v, p.mustCall(request("basic", 0, entries("key2", v))), rlspb.RateLimitResponse_OK, ok(5, 4-i, "HOUR"))
			}
			// Two descriptors, hits_addend 2 on each.
			check("two", p.mustCall(request("basic", 2, entries("key2", "d"), entries("path", "/api/v2/x"))), rlspb.RateLimitResponse_OK,
				ok(5, 0, "HOUR"), ok(3, 0, "HOUR"))
			// One over: OVER_LIMIT overall. The other descriptor is charged
			// only in fixed-window mode, as the reference charges it.
			key1Left := 20
			if mode == "fixed_window" {
				key1Left = 19
			}
			check("one over", p.mustCall(request("basic", 0, entries("key1", "m"), entries("key2", "e"))), rlspb.RateLimitResponse_OVER_LIMIT,
				ok(20, key1Left, "MINUTE"), over(5, "HOUR"))
			// No match, unlimited, a depth that matches no rule.
			check("misc", p.mustCall(request("basic", 0, entries("nothing", "x"), entries("unlimited", "u"), entries("key1", "a", "extra", "b"))),
				rlspb.RateLimitResponse_OK, none, unlimited, none)
			// requests_per_unit 0 denies, but a check (hits 0) passes.
			check("zero", p.mustCall(request("basic", 0, entries("zero", "z"))), rlspb.RateLimitResponse_OVER_LIMIT, over(0, "SECOND"))
			zeroCheck := request("basic", 0, entries("zero", "z2"))
			zeroCheck.Descriptors[0].HitsAddend = wrapperspb.UInt64(0)
			check("zero check", p.mustCall(zeroCheck), rlspb.RateLimitResponse_OK, ok(0, 0, "SECOND"))
			// Shadow mode: over, but OK.
			check("shadow 1", p.mustCall(request("basic", 0, entries("shadow", "s"))), rlspb.RateLimitResponse_OK, ok(1, 0, "HOUR"))
			check("shadow 2", p.mustCall(request("basic", 0, entries("shadow", "s"))), rlspb.RateLimitResponse_OK, statusOf(&rlspb.RateLimitResponse_DescriptorStatus{
				Code: rlspb.RateLimitResponse_OK, CurrentLimit: &rlspb.RateLimitResponse_RateLimit{RequestsPerUnit: 1, Unit: rlspb.RateLimitResponse_RateLimit_HOUR}}))
			// replaces: tier's rule replaces per_route's.
			check("replaces", p.mustCall(request("basic", 0, entries("client", "c", "route", "r"), entries("client", "c", "tier", "t"))),
				rlspb.RateLimitResponse_OK, none, ok(1, 0, "HOUR"))
			check("not replaced", p.mustCall(request("basic", 0, entries("client", "c", "route", "r"))), rlspb.RateLimitResponse_OK, ok(2, 1, "HOUR"))
			// A limit override, with its own counter in hybrid mode.
			ov := request("basic", 0, entries("key1", "override"))
			ov.Descriptors[0].Limit = &rlpb.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 7, Unit: typepb.RateLimitUnit_HOUR}
			check("override", p.mustCall(ov), rlspb.RateLimitResponse_OK, ok(7, 6, "HOUR"))
			// An override's unit_multiplier makes its window: 2 x 30 s.
			mult := request("basic", 0, entries("key1", "mult"))
			mult.Descriptors[0].Limit = &rlpb.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 7, Unit: typepb.RateLimitUnit_MINUTE,
				UnitMultiplier: wrapperspb.UInt32(2)}
			if r := p.mustCall(mult); r.Statuses[0].GetCurrentLimit().GetUnitMultiplier().GetValue() != 2 ||
				r.Statuses[0].DurationUntilReset.AsDuration() > 2*time.Minute || r.Statuses[0].LimitRemaining != 6 {
				t.Fatalf("override with unit_multiplier 2: %v", r)
			}
			// An unknown domain limits nothing.
			check("unknown domain", p.mustCall(request("nobody", 0, entries("key1", "x"))), rlspb.RateLimitResponse_OK, none)

			// Bad requests: no domain, no descriptors, an override with
			// unit UNKNOWN (which crashes the reference).
			bad := request("basic", 0, entries("key1", "x"))
			bad.Descriptors[0].Limit = &rlpb.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 7, Unit: typepb.RateLimitUnit_UNKNOWN}
			for _, req := range []*rlspb.RateLimitRequest{request("", 0, entries("key1", "x")), request("basic", 0), bad} {
				if _, err := p.call(req); status.Code(err) != codes.InvalidArgument {
					t.Fatalf("ShouldRateLimit(%v) = %v, want InvalidArgument", req, err)
				}
			}
			if r := p.mustCall(request("basic", 0, entries("key1", "after"))); r.OverallCode != rlspb.RateLimitResponse_OK {
				t.Fatalf("after bad requests: %v", r)
			}
			// /json speaks the same, 429 for OVER_LIMIT.
			resp, err := http.Post(p.httpURL+"/json", "application/json", strings.NewReader(`{"domain":"basic","descriptors":[{"entries":[{"key":"zero","value":"j"}]}]}`))
			if err != nil || resp.StatusCode != http.StatusTooManyRequests {
				t.Fatalf("/json over limit: %v %v", resp, err)
			}
			resp.Body.Close()
			resp, err = http.Post(p.httpURL+"/json", "application/json", strings.NewReader(`{"domain":`))
			if err != nil || resp.StatusCode != http.StatusBadRequest {
				t.Fatalf("/json bad body: %v %v", resp, err)
			}
			resp.Body.Close()
		})
	}
}

// TestDeniedRequestSpendsNothingElse: in the default mode a request that
// one descriptor denies does not spend the other descriptors' budget; in
// fixed-window mode it does, as the reference counts.
func TestDeniedRequestSpendsNothingElse(t *testing.T) {
	t.Parallel()
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			p := start(t, rlsBinary(t), env(t, runtimeDir(t, map[string]string{"basic.yaml": basicYAML}), "HYBRIDLIMIT_MODE", mode))
			awayFromEdge(t, mode, 3600, 30)
			r := p.mustCall(request("basic", 0, entries("key2", "x"), entries("zero", "q")))
			if r.OverallCode != rlspb.RateLimitResponse_OVER_LIMIT {
				t.Fatalf("want zero over its limit of 0: %v", r)
			}
			r = p.mustCall(request("basic", 0, entries("key2", "y")))
			want := uint32(4) // key2 untouched by the denied request
			if mode == "fixed_window" {
				want = 3
			}
			if got := r.Statuses[0].LimitRemaining; got != want {
				t.Fatalf("key2 remaining %d after a request path denied, want %d", got, want)
			}
		})
	}
}

// TestStreamEndHits is the acceptance case of usage Envoy sends when a
// stream ends (apply_on_stream_done: Envoy Gateway's cost.response, the
// tokens of an LLM's reply), on a rule of 10 an hour, as Envoy Gateway
// sends it: a check (the descriptor's hits_addend 0: cost.request of
// number 0), 4 hits, a check, then 9 hits with 6 left, a check, and 1
// hit. The 9 are OVER_LIMIT. Sent as a cost (the descriptor's hits_addend,
// as Envoy Gateway sends it) they are counted by default, as with every
// hit counted or in fixed-window mode: the last check and the last hit
// are OVER_LIMIT too (the hybrid: the 9 charged into debt by 3, the last
// hit by 1 more: 5 tokens, 30 minutes). Sent as a request's plain hits,
// the hybrid's default counts nothing over the limit, and both go through.
func TestStreamEndHits(t *testing.T) {
	t.Parallel()
	const rules = `domain: usage
descriptors:
  - key: tenant
    rate_limit:
      unit: hour
      requests_per_unit: 10
`
	for _, c := range []struct {
		name, mode, setting string
		cost, counted       bool
		wait                [2]time.Duration // the last hit's duration_until_reset, from and to
	}{
		{"hybrid/cost", "hybrid", "", true, true, [2]time.Duration{29 * time.Minute, 30 * time.Minute}},
		{"hybrid/plain", "hybrid", "", false, false, [2]time.Duration{}},
		{"hybrid/plain/count_every_hit", "hybrid", "HYBRIDLIMIT_COUNT_EVERY_HIT", false, true, [2]time.Duration{29 * time.Minute, 30 * time.Minute}},
		{"fixed_window/cost", "fixed_window", "", true, true, [2]time.Duration{0, time.Hour}},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := env(t, runtimeDir(t, map[string]string{"usage.yaml": rules}), "HYBRIDLIMIT_MODE", c.mode)
			if c.setting != "" {
				e[c.setting] = "true"
			}
			p := start(t, rlsBinary(t), e)
			awayFromEdge(t, c.mode, 3600, 30)
			tenant := entries("tenant", "t1")
			send := func(n uint64) *rlspb.RateLimitResponse {
				if !c.cost {
					return p.mustCall(request("usage", uint32(n), tenant))
				}
				req := request("usage", 0, tenant)
				req.Descriptors[0].HitsAddend = wrapperspb.UInt64(n)
				return p.mustCall(req)
			}
			check := func() rlspb.RateLimitResponse_Code {
				req := request("usage", 0, tenant)
				req.Descriptors[0].HitsAddend = wrapperspb.UInt64(0)
				return p.mustCall(req).OverallCode
			}
			if code := check(); code != rlspb.RateLimitResponse_OK {
				t.Fatalf("a check of a new key: %v", code)
			}
			if r := send(4); r.OverallCode != rlspb.RateLimitResponse_OK {
				t.Fatalf("4 hits of 10: %v", r)
			}
			if code := check(); code != rlspb.RateLimitResponse_OK {
				t.Fatalf("a check after 4 of 10: %v", code)
			}
			if r := send(9); r.OverallCode != rlspb.RateLimitResponse_OVER_LIMIT {
				t.Fatalf("9 hits with 6 left: %v, want OVER_LIMIT", r)
			}
			want := rlspb.RateLimitResponse_OK
			if c.counted {
				want = rlspb.RateLimitResponse_OVER_LIMIT
			}
			if code := check(); code != want {
				t.Fatalf("a check after 4 and 9 of 10: %v, want %v (the 9 counted: %v)", code, want, c.counted)
			}
			r := send(1)
			wait := r.Statuses[0].GetDurationUntilReset().AsDuration()
			if r.OverallCode != want || c.counted && (wait < c.wait[0] || wait > c.wait[1]) {
				t.Fatalf("1 hit after the 9: %v, want %v for %v to %v", r, want, c.wait[0], c.wait[1])
			}
		})
	}
}

// TestRefundAcrossReplicas: in the default mode, what a request denied by
// one descriptor spent on another goes back to the bucket in Redis. Replica
// b empties key2's bucket; replica a, which has not seen it, spends on
// path first (the less room by its view), then Redis denies key2, and a
// gives path's token back. Once a has handed its allowance back (at exit),
// b finds path's bucket as if the denied request never came.
func TestRefundAcrossReplicas(t *testing.T) {
	t.Parallel()
	e := env(t, runtimeDir(t, map[string]string{"basic.yaml": basicYAML}))
	a, b := start(t, rlsBinary(t), e), start(t, rlsBinary(t), e)
	for i := range 5 {
		if r := b.mustCall(request("basic", 0, entries("key2", strconv.Itoa(i)))); r.OverallCode != rlspb.RateLimitResponse_OK {
			t.Fatalf("key2 call %d on replica b: %v", i, r)
		}
	}
	r := a.mustCall(request("basic", 0, entries("path", "/api/refund"), entries("key2", "z")))
	if r.OverallCode != rlspb.RateLimitResponse_OVER_LIMIT || r.Statuses[0].Code != rlspb.RateLimitResponse_OK ||
		r.Statuses[0].LimitRemaining != 3 || r.Statuses[1].Code != rlspb.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("path and key2 on replica a: %v, want key2 over and path given back (3 remaining)", r)
	}
	if n := a.metric("hybridlimit_rls_refunded_hits"); n != 1 {
		t.Fatalf("replica a refunded %v hits, want 1", n)
	}
	a.stop()
	if r := b.mustCall(request("basic", 0, entries("path", "/api/refund"))); r.Statuses[0].LimitRemaining != 2 {
		t.Fatalf("path on replica b after a's refund: %v, want 2 remaining (3 less this call)", r)
	}
}

// TestHeaders: LIMIT_RESPONSE_HEADERS_ENABLED adds the headers of the
// descriptor with the least room, under the names configured.
func TestHeaders(t *testing.T) {
	t.Parallel()
	p := start(t, rlsBinary(t), env(t, runtimeDir(t, map[string]string{"basic.yaml": basicYAML}),
		"LIMIT_RESPONSE_HEADERS_ENABLED", "true", "LIMIT_REMAINING_HEADER", "X-Left"))
	r := p.mustCall(request("basic", 0, entries("key1", "h"), entries("path", "/api/h")))
	got := map[string]string{}
	for _, h := range r.ResponseHeadersToAdd {
		got[h.Key] = h.Value
	}
	if got["RateLimit-Limit"] != "3" || got["X-Left"] != "2" || got["RateLimit-Reset"] == "" {
		t.Fatalf("headers %v, want the path rule's: limit 3, X-Left 2, a reset", got)
	}
}

// TestShadowModeGlobal: SHADOW_MODE turns the overall code to OK and
// leaves each status as it is.
func TestShadowModeGlobal(t *testing.T) {
	t.Parallel()
	p := start(t, rlsBinary(t), env(t, runtimeDir(t, map[string]string{"basic.yaml": basicYAML}), "SHADOW_MODE", "true"))
	r := p.mustCall(request("basic", 0, entries("zero", "g")))
	if r.OverallCode != rlspb.RateLimitResponse_OK || r.Statuses[0].Code != rlspb.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("SHADOW_MODE: %v", r)
	}
	if n := p.stat("ratelimit.service.global_shadow_mode"); n != 1 {
		t.Fatalf("global_shadow_mode = %d, want 1", n)
	}
}

// TestReload: a file written, created or removed, and a symbolic link
// swapped as Kubernetes swaps a ConfigMap's, each reload the rules without
// polling; a broken file leaves the old rules serving and counts an error.
func TestReload(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	v1, v2 := filepath.Join(dir, "v1"), filepath.Join(dir, "v2")
	writeFiles(t, filepath.Join(v1, "config"), map[string]string{"basic.yaml": basicYAML})
	writeFiles(t, filepath.Join(v2, "config"), map[string]string{"basic.yaml": strings.Replace(basicYAML, "requests_per_unit: 20", "requests_per_unit: 40", 1)})
	root := filepath.Join(dir, "current")
	if err := os.Symlink(v1, root); err != nil {
		t.Fatal(err)
	}
	p := start(t, rlsBinary(t), env(t, root))
	limitOf := func(key string) uint32 {
		return p.mustCall(request("basic", 0, entries(key, "r"))).Statuses[0].GetCurrentLimit().GetRequestsPerUnit()
	}
	cfg := filepath.Join(v1, "config", "basic.yaml")

	writeAtomic(t, cfg, strings.Replace(basicYAML, "requests_per_unit: 20", "requests_per_unit: 30", 1))
	waitFor(t, "a written file to reload", func() bool { return limitOf("key1") == 30 })

	if err := os.WriteFile(cfg, []byte(strings.Replace(basicYAML, "requests_per_unit: 20", "requests_per_unit: 31", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a file written in place to reload", func() bool { return limitOf("key1") == 31 })

	writeAtomic(t, filepath.Join(v1, "config", "other.yaml"), "domain: other\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 9}\n")
	waitFor(t, "a created file to load", func() bool {
		return p.mustCall(request("other", 0, entries("k", "v"))).Statuses[0].GetCurrentLimit().GetRequestsPerUnit() == 9
	})
	if err := os.Remove(filepath.Join(v1, "config", "other.yaml")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a removed file to unload", func() bool {
		return p.mustCall(request("other", 0, entries("k", "v"))).Statuses[0].GetCurrentLimit() == nil
	})

	loadErrors := p.stat("ratelimit.service.config_load_error")
	writeAtomic(t, cfg, basicYAML+"  - key: bad\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n")
	waitFor(t, "a broken file to count an error", func() bool { return p.stat("ratelimit.service.config_load_error") == loadErrors+1 })
	if got := limitOf("key1"); got != 31 {
		t.Fatalf("after a broken reload key1's limit is %d, want the old 31", got)
	}
	if code, body := p.get(p.httpURL + "/healthcheck"); code != 200 || body != "OK" {
		t.Fatalf("/healthcheck after a broken reload: %d %q", code, body)
	}

	tmp := filepath.Join(dir, "current.tmp")
	if err := os.Symlink(v2, tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, root); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a symlink swap to reload", func() bool { return limitOf("key1") == 40 })
	_, dump := p.get(p.debugURL + "/rlconfig")
	if !strings.Contains(dump, "basic.key1: unit=MINUTE requests_per_unit=40") {
		t.Fatalf("/rlconfig:\n%s", dump)
	}
	if !strings.Contains(p.out.String(), "unknown key") && !strings.Contains(p.out.String(), "fortnight") {
		t.Fatalf("the broken file's error is not in the log:\n%s", p.out.String())
	}
}

// TestRedisStopped: with Redis stopped (SIGSTOP), then killed, every call
// is answered within the failure bound by the failure policy: the default
// fallback-local admits each replica's share of a limit (a full one for a
// key this one never heard of, what it last heard of for the others), and
// once Redis is back it takes what the share admitted, so that another
// replica sees it spent; the policy "error" answers UNAVAILABLE and fails
// the health check until Redis answers again.
func TestRedisStopped(t *testing.T) {
	redistest.NoLeaks(t)
	for _, policy := range []string{"fallback-local", "error"} {
		t.Run(policy, func(t *testing.T) {
			srv := redistest.Start(t)
			e := env(t, runtimeDir(t, map[string]string{"basic.yaml": basicYAML}), "REDIS_URL", srv.Addr, "HYBRIDLIMIT_FAILURE_POLICY", policy,
				"HYBRIDLIMIT_MAX_WAIT", "10ms")
			p := start(t, rlsBinary(t), e)
			// A limit of 20 an hour (a token every 3 minutes, so none
			// refills during the test), 5 spent while Redis answers, each
			// call a fetch. Under -race on a loaded machine a fetch (the
			// first dials Redis) can outlast 10ms, and the policy answers
			// instead: it spends from the share (fallback-local) or refuses
			// (error). A key the policy answered is left for a new one, until
			// one key's five calls are all Redis's answers.
			var paid *rlspb.RateLimitRequest
			keys := 0
			waitFor(t, "five calls of one key answered by Redis within 10ms", func() bool {
				keys++
				paid = request("basic", 0, entries("key1", "paid"+strconv.Itoa(keys)))
				paid.Descriptors[0].Limit = &rlpb.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 20, Unit: typepb.RateLimitUnit_HOUR}
				for i := 1; i <= 5; i++ {
					before := p.metric("hybridlimit_rls_failure_policy_decisions")
					r, err := p.call(paid)
					if p.metric("hybridlimit_rls_failure_policy_decisions") != before {
						t.Logf("key %d, call %d: answered by the policy, not Redis", keys, i)
						return false
					}
					if err != nil || r.Statuses[0].LimitRemaining != uint32(20-i) {
						t.Fatalf("call %d with Redis up: %v %v, want %d remaining", i, r, err, 20-i)
					}
				}
				return true
			})
			worst := time.Duration(0)
			// answered checks one call made with Redis down: within the
			// bound, and answered by the policy.
			answered := func(phase string, req *rlspb.RateLimitRequest, remaining uint32) {
				t.Helper()
				t0 := time.Now()
				r, err := p.call(req)
				d := time.Since(t0)
				worst = max(worst, d)
				// The stated bound is HYBRIDLIMIT_MAX_WAIT (10 ms) of waiting
				// plus the call's own work; the test allows for a machine
				// loaded by other tests, and reports the worst.
				if d > 500*time.Millisecond {
					t.Fatalf("%s: a call took %v with Redis down", phase, d)
				}
				switch {
				case policy == "error" && status.Code(err) != codes.Unavailable:
					t.Fatalf("%s: %v %v, want UNAVAILABLE", phase, r, err)
				case policy == "error":
				case err != nil:
					t.Fatalf("%s: %v", phase, err)
				case r.OverallCode != rlspb.RateLimitResponse_OK || r.Statuses[0].LimitRemaining != remaining:
					t.Fatalf("%s: %v, want OK with %d remaining", phase, r, remaining)
				}
			}
			// probe asks for 100 keys this replica never heard of: each
			// gets a full share of the 20 a minute, its part of the live
			// instances it last counted (burst 20/N rounded up), less 1.
			probe := func(phase string) {
				t.Helper()
				n := max(p.metric("hybridlimit_sync_live_instances"), 1)
				remaining := uint32(math.Ceil(20/n)) - 1
				for i := range 100 {
					answered(phase, request("basic", 0, entries("key1", phase+strconv.Itoa(i))), remaining)
					time.Sleep(5 * time.Millisecond)
				}
			}
			if err := srv.Signal(syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			probe("stopped")
			for i := 1; i <= 5; i++ {
				answered("stopped, a key known", paid, uint32(15-i))
			}
			if n := p.metric("hybridlimit_rls_failure_policy_decisions"); n < 105 {
				t.Fatalf("the failure policy decided %v descriptors, want the 105 made with Redis stopped", n)
			}
			health := 200
			if policy == "error" {
				health = 500
			}
			waitFor(t, "the health check to follow Redis", func() bool { code, _ := p.get(p.httpURL + "/healthcheck"); return code == health })
			owed := p.metric("hybridlimit_sync_owed_cost")
			if err := srv.Signal(syscall.SIGCONT); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "the health check once Redis is back", func() bool { code, _ := p.get(p.httpURL + "/healthcheck"); return code == 200 })
			if policy == "fallback-local" {
				// What the share admitted (the 100 new keys' and the known
				// key's 5), Redis takes once it answers.
				if owed < 105 {
					t.Fatalf("owed %v with Redis stopped, want the 105 the share admitted", owed)
				}
				waitFor(t, "Redis to take what the share admitted", func() bool { return p.metric("hybridlimit_sync_owed_cost") == 0 })
				// Another replica checks Redis's answer, so it waits for
				// Redis as long as the sequence tests do.
				qe := maps.Clone(e)
				qe["HYBRIDLIMIT_MAX_WAIT"] = "2s"
				q := start(t, rlsBinary(t), qe)
				if r := q.mustCall(paid); r.Statuses[0].LimitRemaining != 9 {
					t.Fatalf("another replica after Redis came back: %v, want 9 remaining (20 less 5 admitted by Redis, 5 by the share, 1 now)", r)
				}
			}
			// Killed, with the second replica (if any) still counted
			// live: the shares are halved.
			srv.Stop()
			probe("killed")
			t.Logf("worst call with Redis stopped or killed: %v", worst)
		})
	}
}

// TestCluster: REDIS_TYPE=cluster on the 3+3 cluster serves the same
// exact sequence.
func TestCluster(t *testing.T) {
	c := redistest.ClusterOf(t)
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			e := env(t, runtimeDir(t, map[string]string{"basic.yaml": basicYAML}), "HYBRIDLIMIT_MODE", mode,
				"REDIS_TYPE", "cluster", "REDIS_URL", strings.Join(c.Addrs(), ","))
			p := start(t, rlsBinary(t), e)
			awayFromEdge(t, mode, 3600, 30)
			for i := 1; i <= 6; i++ {
				r := p.mustCall(request("basic", 0, entries("key2", "c"), entries("path", "/api/c")))
				k2, path := r.Statuses[0], r.Statuses[1]
				if i <= 3 && (r.OverallCode != rlspb.RateLimitResponse_OK || k2.LimitRemaining != uint32(5-i) || path.LimitRemaining != uint32(3-i)) {
					t.Fatalf("call %d: %v", i, r)
				}
				if i > 3 && path.Code != rlspb.RateLimitResponse_OVER_LIMIT {
					t.Fatalf("call %d: %v", i, r)
				}
			}
			cc := c.Client(t)
			if noTTL, seen := redistest.KeysWithoutTTL(t, cc, e["CACHE_KEY_PREFIX"]); len(noTTL) > 0 || seen == 0 {
				t.Fatalf("keys without TTL %v of %d", noTTL, seen)
			}
		})
	}
}

// TestClusterMasterStopped: with one master of the cluster stopped, only
// the keys it serves go to the failure policy (error here: UNAVAILABLE);
// the keys of the other masters keep Redis's exact answers. The master is
// stopped for well under the cluster's node timeout, so no replica takes
// over and the cluster is as before for the tests after this one.
func TestClusterMasterStopped(t *testing.T) {
	c := redistest.ClusterOf(t)
	e := env(t, runtimeDir(t, map[string]string{"basic.yaml": basicYAML}), "REDIS_TYPE", "cluster",
		"REDIS_URL", strings.Join(c.Addrs(), ","), "HYBRIDLIMIT_FAILURE_POLICY", "error")
	p := start(t, rlsBinary(t), e)
	const keys = 30
	for i := range keys {
		if r := p.mustCall(request("basic", 0, entries("key1", strconv.Itoa(i)))); r.Statuses[0].LimitRemaining != 19 {
			t.Fatalf("key %d with every master up: %v", i, r)
		}
	}
	master, _ := c.SlotOwner(t, 0)
	if err := master.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			_ = master.Signal(syscall.SIGCONT)
			t.Logf("master stopped for %v", time.Since(stopped))
		}
	}
	defer resume()
	var answered []int
	unavailable := 0
	for i := range keys {
		r, err := p.call(request("basic", 0, entries("key1", strconv.Itoa(i))))
		switch {
		case status.Code(err) == codes.Unavailable:
			unavailable++
		case err != nil:
			t.Fatalf("key %d with a master stopped: %v", i, err)
		case r.Statuses[0].LimitRemaining != 18:
			t.Fatalf("key %d with a master stopped: %v, want Redis's 18 remaining or UNAVAILABLE", i, r)
		default:
			answered = append(answered, i)
		}
	}
	for _, i := range answered {
		if r := p.mustCall(request("basic", 0, entries("key1", strconv.Itoa(i)))); r.Statuses[0].LimitRemaining != 17 {
			t.Fatalf("key %d on a master that answers: %v, want 17 remaining", i, r)
		}
	}
	resume()
	if unavailable == 0 || len(answered) == 0 {
		t.Fatalf("with one of 3 masters stopped, %d of %d keys answered by Redis, %d UNAVAILABLE: want some of each", len(answered), keys, unavailable)
	}
	t.Logf("%d of %d keys answered by Redis, %d by the policy", len(answered), keys, unavailable)
}

// TestEmbeddedRedis: -embedded-redis serves alone, and refuses to start
// beside REDIS_URL.
func TestEmbeddedRedis(t *testing.T) {
	t.Parallel()
	root := runtimeDir(t, map[string]string{"basic.yaml": basicYAML})
	p := start(t, rlsBinary(t), map[string]string{"RUNTIME_ROOT": root}, "-embedded-redis")
	if r := p.mustCall(request("basic", 0, entries("key1", "e"))); r.Statuses[0].LimitRemaining != 19 {
		t.Fatalf("embedded: %v", r)
	}
	if !strings.Contains(p.out.String(), "embedded") {
		t.Fatalf("the log does not say the Redis is embedded:\n%s", p.out.String())
	}
	cmd := execRLS(t, map[string]string{"RUNTIME_ROOT": root, "REDIS_URL": "127.0.0.1:1"}, "-embedded-redis")
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "choose one") {
		t.Fatalf("-embedded-redis with REDIS_URL: %v %s", err, out)
	}
	cmd = execRLS(t, map[string]string{"RUNTIME_ROOT": root, "HYBRIDLIMIT_MODE": "sliding"})
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "HYBRIDLIMIT_MODE") {
		t.Fatalf("a bad HYBRIDLIMIT_MODE: %v %s", err, out)
	}
}

// execRLS is the binary as a command to run to its end, within 10 s.
func execRLS(t *testing.T, env map[string]string, args ...string) *exec.Cmd {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	cmd := exec.CommandContext(ctx, rlsBinary(t), args...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	return cmd
}

// TestReplicasShareOneLimit: three replicas on one Redis admit, together,
// a 20 a minute rule's 20 requests and no more, in both modes.
func TestReplicasShareOneLimit(t *testing.T) {
	t.Parallel()
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			e := env(t, runtimeDir(t, map[string]string{"basic.yaml": basicYAML}), "HYBRIDLIMIT_MODE", mode)
			var ps []*proc
			for range 3 {
				ps = append(ps, start(t, rlsBinary(t), e))
			}
			awayFromEdge(t, mode, 60, 10)
			admitted := 0
			for i := range 45 {
				r := ps[i%3].mustCall(request("basic", 0, entries("key1", "shared")))
				if r.OverallCode == rlspb.RateLimitResponse_OK {
					admitted++
				}
			}
			if admitted != 20 {
				t.Fatalf("three replicas admitted %d of a 20 a minute rule's requests, want 20", admitted)
			}
		})
	}
}

// TestBrokenStartup: a service whose rules do not load at start serves
// errors and fails its health check, then serves once the file is fixed.
func TestBrokenStartup(t *testing.T) {
	t.Parallel()
	root := runtimeDir(t, map[string]string{"basic.yaml": "domain: basic\ndescriptors:\n  - key: k\n    rate_limit: {unit: eon}\n"})
	p := startUntil(t, (*proc).awaitHTTP, rlsBinary(t), env(t, root))
	if code, body := p.get(p.httpURL + "/healthcheck"); code != 500 || !strings.Contains(body, "no rules loaded") {
		t.Fatalf("/healthcheck with no rules: %d %q", code, body)
	}
	if _, err := p.call(request("basic", 0, entries("key1", "x"))); status.Code(err) != codes.Unavailable {
		t.Fatalf("a call with no rules loaded: %v, want UNAVAILABLE", err)
	}
	t0 := time.Now()
	writeAtomic(t, filepath.Join(root, "config", "basic.yaml"), basicYAML)
	p.waitServing()
	t.Logf("serving %v after the fix", time.Since(t0))
	if r := p.mustCall(request("basic", 0, entries("key1", "x"))); r.Statuses[0].LimitRemaining != 19 {
		t.Fatalf("after the fix: %v", r)
	}
}

// TestPerSecondRedis: with REDIS_PERSECOND, rules in seconds count in the
// second Redis, the others in the first.
func TestPerSecondRedis(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			second := redistest.Start(t)
			e := env(t, runtimeDir(t, map[string]string{"basic.yaml": basicYAML}), "HYBRIDLIMIT_MODE", mode,
				"REDIS_PERSECOND", "true", "REDIS_PERSECOND_URL", second.Addr, "REDIS_PERSECOND_SOCKET_TYPE", "tcp")
			p := start(t, rlsBinary(t), e)
			p.mustCall(request("basic", 0, entries("key1", "slow"))) // a minute rule
			ov := request("basic", 0, entries("key1", "fast"))
			ov.Descriptors[0].Limit = &rlpb.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1000, Unit: typepb.RateLimitUnit_SECOND}
			p.mustCall(ov)
			prefix := e["CACHE_KEY_PREFIX"]
			waitFor(t, "keys in both servers", func() bool {
				_, inFirst := redistest.KeysWithoutTTL(t, redistest.Standalone(t), prefix)
				noTTL, inSecond := redistest.KeysWithoutTTL(t, second.Client(t), prefix)
				return inFirst > 0 && inSecond > 0 && len(noTTL) == 0
			})
			if mode == "fixed_window" {
				c := second.Client(t)
				keys, err := c.Keys(context.Background(), prefix+"*").Result()
				if err != nil || len(keys) != 1 || !strings.Contains(keys[0], "key1_fast") {
					t.Fatalf("per-second server holds %v %v, want the one per-second counter", keys, err)
				}
			}
		})
	}
}

// TestSentinel: REDIS_TYPE=sentinel finds the master through a sentinel.
func TestSentinel(t *testing.T) {
	t.Parallel()
	master := redistest.Start(t)
	_, masterPort, _ := strings.Cut(master.Addr, ":")
	dir := t.TempDir()
	port := freePort(t)
	conf := filepath.Join(dir, "sentinel.conf")
	text := "bind 127.0.0.1\nport " + strconv.Itoa(port) + "\ndir " + dir + "\n" +
		"sentinel monitor mymaster 127.0.0.1 " + masterPort + " 1\nsentinel down-after-milliseconds mymaster 5000\n"
	if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	_, server, _, err := redistest.Kind()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(server, conf, "--sentinel")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	sentinel := "127.0.0.1:" + strconv.Itoa(port)
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			e := env(t, runtimeDir(t, map[string]string{"basic.yaml": basicYAML}), "HYBRIDLIMIT_MODE", mode,
				"REDIS_TYPE", "sentinel", "REDIS_URL", "mymaster,"+sentinel)
			p := start(t, rlsBinary(t), e)
			awayFromEdge(t, mode, 3600, 30)
			for i := 1; i <= 4; i++ {
				r := p.mustCall(request("basic", 0, entries("path", "/api/sentinel")))
				if want := uint32(max(3-i, 0)); r.Statuses[0].LimitRemaining != want || (i == 4) != (r.OverallCode == rlspb.RateLimitResponse_OVER_LIMIT) {
					t.Fatalf("call %d: %v, want remaining %d", i, r, want)
				}
			}
			if _, seen := redistest.KeysWithoutTTL(t, master.Client(t), e["CACHE_KEY_PREFIX"]); seen == 0 {
				t.Fatal("nothing written to the master the sentinel names")
			}
		})
	}
}
