// Command rls is a drop-in for Envoy's global rate limit service
// (envoyproxy/ratelimit), backed by the hybrid limiter: it speaks the same
// gRPC API, reads the same rules YAML and honours the same environment.
// docs/rls.md says how to run it behind Envoy.
//
// Usage:
//
//	rls                  # configured by the environment, as the reference is
//	rls -embedded-redis  # with an in-process Redis, to try it alone
//
// -embedded-redis (or HYBRIDLIMIT_EMBEDDED_REDIS=true) starts an in-memory
// Redis inside the process. It is never chosen on its own: replicas each
// on a Redis of their own would share no limit.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/alicebob/miniredis/v2"

	"github.com/hybridlimit/hybridlimit/rls"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	fs := flag.NewFlagSet("rls", flag.ContinueOnError)
	embedded := fs.Bool("embedded-redis", false, "serve from an in-memory Redis inside this process (a trial: limits are not shared and not kept)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	set, err := rls.FromEnv(os.LookupEnv, os.Environ())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	log, err := rls.NewLogger(os.Stderr, set.LogLevel, set.LogFormat)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	for _, n := range set.Notes {
		log.Warn("rls: " + n)
	}
	if *embedded || set.EmbeddedRedis {
		if _, ok := os.LookupEnv("REDIS_URL"); ok {
			fmt.Fprintln(os.Stderr, "rls: -embedded-redis and REDIS_URL both name a Redis: choose one")
			return 2
		}
		mr := miniredis.NewMiniRedis()
		if err := mr.StartAddr("127.0.0.1:0"); err != nil {
			fmt.Fprintln(os.Stderr, "rls: embedded redis:", err)
			return 1
		}
		defer mr.Close()
		set.Redis = rls.RedisSettings{SocketType: "tcp", Type: "single", URL: mr.Addr(), PoolSize: set.Redis.PoolSize, Timeout: set.Redis.Timeout}
		set.RedisPerSecond = nil
		log.Warn("rls: serving from an embedded in-memory Redis: limits are not shared with other replicas and are lost on exit", "addr", mr.Addr())
	} else if _, ok := os.LookupEnv("REDIS_URL"); !ok {
		log.Warn("rls: REDIS_URL is not set: using the reference's default, the unix socket " + set.Redis.URL +
			"; run with -embedded-redis to try the service without a Redis")
	}
	srv, err := rls.NewServer(set, log)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := srv.Run(ctx); err != nil {
		log.Error("rls: stopped", "err", err)
		return 1
	}
	return 0
}
