package redis

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/pkg/backend"
	"github.com/sluice-rl/sluice/pkg/limit"
)

// Cross-request batching without Redis: calls built by the Backend's own
// code, merged by the coalescer, answered by a fake Redis that decides
// each descriptor from its key, so the tests see which reply reaches
// which caller.

// unitBackend builds calls (keys, arguments) and reads replies; it has
// no connection.
func unitBackend() *Backend {
	b := &Backend{opts: Options{KeyPrefix: "u:", Timeout: time.Minute}}
	b.invoke.Store(&invocation{cmd: "evalsha", name: "sha"})
	return b
}

// unitJob is one Decide: its checks, its job, and its results once filled.
type unitJob struct {
	checks  []backend.Check
	j       *job
	results []backend.Result
}

// buildJob builds the job of one Decide of checks, as Backend.decide does
// for one node: one call, a batch when there are several checks.
func buildJob(t *testing.T, b *Backend, together bool, clock scriptClock, checks ...backend.Check) *unitJob {
	t.Helper()
	j := getJob(checks)
	j.together = together
	u := &unitJob{checks: checks, j: j, results: make([]backend.Result, len(checks))}
	for i := range checks {
		j.idx = append(j.idx, i)
	}
	if len(checks) > 1 {
		b.addBatch(j, j.idx, checks, clock, func(i int, err error) { t.Fatalf("check %d: %v", i, err) })
	} else if err := b.add(j, 0, checks[0], clock); err != nil {
		t.Fatal(err)
	}
	b.group(context.Background(), j)
	return u
}

// fill reads the job's replies into its results.
func (u *unitJob) fill(b *Backend) (answered bool) {
	answered = true
	for _, c := range u.j.ptrs {
		answered = b.fill(u.results, c, u.j.outcomes) && answered
	}
	return answered
}

// uid is a check of one rule on identity id.
func uid(id string) backend.Check {
	return backend.Check{Identity: id, Rules: oneRule, Cost: limit.Cost{N: 1}}
}

// wrongType is Redis's message for a key of the wrong type.
const wrongType = "WRONGTYPE Operation against a key holding the wrong kind of value"

// fakeAnswer answers a call as Redis would if every descriptor admitted
// with remaining = the digit its identity ends with, and a descriptor
// whose identity is "bad" failed with WRONGTYPE.
func fakeAnswer(c *call) {
	nk := c.nkeys()
	key := func(k int) string { return *c.argv[3+k].(*string) }
	one := func(key string, rules int) []int64 {
		if strings.Contains(key, "{bad}") {
			out := []int64{itemFailed, int64(len(wrongType))}
			for _, ch := range []byte(wrongType) {
				out = append(out, int64(ch))
			}
			return out
		}
		left := int64(key[len(key)-2] - '0')
		if rules == 1 {
			return []int64{left, 0}
		}
		out := []int64{1, 0}
		for range rules {
			out = append(out, 1, left, 0)
		}
		return out
	}
	if !c.batch {
		r := one(key(0), (len(c.argv)-4-nk)/5)
		if r[0] == itemFailed {
			c.cmd.SetErr(scriptError(wrongType))
			return
		}
		c.cmd.SetVal(r)
		return
	}
	var out []int64
	a, k, ik, na := 3+nk+2, 0, 0, 0
	for a < len(c.argv) {
		if c.argv[a] == any(repeatItem) {
			a++ // the item before's ik and na
		} else {
			ik, na = c.argv[a].(int), c.argv[a+1].(int)
			a += 2 + na
		}
		out = append(out, one(key(k), (na-2)/5)...)
		k += ik
	}
	c.cmd.SetVal(out)
}

// argvText renders a call's arguments, keys dereferenced.
func argvText(c *call) string {
	var b strings.Builder
	for _, a := range c.argv {
		if p, ok := a.(*string); ok {
			a = *p
		}
		fmt.Fprintf(&b, "%v ", a)
	}
	return b.String()
}

