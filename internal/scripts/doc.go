// Package scripts runs the Redis scripts of package lua for the module's
// limiters (global, sync, rls) and its simulator: it builds each Script from
// the files of lua.Files, runs it so that an emptied script cache never
// reaches the caller, lays out its arguments, and decodes its reply with one
// checked decoder. It is the module's own plumbing; a user of the limiters
// reads the scripts in package lua.
//
// A script is built from the shared files it uses (clock.lua, preamble.lua,
// wide.lua, bucket.lua), put before its body before its SHA1 is taken,
// since Redis makes every function of a script again on each run; package
// lua's doc says what each file is for, and how the scripts keep time and
// numbers exact.
//
// Params builds each limiter script's ARGV from plain integers, so the
// argument order lives next to the scripts; it refuses a now of MaxNow or
// more, and limits whose quotients would reach 2^50, past what wide.lua's
// mul_div handles. SyncHeader, SyncMsg, SyncKey and SyncReply are the typed
// contract of a call of Sync; ReshardStep and ReshardReply of a call of
// Reshard. This package knows nothing of its callers and imports nothing
// else from the module but lua: validating a limit, naming keys and turning
// a Decision into a Result are the callers' job.
//
// Where things are:
//
//	scripts.go  the limiter scripts, each built from the shared files it uses
//	hybrid.go   the hybrid limiter's scripts; reshard steps and the lock's reply
//	script.go   Script: EVALSHA with EVAL on NOSCRIPT; NoteError
//	args.go     Params and the argument bounds (2^50, MaxNow)
//	decode.go   the one checked reply decoder: Decision, Refunded
//	syncmsg.go  the Sync call's header, messages, keys and replies
package scripts
