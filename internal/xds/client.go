package xds

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"github.com/sirupsen/logrus"
	statuspb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	grpcbackoff "google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"
)

// TypeURL is the resource type the client subscribes to: go-control-plane's
// ratelimit RateLimitConfig, as Envoy Gateway serves it and
// envoyproxy/ratelimit reads it.
const TypeURL = "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig"

// Observer hears what the client does, for metrics. Its methods are called
// from Run's goroutine.
type Observer interface {
	// Connected reports a stream to the management server opened (true)
	// or ended (false).
	Connected(bool)
	// Accepted reports a response applied and ACKed, with its version.
	Accepted(version string)
	// Rejected reports a response NACKed with err; the previous
	// configuration stays in use.
	Rejected(version string, err error)
}

// Options configure a Client. Apply is required.
type Options struct {
	// Settings say where the management server is and how to reach it.
	Settings Settings
	// Apply validates the RateLimitConfig resources of one response and
	// puts them in use. An error NACKs the response with the error's text
	// and must leave the configuration in use as it was. It is called from
	// Run's goroutine, one response at a time.
	Apply func(version string, configs []*rlsconfv3.RateLimitConfig) error
	// Observer may be nil.
	Observer Observer
	// Logger receives connection changes and every NACK; nil means
	// logrus' standard logger.
	Logger logrus.FieldLogger
	// Rand returns numbers in [0, 1) for the backoff's jitter; nil means
	// math/rand/v2.
	Rand func() float64
	// After waits before a new stream; nil means time.After. Tests pass
	// their own.
	After func(time.Duration) <-chan time.Time
}

// Client is a State-of-the-World xDS client of one resource type, TypeURL,
// on the aggregated (ADS) stream, as envoyproxy/ratelimit's. It keeps one
// gRPC connection; when a stream ends it opens a new one after a backoff,
// asking for the server's current state again.
type Client struct {
	opts    Options
	log     logrus.FieldLogger
	conn    *grpc.ClientConn
	node    *corev3.Node
	headers metadata.MD
	backoff backoff

	// accepted is the version of the last response applied; rejected
	// the version of the last response NACKed, "" after an ACK.
	accepted, rejected string
}

// nackRepeatDelay is how long the client waits before NACKing a response
// of the version it has just NACKed. go-control-plane's snapshot cache
// (Envoy Gateway's) answers a NACK, which names the last good version, by
// sending the rejected version again at once; without a pause the two
// would loop as fast as the network allows until the configuration is
// fixed. The pause also delays a fixed configuration by at most this long.
const nackRepeatDelay = time.Second

// New checks opts, reads the TLS files and prepares the connection; it
// does not connect yet (Run does).
func New(opts Options) (*Client, error) {
	if opts.Apply == nil {
		return nil, errors.New("xds: Options.Apply is nil")
	}
	s := opts.Settings
	if err := s.Validate(); err != nil {
		return nil, fmt.Errorf("xds: %w", err)
	}
	meta, _ := ParseNodeMetadata(s.NodeMetadata) // Validate checked it
	fields := make(map[string]*structpb.Value, len(meta))
	for k, v := range meta {
		fields[k] = structpb.NewStringValue(v)
	}
	creds := insecure.NewCredentials()
	if s.UseTLS {
		tc, err := s.tlsConfig()
		if err != nil {
			return nil, fmt.Errorf("xds: %w", err)
		}
		creds = credentials.NewTLS(tc)
	}
	dial := []grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff: grpcbackoff.Config{
				BaseDelay:  s.ConnectRetryInterval,
				Multiplier: 1,
				Jitter:     0.5,
				MaxDelay:   s.ConnectRetryInterval,
			},
			MinConnectTimeout: 20 * time.Second,
		}),
	}
	if s.MaxMsgSize > 0 {
		dial = append(dial, grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(s.MaxMsgSize)))
	}
	conn, err := grpc.NewClient(s.ServerURL, dial...)
	if err != nil {
		return nil, fmt.Errorf("xds: server %q: %w", s.ServerURL, err)
	}
	c := &Client{
		opts:    opts,
		log:     opts.Logger,
		conn:    conn,
		node:    &corev3.Node{Id: s.NodeID, Metadata: &structpb.Struct{Fields: fields}},
		headers: metadata.New(s.Headers),
		backoff: backoff{initial: s.BackoffInitial, max: s.BackoffMax, factor: s.BackoffRandomFactor,
			jitter: s.BackoffJitter, rand: opts.Rand},
	}
	if c.log == nil {
		c.log = logrus.StandardLogger()
	}
	if c.backoff.rand == nil {
		c.backoff.rand = rand.Float64
	}
	if c.opts.After == nil {
		c.opts.After = time.After
	}
	return c, nil
}

