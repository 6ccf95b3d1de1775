package sync

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hybridlimit/hybridlimit"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
	"github.com/hybridlimit/hybridlimit/internal/scripts"
)

// TestClassify sorts errors made by hand and errors a real client returns
// from a real server that is stalled, gone, or answering with an error.
func TestClassify(t *testing.T) {
	redistest.NoLeaksAfterKill(t)
	ctx := context.Background()

	srv := redistest.Start(t)
	live := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { _ = live.Close() })
	if err := live.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	unknownCmd := live.Do(ctx, "NO-SUCH-COMMAND").Err()
	wrongType := func() error {
		_ = live.Set(ctx, "str", "x", time.Minute).Err()
		return live.LPush(ctx, "str", "y").Err()
	}()

	if err := srv.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	stalled := live.Ping(sctx).Err()
	cancel()
	if err := srv.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}

	gone := redistest.Start(t)
	addr := gone.Addr
	gone.Stop()
	dead := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second})
	refused := dead.Ping(ctx).Err()
	_ = dead.Close()
	closedClient := dead.Ping(ctx).Err()

	tests := []struct {
		name string
		err  error
		want hybridlimit.ErrorClass
	}{
		{"stalled server", stalled, hybridlimit.ErrorTimeout},
		{"deadline", fmt.Errorf("sync: %w", context.DeadlineExceeded), hybridlimit.ErrorTimeout},
		{"socket timeout", &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}, hybridlimit.ErrorTimeout},
		{"pool timeout", redis.ErrPoolTimeout, hybridlimit.ErrorTimeout},
		{"refused", refused, hybridlimit.ErrorConnection},
		{"closed client", closedClient, hybridlimit.ErrorConnection},
		{"reset", &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}, hybridlimit.ErrorConnection},
		{"eof", fmt.Errorf("sync: %w", io.EOF), hybridlimit.ErrorConnection},
		{"unknown command", unknownCmd, hybridlimit.ErrorReply},
		{"wrong type", wrongType, hybridlimit.ErrorReply},
		{"noscript", redis.ErrNoScript, hybridlimit.ErrorReply},
		{"malformed", fmt.Errorf("sync: %w: got string", scripts.ErrMalformedReply), hybridlimit.ErrorMalformed},
		{"canceled", context.Canceled, hybridlimit.ErrorOther},
		{"other", errors.New("something else"), hybridlimit.ErrorOther},
	}
	for _, tt := range tests {
		if tt.err == nil {
			t.Errorf("%s: no error to classify", tt.name)
			continue
		}
		if got := classify(tt.err); got != tt.want {
			t.Errorf("classify(%s: %v) = %v, want %v", tt.name, tt.err, got, tt.want)
		}
	}
}
