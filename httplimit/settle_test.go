package httplimit

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/hybridlimit/hybridlimit"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
	"github.com/hybridlimit/hybridlimit/rules"
	hlsync "github.com/hybridlimit/hybridlimit/sync"
)

// llmRule is a token quota: each request spends the tokens its
// X-Max-Tokens header says it may use, settled to what the handler
// reports.
func llmRule(l hybridlimit.Limiter, limit hybridlimit.Limit) Rule {
	return Rule{
		Name: "tokens", Limiter: l, Limit: limit, Key: Header("X-Key"), Settle: true,
		CostFunc: func(r *http.Request) int64 {
			n, _ := strconv.ParseInt(r.Header.Get("X-Max-Tokens"), 10, 64)
			return n
		},
	}
}

// llmHandler reports the X-Used header as the request's actual tokens.
var llmHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	used, _ := strconv.ParseInt(r.Header.Get("X-Used"), 10, 64)
	if err := rules.ReportCost(r.Context(), "tokens", used); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
	}
})

func llmRequest(h http.Handler, maxTokens, used int64) int {
	r := httptest.NewRequest("POST", "/v1/chat", nil)
	r.Header.Set("X-Key", "k1")
	r.Header.Set("X-Max-Tokens", strconv.FormatInt(maxTokens, 10))
	r.Header.Set("X-Used", strconv.FormatInt(used, 10))
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w.Code
}

// TestSettleChargesWhatWasUsed is the token quota a user writes for 1000
// tokens a day: each request admitted on an estimate of 100 and settled
// to a 400-token reply. Three replies use 1,200 tokens: the 300 each used
// beyond its estimate are charged whatever the key holds, so the fourth
// request is denied, on this instance and on another one on the same
// Redis, and the key owes what it used past its quota. A reply that uses
// less than its estimate gives the rest back. Exact in process (a local
// table), and across two hybrid limiters on a real Redis.
func TestSettleChargesWhatWasUsed(t *testing.T) {
	redistest.NoLeaks(t)
	limit := hybridlimit.Limit{Rate: 1000, Period: 24 * time.Hour, Burst: 1000}
	rdb := redistest.Standalone(t)
	prefix := redistest.Prefix(t)
	hybrid := func(id string) hybridlimit.Limiter {
		l, err := hlsync.New(rdb, hlsync.WithPrefix(prefix), hlsync.WithInstanceID(id))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Close(context.Background()) })
		return l
	}
	inProcess := newLocal(t)
	for _, tt := range []struct {
		name string
		a, b hybridlimit.Limiter // two instances
	}{{"local", inProcess, inProcess}, {"hybrid", hybrid("a"), hybrid("b")}} {
		t.Run(tt.name, func(t *testing.T) {
			a, err := New([]Rule{llmRule(tt.a, limit)})
			if err != nil {
				t.Fatal(err)
			}
			b, err := New([]Rule{llmRule(tt.b, limit)})
			if err != nil {
				t.Fatal(err)
			}
			ha, hb := a.Handler(llmHandler), b.Handler(llmHandler)
			for i := range 3 {
				if code := llmRequest(ha, 100, 400); code != http.StatusOK {
					t.Fatalf("request %d: %d, want 200", i+1, code)
				}
			}
			if code := llmRequest(ha, 100, 400); code != http.StatusTooManyRequests {
				t.Errorf("fourth request after 1,200 tokens used of 1,000: %d, want 429", code)
			}
			if code := llmRequest(hb, 1, 1); code != http.StatusTooManyRequests {
				t.Errorf("another instance, a request of 1 token: %d, want 429", code)
			}
			if s := a.Stats().Rules[0]; s.Errors != ([hybridlimit.NumErrorClasses]uint64{}) {
				t.Errorf("settlement errors: %v", s.Errors)
			}
		})
	}
	t.Run("refund", func(t *testing.T) {
		m, err := New([]Rule{llmRule(newLocal(t), limit)})
		if err != nil {
			t.Fatal(err)
		}
		h := m.Handler(llmHandler)
		// 500 estimated, 10 used: 490 back each time, so a third estimate
		// of 500 finds room only if the first two were given back.
		for i := range 3 {
			if code := llmRequest(h, 500, 10); code != http.StatusOK {
				t.Fatalf("request %d: %d, want 200 (the unused estimate given back)", i+1, code)
			}
		}
	})
}

// TestReportCostErrors checks what a handler hears from ReportCost: a
// rule that does not settle or is not there, a negative cost, and a
// report after the handler returned.
func TestReportCostErrors(t *testing.T) {
	limit := hybridlimit.Limit{Rate: 1000, Period: time.Hour, Burst: 1000}
	m, err := New([]Rule{llmRule(newLocal(t), limit)})
	if err != nil {
		t.Fatal(err)
	}
	late := make(chan context.Context, 1)
	h := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := rules.ReportCost(r.Context(), "other", 5); !errors.Is(err, rules.ErrNotSettled) {
			t.Errorf("another rule: %v, want ErrNotSettled", err)
		}
		if err := rules.ReportCost(r.Context(), "tokens", -1); !errors.Is(err, hybridlimit.ErrInvalidCost) {
			t.Errorf("a negative cost: %v, want ErrInvalidCost", err)
		}
		late <- r.Context()
	}))
	if code := llmRequest(h, 10, 0); code != http.StatusOK {
		t.Fatal(code)
	}
	if err := rules.ReportCost(<-late, "tokens", 5); !errors.Is(err, rules.ErrSettled) {
		t.Errorf("a report after the handler returned: %v, want ErrSettled", err)
	}
	if err := rules.ReportCost(context.Background(), "tokens", 5); !errors.Is(err, rules.ErrNotSettled) {
		t.Errorf("a context no handler checked: %v, want ErrNotSettled", err)
	}
	if _, err := New([]Rule{llmRule(&fakeLimiter{}, limit)}); !errors.Is(err, rules.ErrInvalidRule) {
		t.Errorf("Settle on a limiter that cannot charge: %v, want ErrInvalidRule", err)
	}
}