// laneBusy returns a coalescer of one lane on a fake Redis answering with
// fakeAnswer, whose lane holds a lone request (sent as it is) until the
// test releases it; done reports that request's decision.
func laneBusy(t *testing.T) (b *Backend, c *coalescer, f *fakeRedis, done <-chan decision) {
	t.Helper()
	b = unitBackend()
	c, f = testCoalescer(t, false, 1, 128)
	f.answer = fakeAnswer
	first := buildJob(t, b, false, scriptClock{At: 1}, uid("id0"))
	done = decideAsyncJob(context.Background(), c, first.j)
	if got := f.next(t); len(got) != 1 || got[0] != first.j.ptrs[0] {
		t.Fatal("the lone request did not go as it is")
	}
	return b, c, f, done
}

// TestCoalescerMergesQueuedRequests: the calls of the Decides queued
// behind a busy lane go in one pipeline as one batch script call per run
// of mergeable calls (a batch decided together goes as it is and cuts the
// run), built exactly as one Decide of all their checks would build it;
// each caller gets its own descriptors' replies, and a descriptor the
// script failed fails only its caller, with the error its own call gets.
func TestCoalescerMergesQueuedRequests(t *testing.T) {
	b, c, f, d0 := laneBusy(t)
	clock := scriptClock{At: 1}
	jobs := []*unitJob{
		buildJob(t, b, false, clock, uid("id1")),
		buildJob(t, b, false, clock, uid("id2"), uid("id3")),
		buildJob(t, b, false, clock, uid("bad")),
		buildJob(t, b, true, clock, uid("id4"), uid("id5")),
		buildJob(t, b, false, clock, uid("id6")),
		buildJob(t, b, false, clock, uid("id7")),
	}
	var dones []<-chan decision
	for i, u := range jobs {
		dones = append(dones, decideAsyncJob(context.Background(), c, u.j))
		waitUntil(t, 10*time.Second, "queued", func() bool { return queued(c.single) == i+1 })
	}
	f.release <- struct{}{}
	wait(t, d0)
	got := f.next(t)
	if len(got) != 3 {
		t.Fatalf("pipeline of %d calls, want 3: the first three Decides merged, the together batch, the last two merged", len(got))
	}
	parts := func(us ...*unitJob) []*call {
		var p []*call
		for _, u := range us {
			p = append(p, u.j.ptrs...)
		}
		return p
	}
	if !slices.Equal(got[0].parts, parts(jobs[0], jobs[1], jobs[2])) || got[1] != jobs[3].j.ptrs[0] ||
		!slices.Equal(got[2].parts, parts(jobs[4], jobs[5])) {
		t.Fatal("the pipeline's calls are not the runs of mergeable calls, in order")
	}
	one := buildJob(t, b, false, clock, uid("id1"), uid("id2"), uid("id3"), uid("bad"))
	if g, w := argvText(got[0]), argvText(one.j.ptrs[0]); g != w {
		t.Errorf("merged call\n%s\nwant the batch one Decide of the same checks sends\n%s", g, w)
	}
	f.release <- struct{}{}
	for i, d := range dones {
		if r := wait(t, d); r.abandoned || r.why != nil {
			t.Fatalf("decide %d: %+v", i, r)
		}
	}
	for _, u := range jobs {
		if !u.fill(b) {
			t.Errorf("%v: the node did not answer", u.checks)
		}
		for k, r := range u.results {
			id := u.checks[k].Identity
			if id == "bad" {
				if r.Err == nil || errors.Is(r.Err, backend.ErrUnavailable) || !strings.Contains(r.Err.Error(), "WRONGTYPE") {
					t.Errorf("%s: %v, want the script's WRONGTYPE", id, r.Err)
				}
				continue
			}
			if r.Err != nil || !r.Allowed || r.Outcomes[0].Remaining != uint64(id[2]-'0') {
				t.Errorf("%s: %+v, want its own reply (remaining %c)", id, r, id[2])
			}
		}
	}
	f.none(t)
}

// threeMerged builds three Decides (one check, two, one) and merges their
// calls, which must make one merged call.
func threeMerged(t *testing.T, b *Backend, clock scriptClock) ([]*unitJob, *merger, *call) {
	t.Helper()
	jobs := []*unitJob{
		buildJob(t, b, false, clock, uid("id1")),
		buildJob(t, b, false, clock, uid("id2"), uid("id3")),
		buildJob(t, b, false, clock, uid("id4")),
	}
	var calls []*call
	for _, u := range jobs {
		calls = append(calls, u.j.ptrs...)
	}
	m := new(merger)
	wire := m.merge(calls, maxMergeItems, false)
	if len(wire) != 1 || wire[0].parts == nil {
		t.Fatalf("%d calls, want one merged", len(wire))
	}
	return jobs, m, wire[0]
}

