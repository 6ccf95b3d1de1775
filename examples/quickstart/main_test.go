package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/hybridlimit/hybridlimit/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// TestREADMEShowsThisFile checks that the service README.md shows is this
// program, whole, so that the README's example always compiles and runs.
func TestREADMEShowsThisFile(t *testing.T) {
	src, err := os.ReadFile("main.go")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(readme), "```go\n"+string(src)+"```\n") {
		t.Error("README.md does not show examples/quickstart/main.go whole in a ```go block: copy it there")
	}
}

// TestServe runs the service against a real Redis: the API key quota
// answers with RateLimit fields, the sixth login attempt in a minute for
// one user is refused, and the end of ctx shuts everything down.
func TestServe(t *testing.T) {
	opt := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, opt) })
	s := redistest.StandaloneServer(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- run(ctx, addr, s.Addr) }()
	t.Cleanup(func() {
		cancel()
		if err := <-errc; err != nil {
			t.Errorf("run: %v", err)
		}
	})
	c := &http.Client{Timeout: 5 * time.Second}
	t.Cleanup(c.CloseIdleConnections)
	base := "http://" + addr
	get := func(key string) *http.Response {
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			req, _ := http.NewRequest("GET", base+"/items", nil)
			req.Header.Set("X-API-Key", key)
			resp, err := c.Do(req)
			if err == nil {
				resp.Body.Close()
				return resp
			}
			if time.Now().After(deadline) {
				t.Fatalf("GET /items: %v", err)
			}
		}
	}
	// A key's first decision fetches from Redis; one that outlasts the
	// max wait (a loaded machine) is the failure policy's, which reports
	// no rule: such a key is left for a fresh one, five at most.
	var resp *http.Response
	for n := 1; n <= 5; n++ {
		if resp = get(fmt.Sprint("key-", n)); resp.StatusCode != http.StatusOK || resp.Header.Get("RateLimit-Policy") != "" {
			break
		}
	}
	if resp.StatusCode != http.StatusOK || !strings.Contains(resp.Header.Get("RateLimit-Policy"), `"api-key";q=1000;w=60`) {
		t.Errorf("GET /items = %d, RateLimit-Policy %q; want 200 and the api-key policy", resp.StatusCode, resp.Header.Get("RateLimit-Policy"))
	}
	for i := 1; i <= 6; i++ {
		resp, err := c.PostForm(base+"/login", url.Values{"user": {"alice"}})
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		want := http.StatusOK
		if i == 6 {
			want = http.StatusTooManyRequests
		}
		if resp.StatusCode != want {
			t.Errorf("login attempt %d = %d, want %d", i, resp.StatusCode, want)
		}
	}
}
