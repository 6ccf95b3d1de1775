package sim

import (
	"bufio"
	"bytes"
	"crypto/sha1"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	stdsync "sync"

	"github.com/alicebob/miniredis/v2/server"
	lua "github.com/yuin/gopher-lua"
	"github.com/yuin/gopher-lua/parse"
)

// scripting runs the embedded Redis's EVAL, EVALSHA and SCRIPT commands in
// one Lua interpreter kept for the server's life, as Redis does, and hands
// each redis.call to miniredis. miniredis builds a new interpreter for
// every call (libraries, the redis module, its global guard) and drops it
// after; that setup took about three quarters of a call's time, and a
// virtual run makes one call per decision in places (the exact strategy,
// low limits), so it was most of a run's time.
//
// The scripts run unchanged, on the same gopher-lua interpreter miniredis
// uses, and their redis.call commands run in miniredis as before; what
// differs is only that the interpreter outlives a call. As in Redis, a
// script cannot create globals, so one call cannot leave state for the
// next; KEYS and ARGV are replaced on every call.
// TestScriptingMatchesMiniredis checks that every script of the module
// gets the same replies here as from miniredis's own EVAL.
//
// Calls run one at a time, under mu, on the caller's goroutine; that
// makes each script atomic against the others, as in Redis.
// A scripting is safe for concurrent use.
type scripting struct {
	mu     stdsync.Mutex
	srv    *server.Server
	l      *lua.LState
	protos map[string]*lua.FunctionProto // by SHA1 of the source, lower-case hex

	// inner is the connection redis.call's commands run on; its replies
	// are read back from out.
	inner *server.Peer
	w     *bufio.Writer
	out   bytes.Buffer
}

// msgNoScript is Redis's reply to EVALSHA of a script it does not hold.
const msgNoScript = "NOSCRIPT No matching script. Please use EVAL."

// guardGlobals makes reading an unknown global and creating one an error,
// as Redis does, so that a script's only state is in Redis.
const guardGlobals = `
setmetatable(_G, {
  __newindex = function(_, name)
    error('Script attempted to create global variable ' .. tostring(name), 2)
  end,
  __index = function(_, name)
    error('Script attempted to access nonexistent global variable ' .. tostring(name), 2)
  end,
})`

func newScripting(srv *server.Server) (*scripting, error) {
	l := lua.NewState(lua.Options{SkipOpenLibs: true})
	for _, lib := range []struct {
		name string
		open lua.LGFunction
	}{
		{lua.BaseLibName, lua.OpenBase},
		{lua.TabLibName, lua.OpenTable},
		{lua.StringLibName, lua.OpenString},
		{lua.MathLibName, lua.OpenMath},
	} {
		if err := l.CallByParam(lua.P{Fn: l.NewFunction(lib.open), Protect: true}, lua.LString(lib.name)); err != nil {
			l.Close()
			return nil, fmt.Errorf("sim: embedded lua: %w", err)
		}
	}
	s := &scripting{srv: srv, l: l, protos: map[string]*lua.FunctionProto{}}
	s.w = bufio.NewWriter(&s.out)
	s.inner = server.NewPeer(s.w)

	mod := l.NewTable()
	mod.RawSetString("call", l.NewFunction(s.call(true)))
	mod.RawSetString("pcall", l.NewFunction(s.call(false)))
	mod.RawSetString("error_reply", l.NewFunction(func(l *lua.LState) int {
		return pushField(l, "err", l.CheckString(1))
	}))
	mod.RawSetString("status_reply", l.NewFunction(func(l *lua.LState) int {
		return pushField(l, "ok", l.CheckString(1))
	}))
	mod.RawSetString("log", l.NewFunction(func(*lua.LState) int { return 0 }))
	for i, name := range []string{"LOG_DEBUG", "LOG_VERBOSE", "LOG_NOTICE", "LOG_WARNING"} {
		mod.RawSetString(name, lua.LNumber(i))
	}
	l.SetGlobal("redis", mod)
	l.SetGlobal("struct", packedLib(l))
	if err := l.DoString(guardGlobals); err != nil {
		l.Close()
		return nil, fmt.Errorf("sim: embedded lua: %w", err)
	}
	return s, nil
}

