package metrics

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/hybridlimit/hybridlimit"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
	hlsync "github.com/hybridlimit/hybridlimit/sync"
)

type fakeHybrid hlsync.Stats

func (f *fakeHybrid) Stats() hlsync.Stats { return hlsync.Stats(*f) }

func TestHybridCollector(t *testing.T) {
	src := &fakeHybrid{
		Keys: 12, LiveInstances: 3, Rounds: 100, RoundErrors: 2, Fetches: 7, Messages: 250, ScriptCalls: 110, Elsewhere: 13,
		Waits: 9, DeniedRemote: 4, DeniedLocal: 5, FailOpen: 6, FailClosed: 7, FallbackAllowed: 8, FallbackDenied: 1,
		BreakerOpen: true, BreakerOpens: 2, BreakerCloses: 1, Owed: 11, Evictions: 30, SplitKeys: 2, Reshards: 3, Moves: 4, LastRound: 1500 * time.Microsecond,
		Admitted: 9000, Charged: 120, Debt: 35, DeniedDebt: 4, Outstanding: 42, SinceSync: time.Minute, Unanswered: 250 * time.Millisecond, BreakerOpenFor: 3 * time.Second,
		Nodes: []hlsync.NodeStats{{Addr: "10.0.0.1:6379", BreakerOpen: true, OpenFor: 2 * time.Second}, {Addr: "10.0.0.2:6379", OpenFor: time.Second}},
		// The collector takes the bounds from the snapshot, whatever they are.
		RoundDuration: hybridlimit.Histogram{Bounds: []float64{0.001, 0.01}, Buckets: []uint64{3, 5}, Count: 6, Sum: 0.5},
		RoundMessages: hybridlimit.Histogram{Bounds: []float64{1, 4}, Buckets: []uint64{2, 7}, Count: 7, Sum: 12},
	}
	src.Errors[hybridlimit.ErrorTimeout] = 3
	src.Errors[hybridlimit.ErrorReply] = 1
	src.Errors[hybridlimit.ErrorOther] = 2
	c, err := NewHybridCollector(src, WithConstLabels(prometheus.Labels{"instance_name": "a"}))
	if err != nil {
		t.Fatal(err)
	}
	want := `
# HELP hybridlimit_sync_admitted_cost_total Cost admitted from local allowance, all keys, charges included.
# TYPE hybridlimit_sync_admitted_cost_total counter
hybridlimit_sync_admitted_cost_total{instance_name="a"} 9000
# HELP hybridlimit_sync_breaker_closes_total Times the breaker of a Redis node closed again.
# TYPE hybridlimit_sync_breaker_closes_total counter
hybridlimit_sync_breaker_closes_total{instance_name="a"} 1
# HELP hybridlimit_sync_breaker_open 1 while the breaker of any Redis node keeps it off the request path and the failure policy decides for its keys, else 0.
# TYPE hybridlimit_sync_breaker_open gauge
hybridlimit_sync_breaker_open{instance_name="a"} 1
# HELP hybridlimit_sync_breaker_open_seconds_total Time the breakers of the Redis nodes have been open, summed over the nodes: the failure policy deciding for some keys.
# TYPE hybridlimit_sync_breaker_open_seconds_total counter
hybridlimit_sync_breaker_open_seconds_total{instance_name="a"} 3
# HELP hybridlimit_sync_breaker_opens_total Times the breaker of a Redis node opened.
# TYPE hybridlimit_sync_breaker_opens_total counter
hybridlimit_sync_breaker_opens_total{instance_name="a"} 2
# HELP hybridlimit_sync_charged_cost_total Cost charged after the fact (Charge), all keys.
# TYPE hybridlimit_sync_charged_cost_total counter
hybridlimit_sync_charged_cost_total{instance_name="a"} 120
# HELP hybridlimit_sync_debt_cost How far the buckets of the keys this instance tracks are short of empty by Redis's last word and the refill since: charges beyond what they held, repaid by refill before they admit again. Instances sharing a key each count its debt.
# TYPE hybridlimit_sync_debt_cost gauge
hybridlimit_sync_debt_cost{instance_name="a"} 35
# HELP hybridlimit_sync_decisions_total Decisions the limiter counts, by outcome and path: denials (global, local) and failure-policy decisions (fallback, fail_open, fail_closed). Admissions from local allowance are not counted.
# TYPE hybridlimit_sync_decisions_total counter
hybridlimit_sync_decisions_total{instance_name="a",outcome="allowed",path="fail_open"} 6
hybridlimit_sync_decisions_total{instance_name="a",outcome="allowed",path="fallback"} 8
hybridlimit_sync_decisions_total{instance_name="a",outcome="denied",path="fail_closed"} 7
hybridlimit_sync_decisions_total{instance_name="a",outcome="denied",path="fallback"} 1
hybridlimit_sync_decisions_total{instance_name="a",outcome="denied",path="global"} 4
hybridlimit_sync_decisions_total{instance_name="a",outcome="denied",path="local"} 5
# HELP hybridlimit_sync_denied_debt_total Denials (global or local) of keys whose bucket Redis last said is in debt.
# TYPE hybridlimit_sync_denied_debt_total counter
hybridlimit_sync_denied_debt_total{instance_name="a"} 4
# HELP hybridlimit_sync_errors_total Failed calls to Redis (sync script and presence calls), by class: timeout, connection, error_reply, malformed_reply, other.
# TYPE hybridlimit_sync_errors_total counter
hybridlimit_sync_errors_total{class="connection",instance_name="a"} 0
hybridlimit_sync_errors_total{class="error_reply",instance_name="a"} 1
hybridlimit_sync_errors_total{class="malformed_reply",instance_name="a"} 0
hybridlimit_sync_errors_total{class="other",instance_name="a"} 2
hybridlimit_sync_errors_total{class="timeout",instance_name="a"} 3
# HELP hybridlimit_sync_evictions_total Idle keys dropped from memory.
# TYPE hybridlimit_sync_evictions_total counter
hybridlimit_sync_evictions_total{instance_name="a"} 30
# HELP hybridlimit_sync_layout_moves_total Keys this instance moved to a new layout of parts, its own reshards and those it heard of from Redis.
# TYPE hybridlimit_sync_layout_moves_total counter
hybridlimit_sync_layout_moves_total{instance_name="a"} 4
# HELP hybridlimit_sync_fetches_total On-demand rounds run for decisions out of local allowance.
# TYPE hybridlimit_sync_fetches_total counter
hybridlimit_sync_fetches_total{instance_name="a"} 7
# HELP hybridlimit_sync_key_messages_elsewhere_total Per-key messages a Redis node answered without applying, as it no longer serves their slot; each is sent again.
# TYPE hybridlimit_sync_key_messages_elsewhere_total counter
hybridlimit_sync_key_messages_elsewhere_total{instance_name="a"} 13
# HELP hybridlimit_sync_key_messages_total Per-key messages sent to Redis, over all rounds and fetches.
# TYPE hybridlimit_sync_key_messages_total counter
hybridlimit_sync_key_messages_total{instance_name="a"} 250
# HELP hybridlimit_sync_last_round_duration_seconds Duration of the last background sync round.
# TYPE hybridlimit_sync_last_round_duration_seconds gauge
hybridlimit_sync_last_round_duration_seconds{instance_name="a"} 0.0015
# HELP hybridlimit_sync_live_instances Limiter instances alive in Redis, as last seen; sizes fallback shares.
# TYPE hybridlimit_sync_live_instances gauge
hybridlimit_sync_live_instances{instance_name="a"} 3
# HELP hybridlimit_sync_outstanding_allowance Allowance held unspent now, all keys: tokens Redis counts as this instance's (Reserve) or that it may admit before reporting (Optimistic).
# TYPE hybridlimit_sync_outstanding_allowance gauge
hybridlimit_sync_outstanding_allowance{instance_name="a"} 42
# HELP hybridlimit_sync_node_breaker_open 1 while this Redis node's breaker is open and the failure policy decides for the keys whose slots it serves, else 0.
# TYPE hybridlimit_sync_node_breaker_open gauge
hybridlimit_sync_node_breaker_open{instance_name="a",node="10.0.0.1:6379"} 1
hybridlimit_sync_node_breaker_open{instance_name="a",node="10.0.0.2:6379"} 0
# HELP hybridlimit_sync_node_breaker_open_seconds_total Time this Redis node's breaker has been open.
# TYPE hybridlimit_sync_node_breaker_open_seconds_total counter
hybridlimit_sync_node_breaker_open_seconds_total{instance_name="a",node="10.0.0.1:6379"} 2
hybridlimit_sync_node_breaker_open_seconds_total{instance_name="a",node="10.0.0.2:6379"} 1
# HELP hybridlimit_sync_owed_cost Cost the failure policy (FallbackLocal) admitted, or Charge charged beyond the allowance, that Redis has not yet taken from the keys' buckets: paid at each key's next sync.
# TYPE hybridlimit_sync_owed_cost gauge
hybridlimit_sync_owed_cost{instance_name="a"} 11
# HELP hybridlimit_sync_reshards_total Keys this instance split or merged back (WithAutoSplit).
# TYPE hybridlimit_sync_reshards_total counter
hybridlimit_sync_reshards_total{instance_name="a"} 3
# HELP hybridlimit_sync_round_duration_seconds Wall-clock time of sync rounds that sent key messages: periodic rounds, on-demand fetches and the final round.
# TYPE hybridlimit_sync_round_duration_seconds histogram
hybridlimit_sync_round_duration_seconds_bucket{instance_name="a",le="0.001"} 3
hybridlimit_sync_round_duration_seconds_bucket{instance_name="a",le="0.01"} 5
hybridlimit_sync_round_duration_seconds_bucket{instance_name="a",le="+Inf"} 6
hybridlimit_sync_round_duration_seconds_sum{instance_name="a"} 0.5
hybridlimit_sync_round_duration_seconds_count{instance_name="a"} 6
# HELP hybridlimit_sync_round_key_messages Key messages per sync round, over the same rounds as round_duration_seconds.
# TYPE hybridlimit_sync_round_key_messages histogram
hybridlimit_sync_round_key_messages_bucket{instance_name="a",le="1"} 2
hybridlimit_sync_round_key_messages_bucket{instance_name="a",le="4"} 7
hybridlimit_sync_round_key_messages_bucket{instance_name="a",le="+Inf"} 7
hybridlimit_sync_round_key_messages_sum{instance_name="a"} 12
hybridlimit_sync_round_key_messages_count{instance_name="a"} 7
# HELP hybridlimit_sync_round_errors_total Background sync rounds in which at least one script call failed.
# TYPE hybridlimit_sync_round_errors_total counter
hybridlimit_sync_round_errors_total{instance_name="a"} 2
# HELP hybridlimit_sync_rounds_total Background sync rounds run.
# TYPE hybridlimit_sync_rounds_total counter
hybridlimit_sync_rounds_total{instance_name="a"} 100
# HELP hybridlimit_sync_script_calls_total Batched sync script calls sent to Redis.
# TYPE hybridlimit_sync_script_calls_total counter
hybridlimit_sync_script_calls_total{instance_name="a"} 110
# HELP hybridlimit_sync_split_keys Tracked keys split into parts over several slots (hot keys, WithSplitKeys or WithAutoSplit).
# TYPE hybridlimit_sync_split_keys gauge
hybridlimit_sync_split_keys{instance_name="a"} 2
# HELP hybridlimit_sync_tracked_keys Keys the hybrid limiter tracks in memory.
# TYPE hybridlimit_sync_tracked_keys gauge
hybridlimit_sync_tracked_keys{instance_name="a"} 12
# HELP hybridlimit_sync_view_staleness_seconds How long Redis has left unanswered the sync rounds that needed it: 0 while it answers, and on an instance with nothing to sync.
# TYPE hybridlimit_sync_view_staleness_seconds gauge
hybridlimit_sync_view_staleness_seconds{instance_name="a"} 0.25
# HELP hybridlimit_sync_waits_total Decisions that waited for an on-demand fetch.
# TYPE hybridlimit_sync_waits_total counter
hybridlimit_sync_waits_total{instance_name="a"} 9
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
	if problems, err := testutil.CollectAndLint(c); err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %+v", err, problems)
	}
	// Counters move with the source.
	src.Rounds = 101
	if got := testutil.ToFloat64(onlyMetric(c, "hybridlimit_sync_rounds_total")); got != 101 {
		t.Errorf("rounds after one more = %v, want 101", got)
	}
}

func TestCollectorOptions(t *testing.T) {
	if _, err := NewHybridCollector(nil); err == nil {
		t.Error("NewHybridCollector(nil) succeeded")
	}
	if _, err := NewHybridCollector(&fakeHybrid{}, nil); err == nil {
		t.Error("NewHybridCollector with a nil option succeeded")
	}
	c, err := NewHybridCollector(&fakeHybrid{Keys: 4}, WithNamespace("api"))
	if err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(c, "api_sync_tracked_keys"); n != 1 {
		t.Errorf("api_sync_tracked_keys series = %d, want 1", n)
	}
	// Two collectors in one registry, told apart by a constant label.
	reg := prometheus.NewPedanticRegistry()
	for _, name := range []string{"a", "b"} {
		c, err := NewHybridCollector(&fakeHybrid{}, WithConstLabels(prometheus.Labels{"limiter": name}))
		if err != nil {
			t.Fatal(err)
		}
		if err := reg.Register(c); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := reg.Gather(); err != nil {
		t.Error(err)
	}
}

// TestHybridCollectorRedis reads a real hybrid limiter on a real Redis.
func TestHybridCollectorRedis(t *testing.T) {
	redistest.NoLeaks(t)
	rdb := redistest.Standalone(t)
	p := redistest.Prefix(t)
	if len(p) > 64 {
		p = "t:" + p[len(p)-62:]
	}
	l, err := hlsync.New(rdb, hlsync.WithPrefix(p), hlsync.WithMaxWait(2*time.Second), hlsync.WithSyncInterval(20*time.Millisecond, 0))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := l.Close(context.Background()); err != nil {
			t.Error(err)
		}
	}()
	c, err := NewHybridCollector(l)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	limit := hybridlimit.PerMinute(3)
	for i := range 5 {
		r, err := l.Allow(context.Background(), "k", limit)
		if err != nil {
			t.Fatal(err)
		}
		if r.Allowed != (i < 3) {
			t.Fatalf("Allow #%d = %+v", i, r)
		}
	}
	// A limit this low is fetched per request (the low-limit rule): each
	// admission is an on-demand fetch, the denials are counted by path.
	if n := testutil.ToFloat64(onlyMetric(c, "hybridlimit_sync_tracked_keys")); n != 1 {
		t.Errorf("tracked keys = %v, want 1", n)
	}
	if n := testutil.ToFloat64(onlyMetric(c, "hybridlimit_sync_fetches_total")); n < 1 {
		t.Errorf("fetches = %v, want at least 1", n)
	}
	if n := testutil.ToFloat64(onlyMetric(c, "hybridlimit_sync_live_instances")); n != 1 {
		t.Errorf("live instances = %v, want 1", n)
	}
	denied := 0.0
	for _, path := range []string{"global", "local"} {
		denied += testutil.ToFloat64(labelled(c, "hybridlimit_sync_decisions_total", "denied", path))
	}
	if denied != 2 {
		t.Errorf("denials = %v, want 2", denied)
	}
	if _, err := reg.Gather(); err != nil {
		t.Error(err)
	}
}

// TestHybridCollectorHistograms reads the round histograms of a real
// limiter driven without its loop: three fetches of one key each, then the
// final round of Close with all three keys.
func TestHybridCollectorHistograms(t *testing.T) {
	redistest.NoLeaks(t)
	rdb := redistest.Standalone(t)
	p := redistest.Prefix(t)
	if len(p) > 64 {
		p = "t:" + p[len(p)-62:]
	}
	l, err := hlsync.New(rdb, hlsync.WithPrefix(p), hlsync.WithMaxWait(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, key := range []string{"a", "b", "c"} {
		if r, err := l.Allow(ctx, key, hybridlimit.PerSecond(1000)); err != nil || !r.Allowed {
			t.Fatalf("Allow(%q) = %+v, %v", key, r, err)
		}
	}
	if err := l.Close(ctx); err != nil {
		t.Fatal(err)
	}
	c, err := NewHybridCollector(l)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	hist := func(name string) *dto.Histogram {
		t.Helper()
		for _, mf := range mfs {
			if mf.GetName() == name {
				return mf.GetMetric()[0].GetHistogram()
			}
		}
		t.Fatalf("no %s", name)
		return nil
	}
	s := l.Stats()
	msgs := hist("hybridlimit_sync_round_key_messages")
	if msgs.GetSampleCount() != 4 || msgs.GetSampleSum() != 6 || len(msgs.GetBucket()) != len(s.RoundMessages.Bounds) {
		t.Fatalf("round_key_messages = %v, want 4 rounds, 6 messages, %d buckets", msgs, len(s.RoundMessages.Bounds))
	}
	for i, b := range msgs.GetBucket() {
		want := uint64(4) // all rounds within the bound
		if i == 0 {
			want = 3 // the fetches, at most 1 message
		}
		if b.GetUpperBound() != s.RoundMessages.Bounds[i] || b.GetCumulativeCount() != want {
			t.Errorf("round_key_messages bucket %d = le %v: %d, want le %v: %d", i, b.GetUpperBound(), b.GetCumulativeCount(), s.RoundMessages.Bounds[i], want)
		}
	}
	dur := hist("hybridlimit_sync_round_duration_seconds")
	if dur.GetSampleCount() != 4 || dur.GetSampleSum() <= 0 {
		t.Errorf("round_duration_seconds = %v, want 4 rounds of some duration", dur)
	}
	if n := testutil.ToFloat64(labelled(c, "hybridlimit_sync_errors_total", "timeout")); n != 0 {
		t.Errorf("timeouts = %v, want 0", n)
	}
}