// TestMergedCallRepeatsItems: a merged call writes a descriptor whose
// slots (its KEYS count, cost and rules) are the descriptor before's as
// one slot, repeatItem, whether the two come from one Decide or
// from two, and is then exactly the batch one Decide of all the checks
// sends.
func TestMergedCallRepeatsItems(t *testing.T) {
	b := unitBackend()
	clock := scriptClock{At: 1}
	hour := []limit.Rule{{Unit: limit.Hour, Limit: 7}}
	two := []limit.Rule{{Unit: limit.Hour, Limit: 7}, {Algorithm: limit.SlidingLog, Unit: limit.Minute, Limit: 3}}
	check := func(id string, rules []limit.Rule, n uint64) backend.Check {
		return backend.Check{Identity: id, Rules: rules, Cost: limit.Cost{N: n}}
	}
	tests := []struct {
		name    string
		decides [][]backend.Check
		want    string // per descriptor: F in full, R a repeat item
	}{
		{"one limit, many clients", [][]backend.Check{{check("a", hour, 1)}, {check("b", hour, 1)}, {check("c", hour, 1)}}, "FRR"},
		{"a Decide of two between", [][]backend.Check{{check("a", hour, 1)}, {check("b", hour, 1), check("c", hour, 1)}, {check("d", hour, 1)}}, "FRRR"},
		{"another cost", [][]backend.Check{{check("a", hour, 1)}, {check("b", hour, 2)}, {check("c", hour, 2)}}, "FFR"},
		{"other rules between", [][]backend.Check{{check("a", hour, 1)}, {check("b", two, 1), check("c", two, 1)}, {check("d", hour, 1)}}, "FFRF"},
		{"the same descriptor again", [][]backend.Check{{check("a", two, 1)}, {check("a", two, 1)}}, "FR"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var calls []*call
			var all []backend.Check
			for _, checks := range tt.decides {
				calls = append(calls, buildJob(t, b, false, clock, checks...).j.ptrs...)
				all = append(all, checks...)
			}
			m := new(merger)
			defer m.release()
			wire := m.merge(calls, maxMergeItems, false)
			if len(wire) != 1 || wire[0].parts == nil {
				t.Fatalf("%d calls, want one merged", len(wire))
			}
			argv := wire[0].argv
			var got strings.Builder
			for a := 3 + wire[0].nkeys() + 2; a < len(argv); {
				if argv[a] == any(repeatItem) {
					got.WriteByte('R')
					a++
					continue
				}
				got.WriteByte('F')
				a += 2 + argv[a+1].(int)
			}
			if got.String() != tt.want {
				t.Errorf("items %s, want %s", got.String(), tt.want)
			}
			if g, w := argvText(wire[0]), argvText(buildJob(t, b, false, clock, all...).j.ptrs[0]); g != w {
				t.Errorf("merged call\n%s\nwant the batch one Decide of the same checks sends\n%s", g, w)
			}
		})
	}
}

