package hybridlimit_test

import (
	"context"
	"math/rand/v2"
	"testing"

	"github.com/hybridlimit/hybridlimit"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// Vectors from the Redis Cluster specification and CLUSTER KEYSLOT.
func TestSlotVectors(t *testing.T) {
	tests := []struct {
		key  string
		want int
	}{
		{"123456789", 0x31C3},
		{"", 0},
		{"foo", 12182},
		{"bar", 5061},
		{"{user1000}.following", 3443},
		{"{user1000}.followers", 3443},
		{"user1000", 3443},
		{"foo{}{bar}", hybridlimit.Slot("foo{}{bar}")}, // empty tag: whole key
		{"foo{{bar}}zap", hybridlimit.Slot("{bar")},
		{"foo{bar}{zap}", hybridlimit.Slot("bar")},
	}
	for _, tt := range tests {
		if got := hybridlimit.Slot(tt.key); got != tt.want {
			t.Errorf("Slot(%q) = %d, want %d", tt.key, got, tt.want)
		}
	}
	// The empty-tag rule: "foo{}{bar}" hashes whole, so it differs from "bar".
	if hybridlimit.Slot("foo{}{bar}") == hybridlimit.Slot("bar") {
		t.Errorf("Slot(%q) used the second tag", "foo{}{bar}")
	}
}

// TestSlotMatchesClusterKeyslot checks Slot against a real cluster's
// CLUSTER KEYSLOT on 10,000 random keys, many with hash tags and braces.
func TestSlotMatchesClusterKeyslot(t *testing.T) {
	c := redistest.Cluster(t)
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(1, 2))
	const n = 10000
	keys := make([]string, n)
	for i := range keys {
		keys[i] = randomKey(rng)
	}
	pipe := c.Pipeline()
	cmds := make([]interface{ Val() int64 }, n)
	for i, k := range keys {
		cmds[i] = pipe.ClusterKeySlot(ctx, k)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	bad := 0
	for i, k := range keys {
		if got, want := hybridlimit.Slot(k), int(cmds[i].Val()); got != want {
			if bad++; bad < 10 {
				t.Errorf("Slot(%q) = %d, CLUSTER KEYSLOT = %d", k, got, want)
			}
		}
	}
}

func randomKey(rng *rand.Rand) string {
	const alphabet = "ab{}{}:x\x00\xff%"
	b := make([]byte, rng.IntN(24))
	for i := range b {
		if rng.IntN(3) == 0 {
			b[i] = alphabet[rng.IntN(len(alphabet))]
		} else {
			b[i] = byte(rng.IntN(256))
		}
	}
	if rng.IntN(2) == 0 { // a key as the Keyspace builds it
		ks, _ := hybridlimit.NewKeyspace("p:")
		if k, err := ks.Key(string(b)+"k", "tb"); err == nil {
			return k
		}
	}
	return string(b)
}
