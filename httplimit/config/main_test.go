package config

import (
	"testing"

	"github.com/hybridlimit/hybridlimit/internal/fakelimiter"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

type fakeLimiter = fakelimiter.Limiter

var (
	answer   = fakelimiter.Answer
	allowed  = fakelimiter.Allowed
	newLocal = fakelimiter.NewLocal
)
