package local

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if any goroutine outlives them: nothing
// in this package may start one.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
