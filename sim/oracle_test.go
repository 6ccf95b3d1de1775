package sim

import (
	"slices"
	"testing"
	"time"

	"github.com/hybridlimit/hybridlimit"
)

const ms = int64(time.Millisecond)

func TestOracle(t *testing.T) {
	limit := hybridlimit.PerSecond(10).WithBurst(3) // a token every 100ms
	tests := []struct {
		name string
		reqs []request
		want []bool
	}{
		{"burst then empty", []request{{At: 0}, {At: 0}, {At: 0}, {At: 0}}, []bool{true, true, true, false}},
		{"refill after one interval", []request{{At: 0}, {At: 0}, {At: 0}, {At: 99 * ms}, {At: 100 * ms}, {At: 100 * ms}},
			[]bool{true, true, true, false, true, false}},
		{"keys apart", []request{{At: 0, Key: 0}, {At: 0, Key: 0}, {At: 0, Key: 0}, {At: 0, Key: 1}, {At: 0, Key: 0}},
			[]bool{true, true, true, true, false}},
		{"instances share", []request{{At: 0, Inst: 0}, {At: 0, Inst: 1}, {At: 0, Inst: 2}, {At: 0, Inst: 3}},
			[]bool{true, true, true, false}},
		{"full again after burst x interval", []request{{At: 0}, {At: 0}, {At: 0}, {At: 300 * ms}, {At: 300 * ms}, {At: 300 * ms}, {At: 300 * ms}},
			[]bool{true, true, true, true, true, true, false}},
	}
	for _, tt := range tests {
		got, err := runOracle(tt.reqs, 2, limit)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, tt.want) {
			t.Errorf("%s: runOracle = %v, want %v", tt.name, got, tt.want)
		}
	}
}
