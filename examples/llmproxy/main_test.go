package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/hybridlimit/hybridlimit/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// start runs the proxy, with its fake model, on a real Redis until the
// test ends, and returns its base URL. Decisions wait for Redis up to 2 s:
// a cold key's first fetch under -race on a loaded machine can outlast the
// default wait, and the failure policy would answer it.
func start(t *testing.T) string {
	t.Helper()
	opt := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, opt) })
	srv := redistest.StandaloneServer(t)
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	errc := make(chan error, 1)
	go func() {
		errc <- run(ctx, []string{"-listen", "127.0.0.1:0", "-redis", srv.Addr, "-max-wait", "2s"}, ready)
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-errc; err != nil {
			t.Errorf("run: %v", err)
		}
		http.DefaultClient.CloseIdleConnections()
	})
	select {
	case a := <-ready:
		return "http://" + a
	case err := <-errc:
		t.Fatalf("run: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("proxy not listening after 10s")
	}
	return ""
}

// complete asks the proxy for a completion of at most maxTokens, which
// the fake model answers as using used tokens, and returns the status and
// RateLimit field.
func complete(t *testing.T, base, key string, maxTokens, used int64) (int, string) {
	t.Helper()
	body := fmt.Sprintf(`{"model":"m","max_tokens":%d,"messages":[{"role":"user","content":"hi"}]}`, maxTokens)
	req, err := http.NewRequest("POST", base+"/v1/chat/completions", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Fake-Usage", fmt.Sprint(used))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, resp.Header.Get("RateLimit")
}

// TestTokensSettledFromUsage: 10,000 tokens a minute per key. Requests
// that ask for at most 1,000 tokens and use 4,000 are admitted on their
// estimate and charged the rest: the third takes the key past its quota,
// so the fourth is refused, while another key is untouched. A request
// that uses less than it asked for gives the rest back.
func TestTokensSettledFromUsage(t *testing.T) {
	base := start(t)
	for i := range 3 {
		if code, _ := complete(t, base, "k1", 1000, 4000); code != http.StatusOK {
			t.Fatalf("request %d: %d, want 200", i+1, code)
		}
	}
	code, fields := complete(t, base, "k1", 1000, 4000)
	if code != http.StatusTooManyRequests {
		t.Errorf("after 12,000 tokens used of 10,000: %d, want 429", code)
	}
	// 2,000 tokens of debt at 10,000 a minute: the next token in 12 s,
	// less the moments the test took.
	var left, wait int
	if _, err := fmt.Sscanf(fields, `"tokens";r=%d;t=%d`, &left, &wait); err != nil || left != 0 || wait < 10 || wait > 13 {
		t.Errorf("429's RateLimit %q: want r=0 and t, the debt's 12 s", fields)
	}
	// Another key: 9,000 asked, 10 used, three times: each gives back what
	// it did not use, so all three fit in 10,000.
	for i := range 3 {
		if code, _ := complete(t, base, "k2", 9000, 10); code != http.StatusOK {
			t.Fatalf("k2 request %d: %d, want 200 (unused tokens given back)", i+1, code)
		}
	}
}

// TestLargeBodyEstimatedBySize: a request body past what the proxy reads
// for its estimate is estimated by its size, about four bytes a token:
// 1.5 MiB is far past 10,000 tokens, refused with no wait that would
// admit it, and the model never sees it.
func TestLargeBodyEstimatedBySize(t *testing.T) {
	base := start(t)
	pad := strings.Repeat("x", 3*maxBody/2)
	body := fmt.Sprintf(`{"model":"m","max_tokens":10,"messages":[{"role":"user","content":%q}]}`, pad)
	req, err := http.NewRequest("POST", base+"/v1/chat/completions", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer big")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Fake-Received") != "" || resp.Header.Get("Retry-After") != "" {
		t.Errorf("%d, Retry-After %q, the model received %q bytes; want 429 without Retry-After, the model never asked",
			resp.StatusCode, resp.Header.Get("Retry-After"), resp.Header.Get("Fake-Received"))
	}
}
