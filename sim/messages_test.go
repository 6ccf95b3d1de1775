package sim

import (
	"context"
	"testing"
	"time"
)

// TestMessageKinds runs both hybrid strategies with detail and checks that
// the messages classified add up to those the limiters say they sent, and
// that each mode's messages are of its own kinds.
func TestMessageKinds(t *testing.T) {
	cfg := Config{
		Scenario:   small(Hotspot),
		Strategies: []Strategy{Optimistic, Reserve},
		Intervals:  []time.Duration{200 * time.Millisecond},
		RTT:        DefaultRTT,
		Detail:     true,
	}
	rep, err := RunVirtual(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rep.Results {
		var byKind [msgKinds]int64
		for _, m := range r.Diag.keyMessages {
			for p := range m {
				for k, n := range m[p] {
					byKind[k] += n
				}
			}
		}
		var total int64
		for _, n := range byKind {
			total += n
		}
		t.Logf("%s: %v messages by kind %v", r.Label(), r.Diag.Messages, byKind)
		if total != int64(r.Diag.Messages) || total == 0 {
			t.Errorf("%s: %d messages classified, limiters sent %d", r.Label(), total, r.Diag.Messages)
		}
		if reports := byKind[msgReport]; (r.Strategy == Optimistic) != (reports == total) {
			t.Errorf("%s: %d of %d messages are reports", r.Label(), reports, total)
		}
		if r.Strategy == Reserve && byKind[msgGrant] == 0 {
			t.Errorf("%s: no grants among %v", r.Label(), byKind)
		}
	}
}