// Run subscribes until ctx is done, then closes the connection.
func (c *Client) Run(ctx context.Context) {
	defer c.conn.Close()
	log := c.log.WithField("xds_server", c.opts.Settings.ServerURL)
	log.WithField("node_id", c.node.Id).Info("xds: subscribing to rate-limit configuration")
	for {
		reached, err := c.stream(ctx)
		if ctx.Err() != nil {
			return
		}
		if reached == streamReceived {
			c.backoff.reset()
		}
		wait := c.backoff.next()
		hint := ""
		if status.Code(err) == codes.ResourceExhausted {
			// gRPC names neither the setting nor the bound's origin.
			hint = fmt.Sprintf(" (a response larger than the bound of XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES, %s: raise it)", maxMsgSizeText(c.opts.Settings.MaxMsgSize))
		}
		log.WithError(err).Warnf("xds: %s%s; the configuration in use stays; retrying in %v", reached, hint, wait.Round(time.Millisecond))
		select {
		case <-ctx.Done():
			return
		case <-c.opts.After(wait):
		}
	}
}

// maxMsgSizeText describes the response bound n (0: gRPC's default).
func maxMsgSizeText(n int) string {
	if n == 0 {
		return "unset, so gRPC's 4 MiB"
	}
	return strconv.Itoa(n) + " bytes"
}

// streamReach is how far one ADS stream got before it failed; its String
// is what the retry warning says happened.
type streamReach uint8

const (
	streamNone      streamReach = iota // no stream could be opened
	streamConnected                    // opened, but no response arrived
	streamReceived                     // at least one response arrived
)

func (r streamReach) String() string {
	switch r {
	case streamConnected:
		return "the stream to the management server failed before its first response"
	case streamReceived:
		return "the stream to the management server ended"
	}
	return "no stream to the management server"
}

// stream runs one ADS stream until it fails, and reports how far it got.
func (c *Client) stream(ctx context.Context) (reached streamReach, err error) {
	ctx, cancel := context.WithCancel(metadata.NewOutgoingContext(ctx, c.headers))
	defer cancel()
	st, err := discoveryv3.NewAggregatedDiscoveryServiceClient(c.conn).StreamAggregatedResources(ctx)
	if err != nil {
		return streamNone, fmt.Errorf("open the ADS stream: %w", err)
	}
	// A new stream asks for the current state (no version): a restarted
	// server may reuse version names for other content.
	if err := st.Send(&discoveryv3.DiscoveryRequest{Node: c.node, TypeUrl: TypeURL}); err != nil {
		return streamConnected, fmt.Errorf("send the subscription: %w", err)
	}
	c.observer(func(o Observer) { o.Connected(true) })
	defer c.observer(func(o Observer) { o.Connected(false) })
	c.log.WithField("xds_server", c.opts.Settings.ServerURL).Info("xds: connected to the management server")
	reached = streamConnected
	for {
		resp, err := st.Recv()
		if err != nil {
			return reached, fmt.Errorf("receive: %w", err)
		}
		reached = streamReceived
		req, repeat := c.handle(resp)
		if repeat {
			select {
			case <-ctx.Done():
				return reached, ctx.Err()
			case <-c.opts.After(nackRepeatDelay):
			}
		}
		if err := st.Send(req); err != nil {
			return reached, fmt.Errorf("send ACK/NACK: %w", err)
		}
	}
}

// handle applies one response and returns its ACK or NACK; repeat
// reports a NACK of the version NACKed just before.
func (c *Client) handle(resp *discoveryv3.DiscoveryResponse) (req *discoveryv3.DiscoveryRequest, repeat bool) {
	version := resp.GetVersionInfo()
	err := c.apply(resp)
	req = &discoveryv3.DiscoveryRequest{Node: c.node, TypeUrl: TypeURL, ResponseNonce: resp.GetNonce()}
	if err != nil {
		req.VersionInfo = c.accepted
		req.ErrorDetail = &statuspb.Status{Code: int32(codes.InvalidArgument), Message: err.Error()}
		repeat = c.rejected == version
		c.rejected = version
		entry := c.log.WithFields(logrus.Fields{"xds_version": version, "xds_version_in_use": c.accepted}).WithError(err)
		if repeat {
			entry.Debug("xds: rejected the configuration again (NACK)")
		} else {
			entry.Error("xds: rejected the configuration (NACK); the previous configuration stays in use")
		}
		c.observer(func(o Observer) { o.Rejected(version, err) })
		return req, repeat
	}
	c.accepted, c.rejected = version, ""
	req.VersionInfo = version
	c.log.WithFields(logrus.Fields{"xds_version": version, "resources": len(resp.GetResources())}).
		Info("xds: applied the configuration (ACK)")
	c.observer(func(o Observer) { o.Accepted(version) })
	return req, false
}

// apply decodes a response's resources and hands them to Options.Apply.
// A panic in either is a NACK, not a crash.
func (c *Client) apply(resp *discoveryv3.DiscoveryResponse) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("internal error applying the configuration: %v", r)
		}
	}()
	if t := resp.GetTypeUrl(); t != TypeURL {
		return fmt.Errorf("response of type %q, want %q", t, TypeURL)
	}
	configs := make([]*rlsconfv3.RateLimitConfig, 0, len(resp.GetResources()))
	for i, res := range resp.GetResources() {
		conf := &rlsconfv3.RateLimitConfig{}
		if err := anypb.UnmarshalTo(res, conf, proto.UnmarshalOptions{}); err != nil {
			return fmt.Errorf("resource %d: %w", i, err)
		}
		configs = append(configs, conf)
	}
	return c.opts.Apply(resp.GetVersionInfo(), configs)
}

func (c *Client) observer(f func(Observer)) {
	if c.opts.Observer != nil {
		f(c.opts.Observer)
	}
}