// TestMergedCallErrorReachesEvery: an error of the merged call as a whole
// (Redis refused it, or never answered) reaches every request in it, with
// the classification a lone request gets for the same error: the same
// error text (ErrUnavailable or not), and the same verdict for the
// node's breaker.
func TestMergedCallErrorReachesEvery(t *testing.T) {
	b := unitBackend()
	clock := scriptClock{At: 1}
	for _, err := range []error{
		scriptError("OOM command not allowed when used memory > 'maxmemory'."),
		scriptError("BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE."),
		scriptError("READONLY You can't write against a read only replica."),
		scriptError("NOSCRIPT No matching script. Please use EVAL."),
		scriptError("ERR Error running script: something else"),
		fmt.Errorf("read: %w", context.DeadlineExceeded),
		io.EOF,
		errClosed,
	} {
		t.Run(err.Error(), func(t *testing.T) {
			lone := buildJob(t, b, false, clock, uid("id9"))
			lone.j.ptrs[0].fail(err)
			loneAnswered := lone.fill(b)
			jobs, m, merged := threeMerged(t, b, clock)
			merged.cmd.SetErr(err)
			m.split()
			for _, u := range jobs {
				if a := u.fill(b); a != loneAnswered {
					t.Errorf("%v: node answered %v, a lone request's %v", u.checks, a, loneAnswered)
				}
				for k, r := range u.results {
					if r.Err == nil || r.Err.Error() != lone.results[0].Err.Error() ||
						errors.Is(r.Err, backend.ErrUnavailable) != errors.Is(lone.results[0].Err, backend.ErrUnavailable) {
						t.Errorf("%s: %v, want a lone request's %v", u.checks[k].Identity, r.Err, lone.results[0].Err)
					}
				}
			}
		})
	}
}

// TestMergeBounds: which calls of a pipeline merge, and into how many.
func TestMergeBounds(t *testing.T) {
	b := unitBackend()
	clock := scriptClock{At: 1}
	many := make([]limit.Rule, maxMergeArgs/5)
	for i := range many {
		many[i] = limit.Rule{Unit: limit.Second, Limit: uint64(i + 1)}
	}
	singles := func(n int) []*unitJob {
		var us []*unitJob
		for i := range n {
			us = append(us, buildJob(t, b, false, clock, uid(fmt.Sprintf("id%d", i%10))))
		}
		return us
	}
	tests := []struct {
		name string
		jobs []*unitJob
		want []int // descriptors of each call sent; 0: a call sent as it is
	}{
		{"one call goes as it is", singles(1), []int{0}},
		{"descriptors per call bounded", singles(maxMergeItems + 8), []int{maxMergeItems, 8}},
		{"a batch counts its descriptors", append(singles(maxMergeItems-1),
			buildJob(t, b, false, clock, uid("id1"), uid("id2")), buildJob(t, b, false, clock, uid("id3"))), []int{maxMergeItems - 1, 3}},
		{"together goes alone", append(append(singles(2), buildJob(t, b, true, clock, uid("id1"), uid("id2"))), singles(1)...), []int{2, 0, 0}},
		{"ARGV bounded", append(singles(2), buildJob(t, b, false, clock, backend.Check{Identity: "id9", Rules: many, Cost: limit.Cost{N: 1}})), []int{2, 0}},
		{"different clocks do not merge", []*unitJob{
			buildJob(t, b, false, scriptClock{Fixed: true, At: 1}, uid("id1")),
			buildJob(t, b, false, scriptClock{Fixed: true, At: 1}, uid("id2")),
			buildJob(t, b, false, scriptClock{Fixed: true, At: 2}, uid("id3")),
		}, []int{2, 0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var calls []*call
			for _, u := range tt.jobs {
				calls = append(calls, u.j.ptrs...)
			}
			m := new(merger)
			var got []int
			sent := 0
			for _, w := range m.merge(calls, maxMergeItems, false) {
				n := 0
				for _, p := range w.parts {
					n += len(p.items)
				}
				got = append(got, n)
				if n > 0 {
					sent += len(w.parts)
				} else {
					sent++
				}
			}
			if !slices.Equal(got, tt.want) || sent != len(calls) {
				t.Errorf("descriptors per call %v (%d calls in), want %v (%d)", got, sent, tt.want, len(calls))
			}
			m.release()
		})
	}
}

// TestMergedMalformedReply: a merged reply that does not hold every
// descriptor's reply fails the calls it cannot feed with the reply error
// (a bug, never an outage), as a call's own short reply does.
func TestMergedMalformedReply(t *testing.T) {
	b := unitBackend()
	clock := scriptClock{At: 1}
	jobs, m, merged := threeMerged(t, b, clock)
	fakeAnswer(merged)
	merged.cmd.SetVal(merged.cmd.Val()[:3]) // the first descriptor (two integers) and part of the second
	m.split()
	for i, u := range jobs {
		if !u.fill(b) {
			t.Errorf("request %d: the node did not answer", i)
		}
		for k, r := range u.results {
			switch {
			case i == 0:
				if r.Err != nil || r.Outcomes[0].Remaining != 1 {
					t.Errorf("the first request: %+v, want its reply", r)
				}
			case !errors.Is(r.Err, errReply) || errors.Is(r.Err, backend.ErrUnavailable):
				t.Errorf("request %d check %d: %v, want the reply error", i, k, r.Err)
			}
		}
	}
}

