// Command rls is a drop-in for Envoy's global rate limit service
// (envoyproxy/ratelimit), backed by the hybrid limiter: it speaks the same
// gRPC API, reads the same rules YAML and honours the same environment.
// docs/rls.md says how to run it behind Envoy.
//
// Usage:
//
//	rls                  # configured by the environment, as the reference is
//	rls -embedded-redis  # with an in-process Redis, to try it alone
//	rls -check DIR       # check the rules files under DIR, for CI pipelines
//
// -embedded-redis (or HYBRIDLIMIT_EMBEDDED_REDIS=true) starts an in-memory
// Redis inside the process. It is never chosen on its own: replicas each
// on a Redis of their own would share no limit.
//
// -check loads every rules file under DIR (as the service reads its runtime
// directory, with MERGE_DOMAIN_CONFIG's meaning under -merge_domain_configs)
// and exits 0 if they load, 1 with the error naming the file and line if
// not, printing what it reads as the reference's config checker does. It
// needs no Redis.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
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
	checkDir := fs.String("check", "", "check the rules files under this directory and exit: 0 if they load, 1 if not")
	merge := fs.Bool("merge_domain_configs", false, "with -check: let several files define one domain, as MERGE_DOMAIN_CONFIG=true does")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *checkDir != "" {
		return check(os.Stdout, *checkDir, *merge)
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

// check loads the rules files under dir and reports on w.
func check(w io.Writer, dir string, merge bool) int {
	fmt.Fprintln(w, "checking rate limit configs...")
	fmt.Fprintln(w, "loading config directory:", dir)
	files, err := rls.Runtime{Root: dir, Dir: dir}.Read()
	if err != nil {
		fmt.Fprintf(w, "error opening directory %s: %v\n", dir, err)
		return 1
	}
	for i := range files {
		files[i].Name = filepath.Join(dir, files[i].Name) // errors name the path
		fmt.Fprintln(w, "opening config file:", files[i].Name)
	}
	if _, err := rls.LoadConfig(files, merge); err != nil {
		fmt.Fprintln(w, "error loading rate limit configs:", err)
		return 1
	}
	fmt.Fprintln(w, "all rate limit configs ok")
	return 0
}