// packedLib returns the struct library of Redis's Lua for the formats the
// scripts use, '<' and then 'd's (lua/packed.lua): little-endian doubles.
// The scripts carry the same in Lua for an interpreter without struct;
// in Go it costs a run a fraction of what interpreting that does.
// TestScriptingMatchesMiniredis checks that both write and read the same
// bytes.
func packedLib(l *lua.LState) *lua.LTable {
	doubles := func(l *lua.LState) int {
		f := l.CheckString(1)
		if len(f) < 2 || f[0] != '<' || strings.Trim(f[1:], "d") != "" {
			l.RaiseError("struct: format %q unsupported here", f)
		}
		return len(f) - 1
	}
	lib := l.NewTable()
	lib.RawSetString("pack", l.NewFunction(func(l *lua.LState) int {
		n := doubles(l)
		b := make([]byte, 0, 8*n)
		for i := range n {
			b = binary.LittleEndian.AppendUint64(b, math.Float64bits(float64(l.CheckNumber(2+i))))
		}
		l.Push(lua.LString(b))
		return 1
	}))
	lib.RawSetString("unpack", l.NewFunction(func(l *lua.LState) int {
		n := doubles(l)
		s := l.CheckString(2)
		pos := l.OptInt(3, 1)
		if pos < 1 || len(s) < pos-1+8*n {
			l.RaiseError("struct: data string too short")
		}
		for i := range n {
			at := pos - 1 + 8*i
			l.Push(lua.LNumber(math.Float64frombits(binary.LittleEndian.Uint64([]byte(s[at : at+8])))))
		}
		l.Push(lua.LNumber(pos + 8*n))
		return n + 1
	}))
	return lib
}

func pushField(l *lua.LState, field, v string) int {
	t := l.CreateTable(0, 1)
	t.RawSetString(field, lua.LString(v))
	l.Push(t)
	return 1
}

// Close frees the interpreter. No command may be in flight or come after.
func (s *scripting) Close() { s.l.Close() }

// handles reports whether a command is one scripting serves.
func (s *scripting) handles(args []string) bool {
	if len(args) == 0 {
		return false
	}
	switch strings.ToLower(args[0]) {
	case "eval", "evalsha", "script":
		return true
	}
	return false
}

// do serves one command that handles accepted, writing its reply to c,
// and returns when it is written.
func (s *scripting) do(c *server.Peer, args []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.exec(c, args)
}

func (s *scripting) exec(c *server.Peer, args []string) {
	name := strings.ToLower(args[0])
	if len(args) < 2 {
		c.WriteError(fmt.Sprintf("ERR wrong number of arguments for '%s' command", name))
		return
	}
	switch name {
	case "eval":
		proto, sha, err := s.compile(args[1])
		if err != nil {
			c.WriteError(err.Error())
			return
		}
		s.protos[sha] = proto
		s.run(c, proto, args[2:])
	case "evalsha":
		proto := s.protos[strings.ToLower(args[1])]
		if proto == nil {
			c.WriteError(msgNoScript)
			return
		}
		s.run(c, proto, args[2:])
	case "script":
		s.script(c, strings.ToLower(args[1]), args[2:])
	}
}

func (s *scripting) script(c *server.Peer, sub string, args []string) {
	switch {
	case sub == "load" && len(args) == 1:
		proto, sha, err := s.compile(args[0])
		if err != nil {
			c.WriteError(err.Error())
			return
		}
		s.protos[sha] = proto
		c.WriteBulk(sha)
	case sub == "exists" && len(args) > 0:
		c.WriteLen(len(args))
		for _, sha := range args {
			if s.protos[strings.ToLower(sha)] != nil {
				c.WriteInt(1)
			} else {
				c.WriteInt(0)
			}
		}
	case sub == "flush":
		clear(s.protos)
		c.WriteOK()
	default:
		c.WriteError(fmt.Sprintf("ERR unknown subcommand or wrong number of arguments for 'script|%s' command", sub))
	}
}

// compile returns the script's compiled form and SHA1, from the cache if
// it was seen before.
func (s *scripting) compile(src string) (*lua.FunctionProto, string, error) {
	sum := sha1.Sum([]byte(src))
	sha := hex.EncodeToString(sum[:])
	if p := s.protos[sha]; p != nil {
		return p, sha, nil
	}
	body := src
	if strings.HasPrefix(body, "#!") {
		// Redis reads a first line of flags (#!lua flags=...) itself; the
		// line stays, empty, so that errors keep their line numbers.
		_, rest, _ := strings.Cut(body, "\n")
		body = "\n" + rest
	}
	chunk, err := parse.Parse(strings.NewReader(body), "@user_script")
	if err != nil {
		return nil, "", fmt.Errorf("ERR Error compiling script (new function): %v", err)
	}
	p, err := lua.Compile(chunk, "@user_script")
	if err != nil {
		return nil, "", fmt.Errorf("ERR Error compiling script (new function): %v", err)
	}
	return p, sha, nil
}

// run calls a script with args (numkeys, keys..., argv...) and writes its
// reply to c.
func (s *scripting) run(c *server.Peer, proto *lua.FunctionProto, args []string) {
	if len(args) == 0 {
		c.WriteError("ERR wrong number of arguments for 'eval' command")
		return
	}
	n, err := strconv.Atoi(args[0])
	switch {
	case err != nil:
		c.WriteError("ERR value is not an integer or out of range")
		return
	case n < 0:
		c.WriteError("ERR Number of keys can't be negative")
		return
	case n > len(args)-1:
		c.WriteError("ERR Number of keys can't be greater than number of args")
		return
	}
	l := s.l
	g := l.G.Global
	g.RawSetString("KEYS", stringTable(l, args[1:1+n]))
	g.RawSetString("ARGV", stringTable(l, args[1+n:]))
	l.Push(l.NewFunctionFromProto(proto))
	err = l.PCall(0, 1, nil)
	defer l.SetTop(0)
	if err != nil {
		var le *lua.ApiError
		msg := err.Error()
		if errors.As(err, &le) {
			msg = le.Object.String()
		}
		c.WriteError("ERR user_script: " + msg)
		return
	}
	writeReply(c, l.Get(-1))
}

