// Package scripts holds sluice's Lua scripts for Redis, embedded with
// go:embed, as the values Redis runs: the decide script (DecideScript, and
// the same code as a function library, DecideLibrary) and the reset script
// (ResetScript).
//
// The decide script decides all rules of one descriptor atomically,
// reproducing pkg/limit's arithmetic exactly. Its source is the .lua files
// of this directory, joined in a fixed order (decideParts); CONTRACT.md is
// its contract (keys, KEYS, every ARGV slot and unit, the reply). The Go
// half of that contract -- the keys, the arguments, reading the reply --
// is the Redis backend's (pkg/backend/redis: keys.go, args.go), which owns
// connections, key prefixes and clusters.
//
// Where the token bucket's refill is computed for Redis: drain in
// meter.lua, the twin of drain in pkg/limit/meter.go (token bucket: tokens
// = capacity − level; refill = drain).
package scripts

import (
	"crypto/sha1"
	"embed"
	"encoding/hex"
	"strings"
)

// lua holds the decide script's parts.
//
//go:embed *.lua
var lua embed.FS

// decideParts are the files of the decide script, in the order they are
// joined: each file's locals are visible to the files after it, so a file
// comes after those it uses (decide.lua opens with why). The order is
// fixed, so the joined source, and its SHA-1, change only when a file does.
var decideParts = []string{
	"decide.lua",         // shared locals
	"arith.lua",          // ~ limit/arith.go
	"window.lua",         // ~ limit/window.go
	"state.lua",          // ~ limit/state.go: loading states
	"fixed.lua",          // ~ limit/fixed.go
	"sliding_window.lua", // ~ limit/sliding_window.go
	"meter.lua",          // ~ limit/meter.go
	"sliding_log.lua",    // ~ limit/sliding_log.go
	"rule.lua",           // ~ limit/rule.go: the rules from ARGV
	"decision.lua",       // ~ limit/decision.go: check, bind, apply, reply
	"batch.lua",          // the entry: one descriptor, a batch, or a batch together
}

// resetParts are the files of the reset script (ResetScript).
var resetParts = []string{"reset.lua"}

// join returns the files of fsys named by parts, concatenated in order,
// each ending with a newline.
func join(fsys embed.FS, parts []string) string {
	var b strings.Builder
	for _, name := range parts {
		src, err := fsys.ReadFile(name)
		if err != nil {
			panic("scripts: " + err.Error()) // a name above without its file: a build mistake
		}
		b.Write(src)
		if len(src) > 0 && src[len(src)-1] != '\n' {
			b.WriteByte('\n')
		}
	}
	return b.String()
}

// Script is one embedded Lua script. It is a value, safe to copy and to
// share between goroutines; the zero Script names no script.
type Script struct {
	// Source is the Lua text, for SCRIPT LOAD and EVAL.
	Source string
	// SHA1 is the hex SHA-1 of Source, the name EVALSHA runs it by.
	SHA1 string
}

func newScript(src string) Script {
	sum := sha1.Sum([]byte(src))
	return Script{Source: src, SHA1: hex.EncodeToString(sum[:])}
}

// DecideScript returns the decide script: one call decides every rule of one
// descriptor. CONTRACT.md is its contract.
func DecideScript() Script { return decide }

// Library is the decide script as a Redis function library (FUNCTION LOAD,
// Redis 7+): the same parts, whose functions Redis creates once, when the
// library loads, instead of on every call. FCALL Function runs what
// EVALSHA DecideScript().SHA1 runs, with the same KEYS, ARGV and reply.
type Library struct {
	// Source is the library's code, for FUNCTION LOAD.
	Source string
	// Name is the library's name and Function the name of its one
	// function. Both hold the SHA-1 of the decide script, so that
	// instances running different versions of sluice on one Redis load
	// libraries side by side instead of replacing each other's.
	Name, Function string
}

// DecideLibrary returns the decide script as a function library.
func DecideLibrary() Library { return library }

// ResetScript returns the reset script: one call forgets chosen rules'
// state for one descriptor, atomically with respect to the decide script.
// Its KEYS and ARGV come from ResetArgs; CONTRACT.md describes it.
func ResetScript() Script { return reset }

// The scripts are computed once; they are never modified.
var (
	decide  = newScript(join(lua, decideParts) + evalTail)
	library = newLibrary(join(lua, decideParts), decide.SHA1)
	reset   = newScript(join(lua, resetParts))
)

// evalTail ends the decide script run by EVAL and EVALSHA: batch.lua's
// decide_call decides the call.
const evalTail = "return decide_call(KEYS, ARGV)\n"

// newLibrary wraps the decide script's parts as a function library named
// after the script's SHA-1 (sha), whose one function is decide_call.
func newLibrary(parts, sha string) Library {
	l := Library{Name: "sluice_" + sha[:16], Function: "sluice_decide_" + sha[:16]}
	l.Source = "#!lua name=" + l.Name + "\n" + parts +
		"redis.register_function('" + l.Function + "', decide_call)\n"
	return l
}
