package main

import (
	"errors"
	"flag"
	"fmt"
	"strings"
	"sync"
	"time"

	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"github.com/sirupsen/logrus"

	"github.com/sluice-rl/sluice/internal/admin"
	"github.com/sluice-rl/sluice/internal/metrics"
	"github.com/sluice-rl/sluice/internal/service"
	"github.com/sluice-rl/sluice/internal/xds"
)

// The CONFIG_TYPE values, lower case as choiceValue stores them.
const (
	configTypeFile = "file"
	configTypeXDS  = "grpc_xds_sotw"
)

// configSettings say where the rate-limit configuration comes from:
// files (the default) or an xDS management server.
type configSettings struct {
	// Type is configTypeFile or configTypeXDS (CONFIG_TYPE).
	Type string
	// ForceStart reports the server healthy before the first xDS
	// configuration arrives; with files, it makes config paths that do
	// not exist yet an empty configuration, loaded when they appear
	// (FORCE_START_WITHOUT_INITIAL_CONFIG).
	ForceStart bool
	// XDS are the xDS client's settings.
	XDS xds.Settings
}

// xdsEnabled reports whether the configuration comes over xDS.
func (c *configSettings) xdsEnabled() bool { return c.Type == configTypeXDS }

// configFlags defines the CONFIG_TYPE, FORCE_START_WITHOUT_INITIAL_CONFIG,
// CONFIG_GRPC_XDS_* and XDS_CLIENT_* flags, with envoyproxy/ratelimit's
// defaults, writing into c. It returns each flag's environment variable.
func configFlags(fs *flag.FlagSet, c *configSettings) []envName {
	var names []envName
	bind := func(name, env string) string {
		names = append(names, envName{name, env})
		return " (env " + env + ")"
	}
	x := &c.XDS
	d := xds.DefaultSettings()
	c.Type = configTypeFile
	fs.Var(&choiceValue{p: &c.Type, allowed: []string{configTypeFile, configTypeXDS}}, "config-type",
		"where the rate-limit configuration comes from: files, or an xDS management server (file|grpc_xds_sotw)"+bind("config-type", "CONFIG_TYPE"))
	fs.BoolVar(&c.ForceStart, "force-start-without-initial-config", false,
		"start without a configuration: with xDS, report healthy before the first one arrives (requests are answered Unavailable until then); "+
			"with files, start with no limits when the config path does not exist yet, and load it when it appears"+
			bind("force-start-without-initial-config", "FORCE_START_WITHOUT_INITIAL_CONFIG"))
	fs.StringVar(&x.ServerURL, "xds-server-url", d.ServerURL, "xDS management server, host:port"+bind("xds-server-url", "CONFIG_GRPC_XDS_SERVER_URL"))
	fs.StringVar(&x.NodeID, "xds-node-id", d.NodeID, "node id sent to the xDS server"+bind("xds-node-id", "CONFIG_GRPC_XDS_NODE_ID"))
	fs.StringVar(&x.NodeMetadata, "xds-node-metadata", "", "node metadata sent to the xDS server, key=value,key2=value2"+
		bind("xds-node-metadata", "CONFIG_GRPC_XDS_NODE_METADATA"))
	fs.DurationVar(&x.ConnectRetryInterval, "xds-connect-retry-interval", d.ConnectRetryInterval,
		"wait between attempts to reach the xDS server (±50% jitter)"+bind("xds-connect-retry-interval", "CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL"))
	fs.Var(headersValue{&x.Headers}, "xds-headers", "gRPC metadata added to the xDS stream, name:value,name2:value2"+
		bind("xds-headers", "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS"))
	fs.BoolVar(&x.UseTLS, "xds-tls", false, "connect to the xDS server over TLS"+bind("xds-tls", "CONFIG_GRPC_XDS_SERVER_USE_TLS"))
	fs.StringVar(&x.ClientCert, "xds-tls-cert", "", "client certificate file for the xDS server (re-read at each connection)"+
		bind("xds-tls-cert", "CONFIG_GRPC_XDS_CLIENT_TLS_CERT"))
	fs.StringVar(&x.ClientKey, "xds-tls-key", "", "client key file for the xDS server"+bind("xds-tls-key", "CONFIG_GRPC_XDS_CLIENT_TLS_KEY"))
	fs.StringVar(&x.ServerCACert, "xds-tls-cacert", "", "CA file trusted for the xDS server's certificate, besides the system roots"+
		bind("xds-tls-cacert", "CONFIG_GRPC_XDS_SERVER_TLS_CACERT"))
	fs.StringVar(&x.ServerSAN, "xds-tls-san", "", "name the xDS server's certificate must carry, instead of the host of the URL"+
		bind("xds-tls-san", "CONFIG_GRPC_XDS_SERVER_TLS_SAN"))
	fs.DurationVar(&x.BackoffInitial, "xds-backoff-initial-interval", d.BackoffInitial,
		"first wait before a new xDS stream after one failed"+bind("xds-backoff-initial-interval", "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL"))
	fs.DurationVar(&x.BackoffMax, "xds-backoff-max-interval", d.BackoffMax,
		"longest wait before a new xDS stream (the wait doubles per failure)"+bind("xds-backoff-max-interval", "XDS_CLIENT_BACKOFF_MAX_INTERVAL"))
	fs.Float64Var(&x.BackoffRandomFactor, "xds-backoff-random-factor", d.BackoffRandomFactor,
		"with jitter, spread each wait over ±this share of itself"+bind("xds-backoff-random-factor", "XDS_CLIENT_BACKOFF_RANDOM_FACTOR"))
	fs.BoolVar(&x.BackoffJitter, "xds-backoff-jitter", d.BackoffJitter, "randomize the waits"+bind("xds-backoff-jitter", "XDS_CLIENT_BACKOFF_JITTER"))
	fs.IntVar(&x.MaxMsgSize, "xds-max-msg-size", 0, "largest xDS response accepted, bytes; 0 means 4 MiB"+
		bind("xds-max-msg-size", "XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES"))
	return names
}

