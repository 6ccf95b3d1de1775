package sim

import (
	"testing"
	"time"

	"github.com/hybridlimit/hybridlimit"
)

func TestCallerKey(t *testing.T) {
	tests := []struct {
		in  string
		key int
		ok  bool
	}{
		{"sim:{s3.0}:h:k12", 12, true},
		{"sim:{s3.0}:h#1.4:k12", 12, true},
		{"sim:{s3.0}:h#3.4.2:k12", 12, true},
		{"sim:{s3.0}:hx:k12", 0, false},
		{"sim:{k7}:tb", 7, true},
		{"sim:{s3.0}:b:k12", 0, false},
		{"sim:{s3.0}:a:k12", 0, false},
		{"sim:{presence}:instances", 0, false},
	}
	for _, tt := range tests {
		if key, ok := callerKey(tt.in); key != tt.key || ok != tt.ok {
			t.Errorf("callerKey(%q) = %d, %v, want %d, %v", tt.in, key, ok, tt.key, tt.ok)
		}
	}
}

func TestBreakdown(t *testing.T) {
	limit := hybridlimit.PerSecond(100)
	r := Result{
		perKey: []keyCount{{Key: 0, Demand: 500, Admitted: 200, Oracle: 200}, {Key: 1, Demand: 50, Admitted: 50, Oracle: 50}, {Key: 2, Demand: 1, Admitted: 1, Oracle: 1}},
		Diag: Diagnostics{
			keyCommands: map[string][phases]int64{"sim:{s1.0}:h:k0": {3, 4, 0}, "sim:{s1.0}:a:k0": {3, 4, 0}, "sim:{s2.0}:h:k2": {1, 0, 0}},
			keyMessages: map[string]msgCounts{"sim:{s1.0}:h:k0": {phaseRound: {msgGrant: 2, msgReturn: 1}}},
		},
	}
	rows := breakdown(r, limit, 2*time.Second) // the limit adds 200 tokens
	if rows[0].Keys != 1 || rows[0].Demand != 500 || rows[0].Messages != [phases]int64{3, 4, 0} {
		t.Errorf("over the limit: %+v", rows[0])
	}
	if want := (msgCounts{phaseRound: {msgGrant: 2, msgReturn: 1}}); rows[0].Kinds != want || rows[3].Kinds != (msgCounts{}) {
		t.Errorf("kinds: over the limit %v, want %v; under 1%% %v, want none", rows[0].Kinds, want, rows[3].Kinds)
	}
	if rows[1].Keys != 1 || rows[1].Demand != 50 || rows[3].Keys != 1 || rows[3].Messages != [phases]int64{1, 0, 0} {
		t.Errorf("rows = %+v", rows)
	}
}