// TestCoalescerMergedCallerLeaves: a caller that leaves while its request
// is queued is not in the merged call; one that leaves while the merged
// call is in flight returns at once, abandoned; the others in the call
// get their own replies all the same.
func TestCoalescerMergedCallerLeaves(t *testing.T) {
	b, c, f, d0 := laneBusy(t)
	clock := scriptClock{At: 1}
	jobs := []*unitJob{
		buildJob(t, b, false, clock, uid("id1")),
		buildJob(t, b, false, clock, uid("id2")), // leaves in flight
		buildJob(t, b, false, clock, uid("id3")), // leaves queued
		buildJob(t, b, false, clock, uid("id4")),
	}
	ctxs := make([]context.Context, len(jobs))
	cancels := make([]context.CancelFunc, len(jobs))
	var dones []<-chan decision
	for i, u := range jobs {
		ctxs[i], cancels[i] = context.WithCancel(context.Background())
		defer cancels[i]()
		dones = append(dones, decideAsyncJob(ctxs[i], c, u.j))
		waitUntil(t, 10*time.Second, "queued", func() bool { return queued(c.single) == i+1 })
	}
	cancels[2]()
	if r := wait(t, dones[2]); !r.abandoned {
		t.Fatalf("the caller leaving its queued request: %+v", r)
	}
	f.release <- struct{}{}
	wait(t, d0)
	got := f.next(t)
	if len(got) != 1 || !slices.Equal(got[0].parts, []*call{jobs[0].j.ptrs[0], jobs[1].j.ptrs[0], jobs[3].j.ptrs[0]}) {
		t.Fatal("the merged call is not the three requests whose callers stayed")
	}
	cancels[1]()
	if r := wait(t, dones[1]); !r.abandoned || !errors.Is(r.why, context.Canceled) {
		t.Fatalf("the caller leaving the merged call in flight: %+v", r)
	}
	f.release <- struct{}{}
	for _, i := range []int{0, 3} {
		if r := wait(t, dones[i]); r.abandoned || r.why != nil {
			t.Fatalf("request %d: %+v", i, r)
		}
		u := jobs[i]
		u.fill(b)
		if r := u.results[0]; r.Err != nil || r.Outcomes[0].Remaining != uint64(u.checks[0].Identity[2]-'0') {
			t.Errorf("request %d: %+v, want its own reply", i, r)
		}
	}
	waitUntil(t, 10*time.Second, "the lane to stop", c.single.idle)
	f.none(t)
}

// TestMergeByTag: on a cluster a merged call joins only calls of one hash
// tag (one slot), the first of them and those after it, each tag's calls
// in their order; calls of a tag seen once go as they are.
func TestMergeByTag(t *testing.T) {
	b := unitBackend()
	clock := scriptClock{At: 1}
	var calls []*call
	for _, id := range []string{"a1", "b1", "a2", "c1", "a3", "b2"} {
		calls = append(calls, buildJob(t, b, false, clock, uid(id[:1]+"|"+id)).j.ptrs...)
	}
	// Identities a|a1 and a|a2 differ: give the calls one tag per letter.
	for i, c := range calls {
		key := fmt.Sprintf("u:{%c}", "abacab"[i])
		c.argv[3] = &key
	}
	m := new(merger)
	wire := m.merge(calls, maxMergeItems, true)
	want := [][]*call{{calls[0], calls[2], calls[4]}, {calls[1], calls[5]}, {calls[3]}}
	if len(wire) != len(want) {
		t.Fatalf("%d calls sent, want %d", len(wire), len(want))
	}
	for i, w := range wire {
		got := w.parts
		if got == nil {
			got = []*call{w}
		}
		if !slices.Equal(got, want[i]) {
			t.Errorf("call %d sent joins %d calls, want %d, in order", i, len(got), len(want[i]))
		}
	}
	m.release()
}
