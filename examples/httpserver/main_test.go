package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/hybridlimit/hybridlimit/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// start runs the server with args on a free port until the test ends, and
// returns its base URL.
//
// The tests check Redis's answers (the RateLimit fields, the 11th
// request's 429): a cold key's first fetch under -race on a loaded machine
// can outlast the default 100ms wait, and the failure policy would answer
// it, without fields. So the server waits for Redis up to 2 s.
func start(t *testing.T, args ...string) string {
	t.Helper()
	args = append([]string{"-max-wait", "2s"}, args...)
	opt := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, opt) })
	ctx, cancel := context.WithCancel(context.Background())
	addrc := make(chan string, 1)
	errc := make(chan error, 1)
	go func() {
		errc <- run(ctx, append([]string{"-addr", "127.0.0.1:0"}, args...), io.Discard, func(a string) { addrc <- a })
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-errc; err != nil {
			t.Errorf("run: %v", err)
		}
		http.DefaultClient.CloseIdleConnections()
	})
	select {
	case a := <-addrc:
		return "http://" + a
	case err := <-errc:
		t.Fatalf("run: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("server not listening after 10s")
	}
	return ""
}

func get(t *testing.T, url string, header ...string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(body)
}

// exercise checks the behaviour both rule sets share: ten requests a
// minute per IP, then 429 with the fields; two searches a second; metrics.
func exercise(t *testing.T, base string, hybridKeys int) {
	for i := range 10 {
		resp, _ := get(t, base+"/hello")
		if resp.StatusCode != 200 {
			t.Fatalf("request %d: %d", i, resp.StatusCode)
		}
		if resp.Header.Get("RateLimit") == "" || resp.Header.Get("RateLimit-Policy") == "" {
			t.Errorf("request %d: no RateLimit fields: %v", i, resp.Header)
		}
	}
	resp, body := get(t, base+"/hello")
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" ||
		!strings.Contains(body, `"violated-policies":["per-ip"]`) || resp.Header.Get("X-RateLimit-Remaining") != "0" {
		t.Errorf("11th request: %d %v %s", resp.StatusCode, resp.Header, body)
	}
	if resp, _ := get(t, base+"/healthz"); resp.StatusCode != 200 {
		t.Errorf("healthz: %d", resp.StatusCode)
	}
	_, body = get(t, base+"/metrics")
	for _, want := range []string{
		`hybridlimit_http_requests_total{result="limited"} 1`,
		`hybridlimit_http_rule_decisions_total{limiter="hybrid",mode="enforce",outcome="denied",rule="per-ip"} 1`,
		`hybridlimit_sync_tracked_keys ` + strconv.Itoa(hybridKeys),
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

func TestServerRedis(t *testing.T) {
	base := start(t, "-redis", redistest.StandaloneServer(t).Addr, "-trust", "127.0.0.0/8")
	exercise(t, base, 1)
	// The search rule: two a second per client. Loopback is a trusted
	// proxy, so this client is the one X-Forwarded-For names, with its
	// own per-ip quota.
	var codes []int
	var last string
	for range 3 {
		resp, body := get(t, base+"/search?q=x", "X-Forwarded-For", "198.51.100.7")
		codes = append(codes, resp.StatusCode)
		last = body
	}
	if codes[0] != 200 || codes[1] != 200 || (codes[2] != 429 && codes[2] != 200) { // a second may turn between requests
		t.Errorf("searches: %v", codes)
	}
	if codes[2] == 429 && !strings.Contains(last, `"violated-policies":["search"]`) {
		t.Errorf("third search: %s", last)
	}
}

func TestServerMiniredisConfig(t *testing.T) {
	base := start(t, "-miniredis", "-config", "rules.yaml")
	exercise(t, base, 2) // per-ip and the shadow rule
	_, body := get(t, base+"/metrics")
	// The shadow rule of rules.yaml, last, sees the 10 requests per-ip
	// admitted, and would have denied 5 of them.
	if want := `hybridlimit_http_rule_decisions_total{limiter="hybrid",mode="shadow",outcome="shadow_denied",rule="trial"} 5`; !strings.Contains(body, want) {
		t.Errorf("metrics lack %s", want)
	}
}

func TestServerFlags(t *testing.T) {
	for _, args := range [][]string{
		{},
		{"-redis", "127.0.0.1:1", "-miniredis"},
		{"-miniredis", "-config", "missing.yaml"},
		{"-miniredis", "-trust", "not-a-cidr"},
		{"-miniredis", "-max-wait", "-1s"},
		{"-miniredis", "-config", "rules.yaml", "-trust", "127.0.0.0/8"}, // was ignored without a word
		{"-bogus"},
	} {
		if err := run(context.Background(), args, io.Discard, nil); err == nil {
			t.Errorf("run(%q) = nil, want an error", args)
		}
	}
}

// TestServerReloadAndReset edits the rules file of a running server and
// sends it SIGHUP: the new limit is announced while the spent quota is
// kept. The admin endpoint resets a key (where the rule's limiter can),
// from loopback.
func TestServerReloadAndReset(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "rules.yaml")
	rules := func(rate int) []byte {
		return []byte(fmt.Sprintf("rules:\n  - name: per-ip\n    limiter: local\n    limit: {rate: %d, period: 1m}\n    key: ip\n", rate))
	}
	if err := os.WriteFile(path, rules(3), 0o600); err != nil {
		t.Fatal(err)
	}
	base := start(t, "-miniredis", "-config", path)
	for range 3 {
		get(t, base+"/hello")
	}
	if resp, body := get(t, base+"/hello"); resp.StatusCode != 429 || !strings.Contains(body, `"violated-policies":["per-ip"]`) {
		t.Fatalf("4th request: %d %s", resp.StatusCode, body)
	}
	if err := os.WriteFile(path, rules(600), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		resp, _ := get(t, base+"/hello")
		if p := resp.Header.Get("RateLimit-Policy"); p == `"per-ip";q=600;w=60` {
			// 600 a minute refills a token every 100ms: the key, empty
			// at the reload, has refilled a few since.
			if strings.Contains(resp.Header.Get("RateLimit"), "r=600") {
				t.Errorf("the reload forgot the spent quota: %s", resp.Header.Get("RateLimit"))
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no reload after 5s: RateLimit-Policy %q", resp.Header.Get("RateLimit-Policy"))
		}
		time.Sleep(20 * time.Millisecond)
	}
	resp, err := http.Post(base+"/admin/reset?rule=per-ip&key=127.0.0.1", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("reset: %d", resp.StatusCode)
	}
	if resp, _ := get(t, base+"/hello"); !strings.Contains(resp.Header.Get("RateLimit"), "r=599") {
		t.Errorf("after the reset: RateLimit %q, want r=599 of 600", resp.Header.Get("RateLimit"))
	}
	resp, err = http.Post(base+"/admin/reset?rule=nope&key=x", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 400 {
		t.Errorf("reset of an unknown rule: %d, want 400", resp.StatusCode)
	}
}
