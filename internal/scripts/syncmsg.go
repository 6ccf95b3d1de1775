package scripts

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// The shape of a call of Sync (see sync.lua): one KEYS, the first key's
// bucket, which routes the call; SyncHeaderArgs ARGV (SyncHeader), the
// last of them SyncVersion, then the mode's KeyArgs per key: its bucket,
// its allowances (optimistic mode only) and its message (SyncMsg). The
// reply holds SyncReplyLen integers per key (SyncReply).
const (
	SyncHeaderArgs = 6
	SyncReplyLen   = 9
)

// SyncVersion is the version of the Sync call's wire format that this
// package writes and sync.lua reads: the header, the messages, the reply
// and the ledgers. Version 1 is the header of five ARGV with no version,
// whose sixth ARGV is the first key's bucket; version 2 wrote messages and
// ledgers as decimal text. sync.lua answers a call of any other version
// with an error and writes nothing, so that an instance never has its
// messages misread (docs/design.md, 6.2, on a rolling deploy).
const SyncVersion = 3

// SyncMode names a reconcile mode on the wire, as sync.lua reads it.
type SyncMode string

// The modes of sync.lua, named as package sync names them.
const (
	// ModeReserve: a message states the tokens granted in all; Redis
	// grants from the bucket before the instance spends.
	ModeReserve SyncMode = "reserve"
	// ModeOptimistic: a message states the tokens admitted in all; Redis
	// debits them, and replies with the allowance to spend until the next.
	ModeOptimistic SyncMode = "optimistic"
)

// KeyArgs returns how many ARGV a key takes in a call of this mode: its
// bucket and its message, and in optimistic mode, where allowances are
// recorded, its allowances between them.
func (m SyncMode) KeyArgs() int {
	if m == ModeReserve {
		return 2
	}
	return 3
}

// SyncHeader is what a call of Sync says once for all its messages.
type SyncHeader struct {
	NowUS           int64 // the caller's time in microseconds, or 0 for Redis TIME
	LedgerTTLMS     int64 // how long a ledger outlives its last message
	Mode            SyncMode
	Instance        string // the instance's id, which names its ledger
	AllowanceLifeUS int64  // optimistic: how long a recorded allowance counts
}

// Args returns the header as the first SyncHeaderArgs ARGV of a call,
// SyncVersion last.
func (h SyncHeader) Args() [SyncHeaderArgs]any {
	return [SyncHeaderArgs]any{h.NowUS, h.LedgerTTLMS, string(h.Mode), h.Instance, h.AllowanceLifeUS, SyncVersion}
}

// SyncMsg is one key's message in a call of Sync: the integers sync.lua
// reads from the key's ARGV. Budget and Held may be -1 (none, closing);
// every other field is at least 0, Rate and PeriodUS at least 1.
type SyncMsg struct {
	Rate, PeriodUS, Burst int64 // the key's limit
	Seq, Epoch            int64 // the message's sequence number, the state's first
	Base, Value           int64 // the total last heard, the total stated
	Budget, Held          int64 // optimistic: overshoot budget, allowance held
	// Owed is the cost admitted without a grant, not yet acknowledged,
	// taken from the bucket as of AgeUS microseconds ago.
	Owed, AgeUS int64
}

// syncMsgFields is the number of integers in a message.
const syncMsgFields = 11

// SyncMsgLen is the length of a message on the wire, in bytes.
const SyncMsgLen = 8 * syncMsgFields

// Append appends m as sync.lua reads it, eleven little-endian doubles
// (lua/packed.lua), and returns the extended buffer. Building every message
// of a call into one buffer, rather than passing eleven boxed integers, is
// what keeps a round's cost per key low on both sides; Redis unpacks a
// message in one call where decimal text takes a pattern match and eleven
// conversions. The fields must be integers of magnitude below 2^53, which
// a double holds exactly.
func (m SyncMsg) Append(b []byte) []byte {
	return appendDoubles(b, m.Rate, m.PeriodUS, m.Burst, m.Seq, m.Epoch, m.Base, m.Value, m.Budget, m.Held, m.Owed, m.AgeUS)
}

// String returns m as Append writes it: the key's ARGV.
func (m SyncMsg) String() string { return string(m.Append(nil)) }

// ParseSyncMsg parses a message that Append wrote.
func ParseSyncMsg(s string) (SyncMsg, error) {
	var v [syncMsgFields]int64
	if err := parseDoubles(s, v[:]); err != nil {
		return SyncMsg{}, fmt.Errorf("scripts: sync message: %w", err)
	}
	return SyncMsg{v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8], v[9], v[10]}, nil
}

// SyncLedger is an instance's ledger of one key as sync.lua stores it,
// under SyncLedgerField in the key's bucket: four little-endian doubles.
type SyncLedger struct {
	Seq   int64 // the last message applied
	Epoch int64 // the first sequence number of the state that wrote it
	Total int64 // tokens granted (reserve) or debited (optimistic) in all
	AtS   int64 // when it was written, in Unix seconds by the scripts' clock
}

