// Package config reads the rules of an httplimit.Middleware from a file,
// JSON or YAML, and builds them on the limiters an Env gives:
//
//	cfg, err := config.LoadFile("rules.yaml")
//	if err != nil { ... }
//	mw, err := cfg.Middleware(config.Env{Hybrid: hybrid, Redis: rdb})
//
// Config (and its parts, such as RuleConfig) decode with yaml.v3 and
// encoding/json by their struct tags, so they embed in an application's
// own config. Parse refuses unknown and duplicate fields and mistyped
// values, and every error it returns is an *Error naming the field's path
// (rules[1].limit.period) and, where the document gives one, its line.
package config
