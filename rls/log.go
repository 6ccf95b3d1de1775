package rls

import (
	"fmt"
	"io"
	"log/slog"
	"strings"
)

// parseLevel reads LOG_LEVEL as the reference (logrus) names levels:
// trace, debug, info, warn or warning, error, fatal, panic, in any case.
func parseLevel(s string) (slog.Level, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "trace", "debug":
		return slog.LevelDebug, nil
	case "info":
		return slog.LevelInfo, nil
	case "warn", "warning", "":
		return slog.LevelWarn, nil
	case "error", "fatal", "panic":
		return slog.LevelError, nil
	}
	return 0, fmt.Errorf("%q: want debug, info, warn or error", s)
}

// NewLogger returns the service's logger on w: LOG_FORMAT text or json, at
// LOG_LEVEL. JSON lines name the time "@timestamp" and the message
// "@message", as the reference's do, so log pipelines built for it keep
// working.
func NewLogger(w io.Writer, level, format string) (*slog.Logger, error) {
	lv, err := parseLevel(level)
	if err != nil {
		return nil, fmt.Errorf("rls: LOG_LEVEL: %w", err)
	}
	opts := &slog.HandlerOptions{Level: lv}
	if strings.EqualFold(format, "json") {
		opts.ReplaceAttr = func(groups []string, a slog.Attr) slog.Attr {
			if len(groups) == 0 {
				switch a.Key {
				case slog.TimeKey:
					a.Key = "@timestamp"
				case slog.MessageKey:
					a.Key = "@message"
				}
			}
			return a
		}
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return slog.New(slog.NewTextHandler(w, opts)), nil
}
