package hybridlimit

import (
	"testing"
	"unsafe"
)

func TestSourceString(t *testing.T) {
	tests := []struct {
		s    Source
		want string
	}{
		{SourceUnknown, "unknown"},
		{SourceLocal, "local"},
		{SourceGlobal, "global"},
		{SourceFallback, "fallback"},
		{NumSources, "Source(4)"},
		{Source(200), "Source(200)"},
	}
	for _, tt := range tests {
		if got := tt.s.String(); got != tt.want {
			t.Errorf("Source(%d).String() = %q, want %q", uint8(tt.s), got, tt.want)
		}
	}
	var zero Result
	if zero.Source != SourceUnknown {
		t.Errorf("zero Result.Source = %v, want unknown", zero.Source)
	}
}

// TestResultSize pins the size of Result: Source and FailedClosed sit in
// the padding after Allowed, so they cost the hybrid limiter's fast path no
// extra bytes to return.
func TestResultSize(t *testing.T) {
	if unsafe.Sizeof(uintptr(0)) != 8 {
		t.Skip("sizes pinned for 64-bit platforms")
	}
	if got, want := unsafe.Sizeof(Result{}), uintptr(56); got != want {
		t.Errorf("unsafe.Sizeof(Result{}) = %d, want %d", got, want)
	}
}
