// Command llmproxy is a proxy in front of an LLM API that limits each API
// key to a number of requests a minute and a number of tokens a minute,
// shared by every replica through Redis. A request is admitted on an
// estimate of its tokens (its max_tokens), and once the model has replied
// the estimate is settled to the tokens the reply's usage block reports:
// what was used beyond it is charged whatever the key holds, so a key
// that keeps using more than it asks for is stopped by its debt; what was
// not used is given back. It reads the usage block of whole replies; a
// streamed one (server-sent events) goes through as it comes, and keeps
// its estimate.
//
//	go run ./examples/llmproxy -miniredis        # embedded Redis and a fake model
//	go run ./examples/llmproxy -redis 127.0.0.1:6379 -upstream http://model:8000
//
// Then:
//
//	curl -si localhost:8080/v1/chat/completions -H 'Authorization: Bearer k1' \
//	  -d '{"model":"m","max_tokens":100,"messages":[{"role":"user","content":"hi"}]}'
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/hybridlimit/hybridlimit"
	"github.com/hybridlimit/hybridlimit/httplimit"
	"github.com/hybridlimit/hybridlimit/rules"
	hlsync "github.com/hybridlimit/hybridlimit/sync"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], nil); err != nil {
		fmt.Fprintln(os.Stderr, "llmproxy:", err)
		os.Exit(1)
	}
}

// Limits per API key.
var (
	requestsPerMinute = hybridlimit.PerMinute(60)
	tokensPerMinute   = hybridlimit.PerMinute(10_000)
)

// maxBody bounds the request body the proxy reads for its estimate.
const maxBody = 1 << 20

// run serves until ctx ends. ready, when not nil, is told the address the
// proxy listens on.
func run(ctx context.Context, args []string, ready chan<- string) error {
	fs := flag.NewFlagSet("llmproxy", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:8080", "address to serve on")
	redisAddr := fs.String("redis", "", "Redis address")
	embedded := fs.Bool("miniredis", false, "use an embedded Redis (miniredis) instead of -redis")
	upstream := fs.String("upstream", "", "the model API's base URL; empty: a fake model in process")
	maxWait := fs.Duration("max-wait", 100*time.Millisecond, "how long a decision waits for Redis (hlsync.WithMaxWait)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if *embedded {
		mr, err := miniredis.Run()
		if err != nil {
			return err
		}
		defer mr.Close()
		*redisAddr = mr.Addr()
	}
	if *redisAddr == "" {
		return errors.New("-redis or -miniredis is required")
	}
	rdb := redis.NewClient(&redis.Options{Addr: *redisAddr, ContextTimeoutEnabled: true, ReadTimeout: time.Second})
	defer rdb.Close()

	lim, err := hlsync.New(rdb, hlsync.WithLogger(log), hlsync.WithMaxWait(*maxWait))
	if err != nil {
		return err
	}
	if err := lim.Start(); err != nil {
		return err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = lim.Close(cctx) // hands unused allowance back, and what is owed to Redis
	}()

	if *upstream == "" {
		model, stop, err := serveFakeModel()
		if err != nil {
			return err
		}
		defer stop()
		*upstream = model
	}
	target, err := url.Parse(*upstream)
	if err != nil {
		return err
	}

	key := httplimit.APIKey("Authorization")
	mw, err := httplimit.New([]httplimit.Rule{{
		Name: "requests", Limiter: lim, Limit: requestsPerMinute, Key: key,
	}, {
		Name: "tokens", Limiter: lim, Limit: tokensPerMinute, Key: key,
		CostFunc: estimate, Settle: true,
	}}, httplimit.WithLogger(log))
	if err != nil {
		return err
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	proxy.ModifyResponse = settle
	srv := &http.Server{Handler: mw.Handler(proxy), ReadHeaderTimeout: 5 * time.Second}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	if ready != nil {
		ready <- ln.Addr().String()
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return err
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// completion is what the proxy reads of a request and of a reply.
type completion struct {
	MaxTokens int64 `json:"max_tokens"`
	Messages  []struct {
		Content string `json:"content"`
	} `json:"messages"`
	Usage *struct {
		TotalTokens int64 `json:"total_tokens"`
	} `json:"usage"`
}

// estimate is the tokens a request may use: its prompt, at about four
// bytes a token, and the most it lets the model answer. It reads the body
// (its first maxBody bytes, as a body it cannot parse is estimated by its
// size) and leaves it whole for the proxy to send on.
func estimate(r *http.Request) int64 {
	if r.Body == nil {
		return 1
	}
	var body []byte
	var err error
	body, r.Body, err = peek(r.Body)
	var c completion
	if err != nil || json.Unmarshal(body, &c) != nil {
		return max(int64(len(body))/4, 1)
	}
	prompt := int64(0)
	for _, m := range c.Messages {
		prompt += int64(len(m.Content))/4 + 1
	}
	return max(prompt+c.MaxTokens, 1)
}

// settle reports the tokens the reply's usage block says the request
// used, for the tokens rule to settle its estimate to once the proxy has
// answered.
func settle(resp *http.Response) error {
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		return nil // read, it would be held back until it ends
	}
	var body []byte
	var err error
	body, resp.Body, err = peek(resp.Body)
	if err != nil {
		return err
	}
	var c completion
	if json.Unmarshal(body, &c) != nil || c.Usage == nil {
		return nil // no usage block: the estimate stands
	}
	return rules.ReportCost(resp.Request.Context(), "tokens", c.Usage.TotalTokens)
}

// peek reads up to maxBody bytes of body, and returns them and a body
// that yields all of it still: what was read, then the rest.
func peek(body io.ReadCloser) ([]byte, io.ReadCloser, error) {
	b, err := io.ReadAll(io.LimitReader(body, maxBody))
	return b, struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(b), body), body}, err
}

// serveFakeModel serves a model that answers every completion with a
// usage block of max_tokens and 10 tokens of prompt, or of a Fake-Usage
// header's count; it returns its URL and a function that stops it.
func serveFakeModel() (string, func(), error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var c completion
		_ = json.Unmarshal(body, &c)
		w.Header().Set("Fake-Received", fmt.Sprint(len(body)))
		total := c.MaxTokens + 10
		if u := r.Header.Get("Fake-Usage"); u != "" {
			fmt.Sscan(u, &total)
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"choices":[{"message":{"role":"assistant","content":"..."}}],"usage":{"total_tokens":%d}}`+"\n", total)
	})}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	return "http://" + ln.Addr().String(), func() { _ = srv.Close(); <-done }, nil
}
