package lua

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// The shape of a call of Sync (see sync.lua): SyncHeaderArgs arguments,
// then per key SyncKeys KEYS and one ARGV, the key's message; the reply
// holds SyncReplyLen integers per key.
const (
	SyncHeaderArgs = 5
	SyncKeys       = 2
	SyncReplyLen   = 9
)

// SyncMsg is one key's message in a call of Sync: the integers sync.lua
// reads from the key's ARGV. Budget and Held may be -1 (none, closing);
// every other field is at least 0, Rate and PeriodUS at least 1.
type SyncMsg struct {
	Rate, PeriodUS, Burst int64 // the key's limit
	Seq, Epoch            int64 // the message's sequence number, the state's first
	Base, Value           int64 // the total last heard, the total stated
	Budget, Held          int64 // report mode: overshoot budget, allowance held
	// Owed is the cost admitted without a grant, not yet acknowledged,
	// taken from the bucket as of AgeUS microseconds ago.
	Owed, AgeUS int64
}

// syncMsgFields is the number of integers in a message.
const syncMsgFields = 11

// Append appends m as sync.lua reads it, eleven decimal integers separated by
// single spaces, and returns the extended buffer. Building every message of
// a call into one buffer, rather than passing eleven boxed integers, is what
// keeps a round's cost per key low on both sides.
func (m SyncMsg) Append(b []byte) []byte {
	for i, v := range [syncMsgFields]int64{m.Rate, m.PeriodUS, m.Burst, m.Seq, m.Epoch, m.Base, m.Value, m.Budget, m.Held, m.Owed, m.AgeUS} {
		if i > 0 {
			b = append(b, ' ')
		}
		b = strconv.AppendInt(b, v, 10)
	}
	return b
}

// String returns m as Append writes it: the key's ARGV.
func (m SyncMsg) String() string { return string(m.Append(nil)) }

// ParseSyncMsg parses a message that Append wrote.
func ParseSyncMsg(s string) (SyncMsg, error) {
	var v [syncMsgFields]int64
	rest := s
	for i := range v {
		field, tail, found := strings.Cut(rest, " ")
		if found != (i < len(v)-1) {
			return SyncMsg{}, fmt.Errorf("lua: sync message %q: want %d integers", s, syncMsgFields)
		}
		n, err := strconv.ParseInt(field, 10, 64)
		if err != nil {
			return SyncMsg{}, fmt.Errorf("lua: sync message %q: %w", s, err)
		}
		v[i], rest = n, tail
	}
	return SyncMsg{v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8], v[9], v[10]}, nil
}

// Processor runs or queues a command: a client or a pipeline.
type Processor interface {
	Process(ctx context.Context, cmd redis.Cmder) error
}

// EvalShaInts queues or sends EVALSHA on p without any fallback, for a
// script whose reply is an array of integers: the reply is read straight
// into a []int64, with no value boxed on the way. The command refers to
// keys, which must not change until it is done. Check it with
// DecodeInts. In a pipeline, a command whose error IsNoScript should be
// sent again with EvalInts, as for EvalSha.
func (s *Script) EvalShaInts(ctx context.Context, p Processor, keys []string, args []any) *redis.IntSliceCmd {
	return s.ints(ctx, p, "evalsha", s.Hash(), keys, args)
}

// EvalInts is EvalShaInts with EVAL and the full source, which also caches
// the script on the server that runs it.
func (s *Script) EvalInts(ctx context.Context, p Processor, keys []string, args []any) *redis.IntSliceCmd {
	return s.ints(ctx, p, "eval", s.src, keys, args)
}

func (s *Script) ints(ctx context.Context, p Processor, verb, script string, keys []string, args []any) *redis.IntSliceCmd {
	all := make([]any, 0, 3+len(keys)+len(args))
	all = append(all, verb, script, len(keys))
	for i := range keys {
		// A pointer fits in an interface as it is; a string would be
		// copied to the heap, one allocation a key. go-redis writes and
		// routes by *string as by string.
		all = append(all, &keys[i])
	}
	all = append(all, args...)
	cmd := redis.NewIntSliceCmd(ctx, all...)
	if len(keys) > 0 {
		cmd.SetFirstKeyPos(3) // a cluster client routes by KEYS[1]
	}
	_ = p.Process(ctx, cmd) // the error, if any, is the command's
	return cmd
}

// IntsReply returns the reply of a command that EvalShaInts or EvalInts
// queued. A reply that was not an array of integers, which go-redis
// reports as a parse error, is reported as ErrMalformedReply, as
// DecodeInts would; errors Redis replied with and connection errors are
// returned as they are.
func IntsReply(cmd *redis.IntSliceCmd) ([]int64, error) {
	v, err := cmd.Result()
	var num *strconv.NumError
	var reply redis.Error
	if err != nil && !errors.As(err, &reply) &&
		(errors.As(err, &num) || strings.HasPrefix(err.Error(), "redis: can't parse")) {
		return nil, fmt.Errorf("%w: %w", ErrMalformedReply, err)
	}
	return v, err
}
