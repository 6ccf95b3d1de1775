package account

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/hybridlimit/hybridlimit"
	"github.com/hybridlimit/hybridlimit/internal/scripts"
)

// TestReserveHandBackLost plays two Reserve ledgers against sync.lua when
// a message handing tokens back goes unanswered: the instance cannot tell
// whether Redis took them back (and granted them on), so its next message
// must restate only what it still holds, not the total it last heard, or
// Redis raises its ledger to that total and grants the handed-back tokens
// twice. Whether the hand-back was applied or lost on the way, the grants
// never sum past the bucket, and each ledger ends at what its instance
// holds.
func TestReserveHandBackLost(t *testing.T) {
	// 100 tokens and no refill to speak of: every grant comes from them.
	limit := hybridlimit.Limit{Rate: 100, Period: 1000 * time.Hour, Burst: 100}
	for _, applied := range []bool{true, false} {
		for _, waiting := range []int64{10, 90} {
			t.Run(fmt.Sprintf("applied=%v/waiting=%d", applied, waiting), func(t *testing.T) {
				s := miniredis.RunT(t)
				rdb := redis.NewClient(&redis.Options{Addr: s.Addr()})
				t.Cleanup(func() { _ = rdb.Close() })
				mode := Reserve{Policy: testPolicy()}
				var seq int64
				send := func(id string, m scripts.SyncMsg) scripts.SyncReply {
					t.Helper()
					seq++
					m.Seq, m.Epoch = seq, 1
					h := scripts.SyncHeader{NowUS: 1e15, LedgerTTLMS: 60_000, Mode: scripts.ModeReserve, Instance: id, AllowanceLifeUS: 1}
					keys, args := scripts.SyncCall(h, scripts.SyncKey{Bucket: "{k}", Allowances: "{k}a", Msg: m})
					ints, err := scripts.IntsReply(scripts.Sync.EvalInts(context.Background(), rdb, keys, args))
					if err != nil {
						t.Fatal(err)
					}
					var r [1]scripts.SyncReply
					if err := scripts.ParseSyncReplies(ints, r[:]); err != nil {
						t.Fatal(err)
					}
					return r[0]
				}
				look := func(c *plain, demand float64, synced bool) Look {
					return Look{T: 0, Synced: synced, Holding: Holding{Limit: limit, Key: limit, Live: 2, Demand: demand, Held: c.Held(), Left: 100, Serving: true}}
				}

				// A takes 80 of the 100 tokens.
				var a Ledger
				var ac plain
				a.Waiting = 80
				m, _, _ := a.Compose(mode, &ac, look(&ac, 0, false), limit, false)
				a.Apply(mode, &ac, Look{}, m, send("A", m))
				a.Answered(true)
				a.Waiting = 0
				if ac.Held() != 80 || a.Acked != 80 {
					t.Fatalf("A holds %d, acked %d: want 80, 80", ac.Held(), a.Acked)
				}

				// Idle, A hands most of it back; the reply is lost.
				m, says, _ := a.Compose(mode, &ac, look(&ac, 0, true), limit, false)
				if !says || m.Value >= 80 {
					t.Fatalf("idle A says %v with value %d: want a hand-back", says, m.Value)
				}
				if applied {
					send("A", m)
				} else {
					seq++ // lost on the way: Redis never sees it
				}
				a.Answered(false)

				// B takes everything the bucket holds.
				rb := send("B", scripts.SyncMsg{Rate: limit.Rate, PeriodUS: limit.Period.Microseconds(), Burst: limit.Burst, Budget: -1, Value: 100})

				// A asks again, for waiting decisions.
				a.Waiting = waiting
				m, says, _ = a.Compose(mode, &ac, look(&ac, 0, true), limit, false)
				if !says {
					t.Fatal("A, unanswered, says nothing")
				}
				ra := send("A", m)
				a.Apply(mode, &ac, Look{}, m, ra)
				a.Answered(true)

				if granted := a.Issued + rb.Total; granted > limit.Burst {
					t.Errorf("A holds %d and B %d: %d granted of a bucket of %d", a.Issued, rb.Total, granted, limit.Burst)
				}
				if a.Acked != a.Issued {
					t.Errorf("A's ledger in Redis says %d, A was issued %d", a.Acked, a.Issued)
				}
				if got := a.Issued + rb.Total + ra.Remaining; got != limit.Burst {
					t.Errorf("A %d + B %d + the bucket %d = %d: want %d, nothing lost", a.Issued, rb.Total, ra.Remaining, got, limit.Burst)
				}
			})
		}
	}
}
