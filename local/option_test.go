package local

import "testing"

func TestOptions(t *testing.T) {
	tests := []struct {
		name       string
		opts       []Option
		wantShards int
		wantPer    int
		wantErr    bool
	}{
		{"defaults", nil, 256, DefaultMaxKeys / 256, false},
		{"nil option", []Option{nil}, 256, DefaultMaxKeys / 256, false},
		{"small table, fewer shards", []Option{WithMaxKeys(1000)}, 8, 125, false},
		{"tiny table, one shard", []Option{WithMaxKeys(1)}, 1, 1, false},
		{"per-shard bound rounds down", []Option{WithMaxKeys(1000), WithShards(16)}, 16, 62, false},
		{"shards 0 picks the default", []Option{WithShards(0)}, 256, DefaultMaxKeys / 256, false},
		{"no more shards than keys", []Option{WithMaxKeys(2), WithShards(4)}, 2, 1, false},
		{"max keys 0", []Option{WithMaxKeys(0)}, 0, 0, true},
		{"max keys negative", []Option{WithMaxKeys(-1)}, 0, 0, true},
		{"shards not a power of two", []Option{WithShards(3)}, 0, 0, true},
		{"shards negative", []Option{WithShards(-4)}, 0, 0, true},
		{"too many shards", []Option{WithShards(1 << 17)}, 0, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tb, err := NewTable(tt.opts...)
			if tt.wantErr {
				if err == nil || tb != nil {
					t.Fatalf("NewTable = %v, %v; want nil and an error", tb, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(tb.shards) != tt.wantShards || tb.perShard != tt.wantPer {
				t.Errorf("NewTable: %d shards of %d keys, want %d of %d", len(tb.shards), tb.perShard, tt.wantShards, tt.wantPer)
			}
		})
	}
}