// SyncLedgerField returns the field of a key's bucket that holds the
// ledger of the instance id.
func SyncLedgerField(id string) string { return "lb:" + id }

// String returns l as sync.lua stores it.
func (l SyncLedger) String() string {
	return string(appendDoubles(nil, l.Seq, l.Epoch, l.Total, l.AtS))
}

// ParseSyncLedger parses a stored ledger.
func ParseSyncLedger(s string) (SyncLedger, error) {
	var v [4]int64
	if err := parseDoubles(s, v[:]); err != nil {
		return SyncLedger{}, fmt.Errorf("scripts: sync ledger: %w", err)
	}
	return SyncLedger{v[0], v[1], v[2], v[3]}, nil
}

// appendDoubles appends each of vs as a little-endian double.
func appendDoubles(b []byte, vs ...int64) []byte {
	for _, v := range vs {
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(float64(v)))
	}
	return b
}

// parseDoubles reads len(dst) little-endian doubles, each an integer,
// from s into dst.
func parseDoubles(s string, dst []int64) error {
	if len(s) != 8*len(dst) {
		return fmt.Errorf("%d bytes, want %d", len(s), 8*len(dst))
	}
	for i := range dst {
		f := math.Float64frombits(binary.LittleEndian.Uint64([]byte(s[8*i : 8*i+8])))
		if f != math.Trunc(f) || math.Abs(f) >= 1<<53 {
			return fmt.Errorf("field %d is %v, not an integer below 2^53", i, f)
		}
		dst[i] = int64(f)
	}
	return nil
}

// SyncReply is Redis's answer to one message of a Sync call.
type SyncReply struct {
	Total     int64 // the ledger's total after the message
	Remaining int64 // whole tokens left in the bucket; 0 in debt or moved
	RetryUS   int64 // microseconds until a token is due; 0 if one is there
	ResetUS   int64 // microseconds until the bucket is full
	Allowance int64 // optimistic: what the instance may admit beyond its report
	// Shards and Generation name the layout a closed part's marker points
	// to, where the key lives now; 0, 0 for an open bucket.
	Shards, Generation int64
	// LedgerSeq is the ledger's sequence number as the message found it:
	// above the message's own, the message was not applied (an earlier
	// run of the instance, under the same id, numbered past it).
	LedgerSeq int64
	// Reset says the key was reset (SyncReset) since the instance's ledger
	// was written: the message was not applied, and the instance forgets
	// what it holds and owes for the key.
	Reset bool
	// Elsewhere says the node the call ran on does not serve the key's
	// slot (a cluster moved it): nothing was written, every other field
	// is 0, and the message goes again to the key's master.
	Elsewhere bool
}

// Moved reports whether the message reached a closed part: the key lives
// in the layout Shards and Generation name.
func (r SyncReply) Moved() bool { return r.Shards > 0 }

// ParseSyncReplies checks the reply of a Sync call of len(dst) messages,
// SyncReplyLen non-negative integers each, and stores each message's
// reply in dst. It is the one place a Sync reply is taken apart.
func ParseSyncReplies(reply any, dst []SyncReply) error {
	v, err := DecodeInts(reply, SyncReplyLen*len(dst))
	if err != nil {
		return err
	}
	for i := range dst {
		f := v[SyncReplyLen*i : SyncReplyLen*(i+1)]
		if slices.Min(f) < 0 || f[8] > 2 || (f[5] == 0 && f[6] != 0) || (f[8] == 2 && slices.Max(f[:8]) != 0) {
			return fmt.Errorf("%w: sync reply %v", ErrMalformedReply, f)
		}
		dst[i] = SyncReply{
			Total: f[0], Remaining: f[1], RetryUS: f[2], ResetUS: f[3], Allowance: f[4],
			Shards: f[5], Generation: f[6], LedgerSeq: f[7], Reset: f[8] == 1, Elsewhere: f[8] == 2,
		}
	}
	return nil
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

// SyncKey is one key's part of a call of Sync: the names of its bucket and
// of its allowances (the same hash tag; optimistic mode only), and its
// message.
type SyncKey struct {
	Bucket, Allowances string
	Msg                SyncMsg
}

// SyncCall returns the KEYS and ARGV of a call of Sync with header h and
// the messages of keys, in order. The hybrid limiter writes its calls
// without it, so as not to allocate a string per key; it serves tests and
// tools.
func SyncCall(h SyncHeader, keys ...SyncKey) ([]string, []any) {
	head := h.Args()
	args := append(make([]any, 0, SyncHeaderArgs+h.Mode.KeyArgs()*len(keys)), head[:]...)
	for _, k := range keys {
		args = append(args, k.Bucket)
		if h.Mode.KeyArgs() == 3 {
			args = append(args, k.Allowances)
		}
		args = append(args, k.Msg.String())
	}
	var route []string
	if len(keys) > 0 {
		route = []string{keys[0].Bucket}
	}
	return route, args
}
