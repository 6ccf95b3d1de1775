package sim

import (
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/hybridlimit/hybridlimit/internal/scripts"
)

// msgKind says what one key's message in a call of the hybrid limiter's
// sync script asked of Redis, for diagnostics (Config.Detail).
type msgKind int

// The kinds. A Reserve message states the total the instance wants to have
// been granted (value) against the total Redis last acknowledged (base).
const (
	// msgGrant asks for more (value > base) and got at least a token.
	msgGrant msgKind = iota
	// msgRefused asks for more and got nothing: the bucket was empty.
	msgRefused
	// msgReturn hands tokens back (value < base).
	msgReturn
	// msgRestate states the acknowledged total again (value = base): a
	// first sync, a retry, or a key that only wants its bucket's news.
	msgRestate
	// msgReport is an Optimistic report of consumption.
	msgReport
	msgKinds
)

// allMsgKinds returns the kinds in order, for iterating.
func allMsgKinds() []msgKind {
	return []msgKind{msgGrant, msgRefused, msgReturn, msgRestate, msgReport}
}

func (k msgKind) String() string {
	return [...]string{"grant", "refused", "return", "restate", "report"}[k]
}

// msgCounts counts key messages by phase and kind.
type msgCounts [phases][msgKinds]int64

// syncCall returns, for a call of the hybrid limiter's sync script (either
// variant, EVALSHA or EVAL), its ARGV and each message's bucket name; nil
// for any other command.
func syncCall(args []any) (argv []any, buckets []string) {
	if len(args) < 3 {
		return nil, nil
	}
	name := strings.ToLower(asString(args[0]))
	body := asString(args[1])
	switch {
	case name == "evalsha" && (body == scripts.Sync.Hash() || body == scripts.SyncCluster.Hash()):
	case name == "eval" && (body == scripts.Sync.Source() || body == scripts.SyncCluster.Source()):
	default:
		return nil, nil
	}
	nkeys, err := strconv.Atoi(asString(args[2]))
	if err != nil || nkeys < 0 || 3+nkeys > len(args) {
		return nil, nil
	}
	argv = args[3+nkeys:]
	if len(argv) < scripts.SyncHeaderArgs {
		return nil, nil
	}
	per := scripts.SyncMode(asString(argv[2])).KeyArgs()
	if (len(argv)-scripts.SyncHeaderArgs)%per != 0 {
		return nil, nil
	}
	for i := scripts.SyncHeaderArgs; i < len(argv); i += per {
		buckets = append(buckets, asString(argv[i]))
	}
	return argv, buckets
}

// classify returns, for a call of the sync script and its reply, each
// message's bucket key and kind; nil for any other command, or a call
// whose reply is not there (an error).
func classify(cmd redis.Cmder) (buckets []string, kinds []msgKind) {
	argv, buckets := syncCall(cmd.Args())
	if buckets == nil {
		return nil, nil
	}
	n := len(buckets)
	var val any
	switch c := cmd.(type) {
	case *redis.IntSliceCmd: // as the limiter sends it
		val = c.Val()
	case *redis.Cmd:
		val = c.Val()
	default:
		return nil, nil
	}
	if cmd.Err() != nil {
		return nil, nil
	}
	replies := make([]scripts.SyncReply, n)
	if scripts.ParseSyncReplies(val, replies) != nil {
		return nil, nil
	}
	reserve := scripts.SyncMode(asString(argv[2])) == scripts.ModeReserve
	for i := range n {
		if replies[i].Elsewhere {
			return nil, nil // not in this model: one server serves every slot
		}
		if !reserve {
			kinds = append(kinds, msgReport)
			continue
		}
		per := scripts.ModeReserve.KeyArgs()
		m, err := scripts.ParseSyncMsg(asString(argv[scripts.SyncHeaderArgs+i*per+per-1]))
		base, value := m.Base, m.Value
		total := replies[i].Total
		switch {
		case err != nil:
			return nil, nil
		case value > base && total > base:
			kinds = append(kinds, msgGrant)
		case value > base:
			kinds = append(kinds, msgRefused)
		case value < base:
			kinds = append(kinds, msgReturn)
		default:
			kinds = append(kinds, msgRestate)
		}
	}
	return buckets, kinds
}
