package redistest

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// CommandHook is a go-redis hook that runs Before ahead of every command
// (outside pipelines) whose arguments include each of Args as a string,
// such as a script's op and the key it runs on. An error from Before fails
// the command without sending it, as if the connection broke there; nil
// lets it through, so Before can also act at that moment.
type CommandHook struct {
	Args   []string
	Before func() error
}

// DialHook leaves dialling alone.
func (*CommandHook) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook runs Before ahead of the commands Args match.
func (h *CommandHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.matches(cmd.Args()) {
			if err := h.Before(); err != nil {
				cmd.SetErr(err)
				return err
			}
		}
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook leaves pipelines alone.
func (*CommandHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h *CommandHook) matches(args []any) bool {
	for _, want := range h.Args {
		found := false
		for _, a := range args {
			if s, ok := a.(string); ok && s == want {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}
