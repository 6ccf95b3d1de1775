package scripts

import (
	"context"
	"errors"

	"github.com/redis/go-redis/v9"
)

// Script is a Lua script with its SHA1 computed once. Run sends EVALSHA and
// falls back to EVAL when the server's script cache does not hold the
// script (NOSCRIPT after a restart, a failover or SCRIPT FLUSH), so that
// case never reaches the caller. In a pipeline go-redis cannot fall back:
// queue EvalSha there, and re-run the commands whose error IsNoScript with
// Run or Eval.
//
// A Script is immutable and safe for concurrent use.
type Script struct {
	name string
	src  string
	rs   *redis.Script
}

// NewScript returns a Script named name (for errors and metrics) running src.
func NewScript(name, src string) *Script {
	return &Script{name: name, src: src, rs: redis.NewScript(src)}
}

// Name returns the script's name, such as "gcra".
func (s *Script) Name() string { return s.name }

// Source returns the text sent with EVAL: for this package's scripts, the
// shared files it is built from followed by the file's body.
func (s *Script) Source() string { return s.src }

// Hash returns the hex SHA1 of the script's source, as EVALSHA wants it.
func (s *Script) Hash() string { return s.rs.Hash() }

// Run runs the script on c with EVALSHA, retried once with EVAL on
// NOSCRIPT, and returns the raw reply for a decoder such as DecodeDecision.
// c must execute commands as they are called: a client, not a pipeline.
//
// A failure that may mean a dead or demoted node makes a cluster client
// re-read its slot map (see NoteError).
func (s *Script) Run(ctx context.Context, c redis.Scripter, keys []string, args ...any) (any, error) {
	reply, err := s.rs.Run(ctx, c, keys, args...).Result()
	NoteError(c, err)
	return reply, err
}

// EvalSha queues or sends EVALSHA without any fallback. Use it in
// pipelines, where an error that IsNoScript means the whole batch should be
// retried through Run (or Eval) after Exec.
func (s *Script) EvalSha(ctx context.Context, c redis.Scripter, keys []string, args ...any) *redis.Cmd {
	return s.rs.EvalSha(ctx, c, keys, args...)
}

// Eval queues or sends EVAL with the full source, which also caches the
// script on the server that runs it.
func (s *Script) Eval(ctx context.Context, c redis.Scripter, keys []string, args ...any) *redis.Cmd {
	return s.rs.Eval(ctx, c, keys, args...)
}

// IsNoScript reports whether err says the server's script cache lacks the
// script, in which case sending it with EVAL (Run, Eval) will work.
func IsNoScript(err error) bool {
	if err == nil {
		return false
	}
	return errors.Is(err, redis.ErrNoScript) || redis.HasErrorPrefix(err, "NOSCRIPT")
}

// slotMapReloader is the part of a cluster client that re-reads the slot
// map: go-redis's *redis.ClusterClient.
type slotMapReloader interface {
	ReloadState(ctx context.Context)
}

// NoteError asks c, if it is a cluster client, to re-read its slot map in
// the background when err may mean the map is out of date: the connection
// failed or timed out (the node may be dead, its replica promoted) or the
// cluster said CLUSTERDOWN or MASTERDOWN (a failover in progress). go-redis
// re-reads the map by itself only on a MOVED reply, which a dead node
// never sends, or once a minute: without this, every call for the slots of
// a killed master would fail for up to a minute after its replica took
// over. go-redis coalesces the requests (one re-read at a time, at most
// one every 200ms), so calling this on every failure is cheap.
//
// Errors Redis replied with (a script error, OOM, NOSCRIPT) and
// cancellation say nothing about the topology and are ignored, as is a
// client that is not a cluster client.
func NoteError(c any, err error) {
	if err == nil || errors.Is(err, context.Canceled) {
		return
	}
	var reply redis.Error
	if errors.As(err, &reply) && !redis.HasErrorPrefix(err, "CLUSTERDOWN") && !redis.HasErrorPrefix(err, "MASTERDOWN") {
		return
	}
	if r, ok := c.(slotMapReloader); ok {
		r.ReloadState(context.Background())
	}
}
