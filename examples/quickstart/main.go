// Command quickstart is the service of the README: an HTTP API whose
// replicas share, through Redis, a quota of 1000 requests a minute per API
// key and a strict limit of 5 login attempts a minute per user name.
//
//	REDIS_ADDR=localhost:6379 go run ./examples/quickstart
package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hybridlimit/hybridlimit"
	"github.com/hybridlimit/hybridlimit/global"
	"github.com/hybridlimit/hybridlimit/httplimit"
	hlsync "github.com/hybridlimit/hybridlimit/sync"
)

func main() {
	// SIGTERM (a rolling deploy) and Ctrl-C end ctx, and the service with it.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, ":8080", os.Getenv("REDIS_ADDR")); err != nil {
		log.Fatal(err)
	}
}

// run serves on addr until ctx ends, then shuts down in order: the server
// first, so that no request is in flight, then the limiter, which hands its
// unused allowance back to Redis for the other replicas.
func run(ctx context.Context, addr, redisAddr string) error {
	rdb := redis.NewClient(&redis.Options{
		Addr: redisAddr,
		// Let the limiters' deadlines cut a slow call short.
		ContextTimeoutEnabled: true,
		// A few sync intervals (the default interval is 250ms).
		ReadTimeout: time.Second,
		// Never resend a script whose reply was lost: an exact limiter's
		// script that ran twice would spend twice.
		MaxRetries: -1,
	})
	defer rdb.Close()

	// The hybrid limiter: decisions in memory, reconciled with Redis in the
	// background. New starts nothing; Start starts its one goroutine.
	quota, err := hlsync.New(rdb)
	if err != nil {
		return err
	}
	if err := quota.Start(); err != nil {
		return err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := quota.Close(cctx); err != nil {
			log.Printf("closing the limiter: %v", err)
		}
	}()

	// An exact limiter: one Redis script per decision, for a low limit that
	// must hold on every request.
	logins, err := global.New(rdb, global.GCRA)
	if err != nil {
		return err
	}

	mw, err := httplimit.New([]httplimit.Rule{{
		Name:    "api-key",
		Limiter: quota,
		Limit:   hybridlimit.PerMinute(1000),
		Key:     httplimit.APIKey("X-API-Key"),
	}, {
		Name:    "login",
		Limiter: logins,
		Limit:   hybridlimit.PerMinute(5),
		Key:     loginUser,
		Match:   httplimit.PathPrefixes("/login"),
		OnError: hybridlimit.FailClosed, // Redis unreachable: refuse (503)
	}})
	if err != nil {
		return err
	}

	mux := http.NewServeMux()
	mux.HandleFunc("GET /items", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "[]")
	})
	mux.HandleFunc("POST /login", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "welcome")
	})
	srv := &http.Server{Addr: addr, Handler: mw.Handler(mux), ReadHeaderTimeout: 5 * time.Second}

	errc := make(chan error, 1)
	go func() { errc <- srv.ListenAndServe() }()
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

// loginUser keys the login limit by the user name the form names, so that
// guessing one account's password is slow from however many addresses.
func loginUser(r *http.Request) (string, bool) {
	u := r.PostFormValue("user")
	return u, u != ""
}