func stringTable(l *lua.LState, items []string) *lua.LTable {
	t := l.CreateTable(len(items), 0)
	for i, v := range items {
		t.RawSetInt(i+1, lua.LString(v))
	}
	return t
}

// call returns redis.call (raise) or redis.pcall: run a command in
// miniredis and turn its reply into Lua values, as Redis does: integers to
// numbers, bulk strings to strings, a nil reply to false, arrays to
// tables, a status to {ok = status}, and an error raised (call) or
// returned as {err = message} (pcall).
func (s *scripting) call(raise bool) lua.LGFunction {
	return func(l *lua.LState) int {
		top := l.GetTop()
		if top == 0 {
			l.RaiseError("Please specify at least one argument for this redis lib call")
			return 0
		}
		args := make([]string, top)
		for i := range args {
			switch v := l.Get(i + 1).(type) {
			case lua.LString:
				args[i] = string(v)
			case lua.LNumber:
				args[i] = v.String()
			default:
				l.RaiseError("Lua redis lib command arguments must be strings or integers")
				return 0
			}
		}
		s.out.Reset()
		s.srv.Dispatch(s.inner, args)
		s.inner.Flush()
		reply, _, err := luaReply(l, s.out.Bytes())
		if err != nil {
			if raise {
				l.RaiseError("%s", err.Error())
				return 0
			}
			return pushField(l, "err", err.Error())
		}
		l.Push(reply)
		return 1
	}
}

// luaReply reads the RESP2 reply at the front of b into Lua values, and
// returns the rest of b: an error reply as an error, and the others as
// server.ParseReply reads them and Redis hands them to a script.
func luaReply(l *lua.LState, b []byte) (lua.LValue, []byte, error) {
	i := bytes.Index(b, []byte("\r\n"))
	if i < 1 {
		return nil, nil, server.ErrProtocol
	}
	head, rest := string(b[1:i]), b[i+2:]
	switch b[0] {
	case '+':
		t := l.CreateTable(0, 1)
		t.RawSetString("ok", lua.LString(head))
		return t, rest, nil
	case '-':
		return nil, nil, errors.New(head)
	case ':':
		if head == "" {
			return lua.LNumber(0), rest, nil
		}
		n, err := strconv.Atoi(head)
		if err != nil {
			return nil, nil, server.ErrProtocol
		}
		return lua.LNumber(n), rest, nil
	case '$':
		n, err := strconv.Atoi(head)
		switch {
		case err != nil:
			return nil, nil, server.ErrProtocol
		case n < 0:
			return lua.LFalse, rest, nil
		case len(rest) < n+2:
			return nil, nil, server.ErrProtocol
		}
		return lua.LString(rest[:n]), rest[n+2:], nil
	case '*':
		n, err := strconv.Atoi(head)
		if err != nil {
			return nil, nil, server.ErrProtocol
		}
		if n < 0 {
			return lua.LFalse, rest, nil
		}
		t := l.CreateTable(n, 0)
		for k := 1; k <= n; k++ {
			var v lua.LValue
			if v, rest, err = luaReply(l, rest); err != nil {
				return nil, nil, err
			}
			t.RawSetInt(k, v)
		}
		return t, rest, nil
	}
	return nil, nil, server.ErrProtocol
}

// writeReply writes a script's return value as Redis does: a number as an
// integer (truncated), a string as a bulk string, true as 1, false and nil
// as a nil reply, a table with an err or ok field as an error or a status,
// and any other table as an array up to its first nil.
func writeReply(c *server.Peer, v lua.LValue) {
	switch x := v.(type) {
	case lua.LNumber:
		c.WriteInt(int(x))
	case lua.LString:
		c.WriteBulk(string(x))
	case lua.LBool:
		if x {
			c.WriteInt(1)
		} else {
			c.WriteNull()
		}
	case *lua.LTable:
		if e := x.RawGetString("err"); e != lua.LNil {
			c.WriteError(lua.LVAsString(e))
			return
		}
		if ok := x.RawGetString("ok"); ok != lua.LNil {
			c.WriteInline(lua.LVAsString(ok))
			return
		}
		n := 0
		for x.RawGetInt(n+1) != lua.LNil {
			n++
		}
		c.WriteLen(n)
		for i := 1; i <= n; i++ {
			writeReply(c, x.RawGetInt(i))
		}
	default:
		c.WriteNull()
	}
}
