package redis

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strings"
	"sync/atomic"

	goredis "github.com/redis/go-redis/v9"
	"github.com/sirupsen/logrus"

	"github.com/sluice-rl/sluice/pkg/backend"
	"github.com/sluice-rl/sluice/pkg/limit"
)

// AnnounceChannel is the pub/sub channel, after the key prefix, on which
// the instances sharing a Redis announce descriptors whose state one of
// them changed behind the others' local caches (a refund, a reset).
const AnnounceChannel = "sluice:forget"

// announceQueue is how many announcements wait for publication at most.
const announceQueue = 4096

// Announcer carries "forget what you remember of this descriptor" between
// the instances sharing a Redis, over pub/sub. Each instance announces the
// identities it refunded or reset (Announce) and forgets those the others
// announce (Run). Pub/sub delivers at most once: a message sent while an
// instance's subscription is down is lost, so Run tells the instance to
// forget everything whenever its subscription is established again.
//
// Create one with Backend.NewAnnouncer (the zero Announcer is not usable).
// Announce and Stats are safe for concurrent use; Run is called once.
type Announcer struct {
	client  goredis.UniversalClient
	channel string
	self    string // this instance's tag; its own announcements are skipped
	queue   chan string
	log     *logrus.Entry
	backend *Backend

	dropped   atomic.Uint64
	failed    atomic.Uint64
	published atomic.Uint64
	received  atomic.Uint64
	failing   atomic.Bool // a publish failure was logged since the last success
}

// NewAnnouncer returns an Announcer on b's Redis and key prefix.
func (b *Backend) NewAnnouncer() *Announcer {
	var tag [8]byte
	rand.Read(tag[:])
	return &Announcer{
		client:  b.client,
		channel: b.opts.KeyPrefix + AnnounceChannel,
		self:    hex.EncodeToString(tag[:]),
		queue:   make(chan string, announceQueue),
		log:     b.log.WithField("channel", b.opts.KeyPrefix+AnnounceChannel),
		backend: b,
	}
}

// Announce queues identity for publication to the other instances. It
// never blocks: when the queue is full the announcement is dropped, and
// counted and logged; the other instances then serve their denial of
// identity until their local cache's own bound on it ends.
func (a *Announcer) Announce(identity string) {
	select {
	case a.queue <- identity:
	default:
		if a.dropped.Add(1) == 1 {
			a.log.Warn("redis: announcement queue full; other instances may serve a cached denial of a refunded descriptor until their cache's bound")
		}
	}
}

// AnnouncerStats are an Announcer's counters since NewAnnouncer, in
// announcements.
type AnnouncerStats struct {
	// Published are announcements sent; Failed could not be sent; Dropped
	// found the queue full; Received are other instances' announcements.
	Published, Failed, Dropped, Received uint64
}

// Stats returns the counters.
func (a *Announcer) Stats() AnnouncerStats {
	return AnnouncerStats{Published: a.published.Load(), Failed: a.failed.Load(), Dropped: a.dropped.Load(), Received: a.received.Load()}
}

// Run publishes this instance's announcements and passes the other
// instances' to forget, until ctx is done. Whenever its subscription is
// established (at start and after every reconnection, when announcements
// may have been missed) it calls forgetAll first.
func (a *Announcer) Run(ctx context.Context, forget func(identity string), forgetAll func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		a.publish(ctx)
	}()
	a.subscribe(ctx, forget, forgetAll)
	<-done
}

func (a *Announcer) subscribe(ctx context.Context, forget func(string), forgetAll func()) {
	ps := a.client.Subscribe(ctx, a.channel)
	defer ps.Close()
	msgs := ps.ChannelWithSubscriptions(goredis.WithChannelSize(1024))
	subscribed := 0
	for {
		select {
		case <-ctx.Done():
			return
		case m, ok := <-msgs:
			if !ok {
				return
			}
			switch m := m.(type) {
			case *goredis.Subscription:
				if m.Kind != "subscribe" {
					continue
				}
				forgetAll()
				if subscribed++; subscribed > 1 {
					a.log.Info("redis: announcement channel subscribed again; forgot every cached denial, since announcements may have been missed")
				}
			case *goredis.Message:
				tag, identity, ok := strings.Cut(m.Payload, ":")
				if !ok || tag == a.self {
					continue
				}
				a.received.Add(1)
				forget(identity)
			}
		}
	}
}

func (a *Announcer) publish(ctx context.Context) {
	for {
		var identity string
		select {
		case <-ctx.Done():
			return
		case identity = <-a.queue:
		}
		pctx, cancel := context.WithTimeout(ctx, a.backend.opts.Timeout)
		err := a.client.Publish(pctx, a.channel, a.self+":"+identity).Err()
		cancel()
		if err != nil {
			a.failed.Add(1)
			if a.failing.CompareAndSwap(false, true) && ctx.Err() == nil {
				a.log.WithError(err).Warn("redis: cannot announce a refund or reset to the other instances; they may serve a cached denial of it until their cache's bound")
			}
			continue
		}
		a.published.Add(1)
		a.failing.Store(false)
	}
}

// Announcing is the Redis backend of an instance without a local denial
// cache that still announces, on its Announcer, the refunds it accepted and
// every reset: the other instances' caches must hear of them whatever this
// one caches. Get one with Announcer.Announcing.
type Announcing struct {
	*Backend
	announce func(identity string)
}

var _ backend.Resetter = (*Announcing)(nil)

// Announcing returns a's backend wrapped so that it announces on a each
// refund it accepts and each reset.
func (a *Announcer) Announcing() *Announcing {
	return &Announcing{Backend: a.backend, announce: a.Announce}
}

// Decide decides through Redis and announces each accepted refund.
func (a *Announcing) Decide(ctx context.Context, checks []backend.Check) []backend.Result {
	res := a.Backend.Decide(ctx, checks)
	for i := range checks {
		if checks[i].Cost.Refund && i < len(res) && res[i].Err == nil {
			a.announce(checks[i].Identity)
		}
	}
	return res
}

// Reset resets through Redis and announces it, even after an error: part
// of it may have happened.
func (a *Announcing) Reset(ctx context.Context, identity string, rules []limit.Rule) error {
	err := a.Backend.Reset(ctx, identity, rules)
	a.announce(identity)
	return err
}
