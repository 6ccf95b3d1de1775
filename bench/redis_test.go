package bench

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// requireEnv turns a missing redis-server from a skip into a failure, as in
// the main module's tests.
const requireEnv = "HYBRIDLIMIT_REQUIRE_REDIS"

// server is the one redis-server this test binary starts: on a free
// loopback port, in a temporary directory, with persistence off. Every
// Redis benchmark shares it, the peers included, and keeps apart from the
// others by key prefix; nothing is ever flushed.
type server struct {
	addr    string
	dir     string
	version string
	cmd     *exec.Cmd
}

// srv is the server started by TestMain, or nil; srvErr says why not.
var (
	srv    *server
	srvErr error
)

// startServer starts redis-server and waits until it answers PING.
func startServer() (*server, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, errors.New("redis-server is not on PATH (Debian: apt-get install -y redis-server)")
	}
	var lastErr error
	for range 5 { // a free port can be taken between probe and bind
		s, err := startOnce(bin)
		if err == nil {
			return s, nil
		}
		lastErr = err
	}
	return nil, lastErr
}

func startOnce(bin string) (*server, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "hybridlimit-bench-")
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin,
		"--bind", "127.0.0.1",
		"--port", strconv.Itoa(port),
		"--dir", dir,
		"--save", "",
		"--appendonly", "no",
		"--protected-mode", "no",
		"--loglevel", "warning",
		"--logfile", filepath.Join(dir, "redis.log"))
	if err := cmd.Start(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	s := &server{addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), dir: dir, cmd: cmd}
	c := redis.NewClient(&redis.Options{Addr: s.addr})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		info, err := c.Info(ctx, "server").Result()
		cancel()
		if err == nil {
			s.version = infoField(info, "redis_version")
			return s, nil
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(dir, "redis.log"))
			s.stop()
			return nil, fmt.Errorf("redis-server on %s not ready: %v; log: %s", s.addr, err, log)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stop kills the server and removes its directory.
func (s *server) stop() {
	if s.cmd.Process != nil {
		_ = s.cmd.Process.Kill()
		_ = s.cmd.Wait()
	}
	_ = os.RemoveAll(s.dir)
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// client returns a new client to the shared server with go-redis defaults
// (a pool of 10 connections per GOMAXPROCS), the same for every limiter
// measured, closed when the benchmark ends. It skips the benchmark when
// there is no server, or fails it when HYBRIDLIMIT_REQUIRE_REDIS=1.
func client(b *testing.B) *redis.Client {
	b.Helper()
	if srv == nil {
		if os.Getenv(requireEnv) == "1" {
			b.Fatalf("no Redis (%s=1): %v", requireEnv, srvErr)
		}
		b.Skipf("no Redis: %v", srvErr)
	}
	c := redis.NewClient(&redis.Options{Addr: srv.addr})
	b.Cleanup(func() { _ = c.Close() })
	return c
}

// prefix returns a key prefix unique to this run of the benchmark, so that
// runs never see each other's state.
func prefix(b *testing.B) string {
	var r [4]byte
	_, _ = rand.Read(r[:])
	return "bench:" + hex.EncodeToString(r[:]) + ":"
}

// commandStats is a reading of INFO commandstats: the calls of every
// command since the server started, and the microseconds spent in them,
// keyed by name.
type commandStats map[string]commandStat

type commandStat struct{ calls, usec int64 }

// readCommandStats reads INFO commandstats.
func readCommandStats(b *testing.B, c *redis.Client) commandStats {
	b.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatalf("INFO commandstats: %v", err)
	}
	st, err := parseCommandStats(info)
	if err != nil {
		b.Fatalf("INFO commandstats: %v", err)
	}
	return st
}

// parseCommandStats parses the lines of INFO commandstats, such as
// "cmdstat_evalsha:calls=12,usec=345,usec_per_call=28.75,...".
func parseCommandStats(info string) (commandStats, error) {
	st := commandStats{}
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		name, rest, ok := strings.Cut(strings.TrimSpace(sc.Text()), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		var cs commandStat
		for _, field := range strings.Split(rest, ",") {
			k, v, _ := strings.Cut(field, "=")
			var dst *int64
			switch k {
			case "calls":
				dst = &cs.calls
			case "usec":
				dst = &cs.usec
			default:
				continue
			}
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("bad line %q", sc.Text())
			}
			*dst = n
		}
		st[strings.TrimPrefix(name, "cmdstat_")] = cs
	}
	return st, sc.Err()
}

// redisCost is what Redis did between two readings of INFO commandstats.
type redisCost struct {
	// commands is every command Redis ran, counting those a script runs
	// with redis.call (TIME, HMGET, HSET...) as INFO commandstats does,
	// and not counting the INFO readings themselves.
	commands int64
	// scripts is the EVAL and EVALSHA calls (and their _RO forms): the
	// requests clients sent, since every limiter here talks to Redis
	// through scripts only.
	scripts int64
	// scriptUsec is the time Redis spent running those scripts, the
	// commands they call included: the server's share of a decision.
	scriptUsec int64
}

func (after commandStats) since(before commandStats) redisCost {
	var c redisCost
	for name, cs := range after {
		calls := cs.calls - before[name].calls
		switch name {
		case "info":
			continue
		case "eval", "evalsha", "eval_ro", "evalsha_ro":
			c.scripts += calls
			c.scriptUsec += cs.usec - before[name].usec
		}
		c.commands += calls
	}
	return c
}

// report adds the Redis cost per decision to the benchmark's metrics.
func (c redisCost) report(b *testing.B, decisions int) {
	if decisions <= 0 {
		return
	}
	n := float64(decisions)
	b.ReportMetric(float64(c.commands)/n, "redis-cmds/op")
	b.ReportMetric(float64(c.scripts)/n, "redis-scripts/op")
	b.ReportMetric(float64(c.scriptUsec)*1e3/n, "redis-ns/op")
}

// infoField returns the value of field in an INFO reply, or "".
func infoField(info, field string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			return v
		}
	}
	return ""
}