// validateConfigSource checks the xDS settings when they are used, and
// returns notes for the log about settings that do not apply.
func (s *settings) validateConfigSource(env map[string]string) (notes []string, err error) {
	if env["GRPC_SERVER_TLS_CA_CERT"] != "" && s.GRPCClientCACert == "" {
		// Envoy Gateway sets it; envoyproxy/ratelimit has no such setting.
		notes = append(notes, "GRPC_SERVER_TLS_CA_CERT is not a setting of sluice or envoyproxy/ratelimit: gRPC clients need no certificate; set GRPC_CLIENT_TLS_CACERT to require one")
	}
	c := &s.ConfigSource
	if !c.xdsEnabled() {
		return notes, nil
	}
	if err := c.XDS.Validate(); err != nil {
		return nil, fmt.Errorf("invalid xDS settings (CONFIG_GRPC_XDS_*, XDS_CLIENT_*): %w", err)
	}
	if len(s.Configs) > 0 {
		// Named on purpose (RUNTIME_* is set by every reference
		// deployment, Envoy Gateway's included): not a mere note.
		s.warnings = append(s.warnings, s.source["config"]+" names config files ("+strings.Join(s.Configs, ", ")+
			"), but CONFIG_TYPE=GRPC_XDS_SOTW takes the rate-limit configuration from the xDS server: the files are not read")
		return notes, nil
	}
	notes = append(notes, "CONFIG_TYPE=GRPC_XDS_SOTW: the rate-limit configuration comes from the xDS server; config files ("+
		strings.Join(s.configPaths(), ", ")+") are not read")
	return notes, nil
}

// xdsSource is the configuration source of CONFIG_TYPE=GRPC_XDS_SOTW: the
// xDS client, and the gate that answers Unavailable until the first
// configuration is applied.
type xdsSource struct {
	client *xds.Client
	gate   *xds.Gate
	mu     sync.Mutex
	state  admin.ReloadState // loads so far, for the admin page
}

// stats returns the loads so far.
func (x *xdsSource) stats() admin.ReloadState {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.state
}

// record counts one load.
func (x *xdsSource) record(err error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if err != nil {
		x.state.Failures++
		x.state.LastFailure, x.state.LastError = time.Now(), err
		return
	}
	x.state.Successes++
	x.state.LastSuccess, x.state.LastError = time.Now(), nil
}

// newXDSSource builds the xDS client that compiles each response with
// xds.Compile and puts it in svc, then calls onApply.
func newXDSSource(s *settings, svc *service.Service, obs *observability, log *logrus.Logger, onApply func()) (*xdsSource, error) {
	x, err := obs.metrics.RegisterXDS()
	if err != nil {
		return nil, err
	}
	src := &xdsSource{gate: xds.NewGate(svc)}
	var observer xds.Observer
	if x != nil {
		observer = x
	}
	client, err := xds.New(xds.Options{
		Settings: s.ConfigSource.XDS,
		Observer: observer,
		Logger:   log,
		Apply: func(version string, confs []*rlsconfv3.RateLimitConfig) error {
			c, err := xds.Compile(confs, xds.CompileOptions{MergeDomains: s.MergeDomains})
			src.record(err)
			if err != nil {
				obs.metrics.ConfigLoadFailed()
				return err
			}
			for _, w := range c.Warnings() {
				log.Warn("config: " + w)
			}
			svc.SetConfig(c)
			obs.metrics.ConfigLoaded(len(c.Domains()))
			obs.metrics.ConfigApplied(c)
			domains := c.Domains()
			log.WithField("xds_version", version).Infof("config loaded: %d %s %v", len(domains), plural(len(domains), "domain", "domains"), domains)
			src.gate.Open()
			onApply()
			return nil
		},
	})
	if err != nil {
		return nil, err
	}
	src.client = client
	return src, nil
}

// ready reports whether health may say SERVING as far as the
// configuration goes: once a configuration is applied, or from the start
// with FORCE_START_WITHOUT_INITIAL_CONFIG.
func (x *xdsSource) ready(forceStart bool) func() bool {
	return func() bool { return forceStart || x.gate.IsOpen() }
}

// headersValue is the CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS flag.
type headersValue struct{ m *map[string]string }

func (h headersValue) String() string {
	if h.m == nil || *h.m == nil {
		return ""
	}
	parts := make([]string, 0, len(*h.m))
	for k, v := range *h.m {
		parts = append(parts, k+":"+v)
	}
	return strings.Join(parts, ",")
}

func (h headersValue) Set(v string) error {
	m, err := xds.ParseHeaders(v)
	if err != nil {
		return errors.New("want name:value,name2:value2: " + err.Error())
	}
	*h.m = m
	return nil
}

// Compile-time check: the xDS families satisfy the client's Observer.
var _ xds.Observer = (*metrics.XDS)(nil)
