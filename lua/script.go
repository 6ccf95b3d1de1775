package lua

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
// preamble followed by the file's body.
func (s *Script) Source() string { return s.src }

// Hash returns the hex SHA1 of the script's source, as EVALSHA wants it.
func (s *Script) Hash() string { return s.rs.Hash() }

// Run runs the script on c with EVALSHA, retried once with EVAL on
// NOSCRIPT, and returns the raw reply for a decoder such as DecodeDecision.
// c must execute commands as they are called: a client, not a pipeline.
func (s *Script) Run(ctx context.Context, c redis.Scripter, keys []string, args ...any) (any, error) {
	return s.rs.Run(ctx, c, keys, args...).Result()
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
