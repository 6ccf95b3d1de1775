package sim

import (
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/hybridlimit/hybridlimit/lua"
)

// MsgKind says what one key's message in a call of the hybrid limiter's
// sync script asked of Redis, for diagnostics (Config.Detail).
type MsgKind int

// The kinds. A Reserve message states the total the instance wants to have
// been granted (value) against the total Redis last acknowledged (base).
const (
	// MsgGrant asks for more (value > base) and got at least a token.
	MsgGrant MsgKind = iota
	// MsgRefused asks for more and got nothing: the bucket was empty.
	MsgRefused
	// MsgReturn hands tokens back (value < base).
	MsgReturn
	// MsgRestate states the acknowledged total again (value = base): a
	// first sync, a retry, or a key that only wants its bucket's news.
	MsgRestate
	// MsgReport is an Optimistic report of consumption.
	MsgReport
	msgKinds
)

// MsgKinds returns the kinds in order, for iterating.
func MsgKinds() []MsgKind { return []MsgKind{MsgGrant, MsgRefused, MsgReturn, MsgRestate, MsgReport} }

func (k MsgKind) String() string {
	return [...]string{"grant", "refused", "return", "restate", "report"}[k]
}

// MsgCounts counts key messages by phase and kind.
type MsgCounts [phases][msgKinds]int64

// syncArgs is how many ARGV the sync script takes before the per-key
// groups, and how many each group has (see lua/sync.lua).
const (
	syncArgs    = lua.SyncHeaderArgs
	syncKeyArgs = 1
	syncKeyKeys = lua.SyncKeys
)

// classify returns, for a call of the sync script and its reply, each
// message's bucket key and kind; nil for any other command, or a call
// whose reply is not there (an error).
func classify(cmd redis.Cmder) (buckets []string, kinds []MsgKind) {
	args := cmd.Args()
	if len(args) < 3 {
		return nil, nil
	}
	name := strings.ToLower(asString(args[0]))
	switch {
	case name == "evalsha" && asString(args[1]) == lua.Sync.Hash():
	case name == "eval" && asString(args[1]) == lua.Sync.Source():
	default:
		return nil, nil
	}
	nkeys, err := strconv.Atoi(asString(args[2]))
	if err != nil || nkeys%syncKeyKeys != 0 {
		return nil, nil
	}
	n := nkeys / syncKeyKeys
	argv := args[3+nkeys:]
	if len(argv) != syncArgs+n*syncKeyArgs {
		return nil, nil
	}
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
	replies := make([]lua.SyncReply, n)
	if lua.ParseSyncReplies(val, replies) != nil {
		return nil, nil
	}
	reserve := lua.SyncMode(asString(argv[2])) == lua.ModeReserve
	for i := range n {
		buckets = append(buckets, asString(args[3+i*syncKeyKeys]))
		if !reserve {
			kinds = append(kinds, MsgReport)
			continue
		}
		m, err := lua.ParseSyncMsg(asString(argv[syncArgs+i*syncKeyArgs]))
		base, value := m.Base, m.Value
		total := replies[i].Total
		switch {
		case err != nil:
			return nil, nil
		case value > base && total > base:
			kinds = append(kinds, MsgGrant)
		case value > base:
			kinds = append(kinds, MsgRefused)
		case value < base:
			kinds = append(kinds, MsgReturn)
		default:
			kinds = append(kinds, MsgRestate)
		}
	}
	return buckets, kinds
}
