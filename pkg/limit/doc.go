// Package limit defines what a rate-limit rule is and how each algorithm
// decides: Rule, Algorithm, Unit, Outcome and Decision, and the pure
// functions that turn (stored state, now, rule, cost) into (decision, new
// state).
//
// The package knows nothing of Redis, gRPC or configuration files. The
// memory backend calls these functions directly; the Redis Lua scripts in
// pkg/scripts implement the same arithmetic, and the contract suite in
// pkg/backend/backendtest holds both to it.
//
// # Time
//
// Instants are int64 microseconds since the Unix epoch (Micros). Every
// function takes the current instant explicitly, so tests run on a fake
// clock and never sleep. Microseconds stay exact in a float64 (Lua's only
// number type) until the year 2255.
//
// # Remaining and reset
//
// Every algorithm reports, per rule, an Outcome:
//
//   - Remaining: how much cost the rule would still admit right now, after
//     this request (floored to a whole number).
//   - Reset: for an admitted request, how long until the rule is whole again
//     (all its quota available); for a denied request, how long until the
//     same cost would be admitted if nothing else arrived in between. A cost
//     the rule can never admit (larger than its capacity) reports the time
//     until the rule is whole again.
//
// docs/algorithms.md gives the formulas per algorithm.
//
// # Deciding
//
// A store keeps one State per rule and descriptor and calls Decide (or
// Rule.Check and Rule.Apply) with the current instant; Rule.Expiry tells it
// when a State may be dropped (State.Expires, which only ever moves later).
// Decide is all-or-nothing: either every rule consumes the cost, or none
// does — unless the cost is charged (Cost.Charge, the debit of a
// check-then-debit quota), which every rule takes even when it does not
// fit. Each algorithm lives in its own file
// (fixed.go, sliding_window.go, sliding_log.go, meter.go), which opens with
// its exact formulas in evaluation order, for the Lua scripts to mirror;
// window.go holds the epoch and calendar window bounds.
//
// The algorithms never rely on a store deleting expired state: a State left
// behind decides exactly like the zero State once its Expiry has passed.
package limit
