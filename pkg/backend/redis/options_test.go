package redis

import (
	"context"
	"github.com/sluice-rl/sluice/internal/testkit/testenv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

func TestOptionsClient(t *testing.T) {
	tests := []struct {
		name    string
		opts    Options
		wantErr string
		check   func(t *testing.T, c goredis.UniversalClient)
	}{
		{
			name: "single host:port, defaults",
			opts: Options{URL: "127.0.0.1:6379"},
			check: func(t *testing.T, c goredis.UniversalClient) {
				o := c.(*goredis.Client).Options()
				if o.Network != "tcp" || o.Addr != "127.0.0.1:6379" || o.ReadTimeout != DefaultTimeout || o.MaxRetries > 0 || o.DialerRetries != 1 || o.TLSConfig != nil {
					t.Errorf("options %+v", o)
				}
			},
		},
		{
			name: "type is case-insensitive, auth user:password",
			opts: Options{Type: "SINGLE", URL: "localhost:7000", Auth: "alice:s3cret:x", Timeout: 250 * time.Millisecond, PoolSize: 7},
			check: func(t *testing.T, c goredis.UniversalClient) {
				o := c.(*goredis.Client).Options()
				if o.Username != "alice" || o.Password != "s3cret:x" || o.DialTimeout != 250*time.Millisecond || o.PoolTimeout != 250*time.Millisecond || o.PoolSize != 7 {
					t.Errorf("options %+v", o)
				}
			},
		},
		{
			name: "auth password only",
			opts: Options{URL: "localhost:7000", Auth: "pw"},
			check: func(t *testing.T, c goredis.UniversalClient) {
				o := c.(*goredis.Client).Options()
				if o.Username != "" || o.Password != "pw" {
					t.Errorf("user %q password %q", o.Username, o.Password)
				}
			},
		},
		{
			name: "redis:// URL with credentials and db",
			opts: Options{URL: "redis://bob:pw@10.0.0.1:6380/3"},
			check: func(t *testing.T, c goredis.UniversalClient) {
				o := c.(*goredis.Client).Options()
				if o.Addr != "10.0.0.1:6380" || o.Username != "bob" || o.Password != "pw" || o.DB != 3 {
					t.Errorf("options %+v", o)
				}
			},
		},
		{
			name: "rediss:// enables TLS with the host as server name",
			opts: Options{URL: "rediss://redis.example:6380"},
			check: func(t *testing.T, c goredis.UniversalClient) {
				o := c.(*goredis.Client).Options()
				if o.TLSConfig == nil || o.TLSConfig.ServerName != "redis.example" {
					t.Errorf("TLS config %+v", o.TLSConfig)
				}
			},
		},
		{
			name: "unix socket path inferred",
			opts: Options{URL: "/var/run/redis.sock"},
			check: func(t *testing.T, c goredis.UniversalClient) {
				o := c.(*goredis.Client).Options()
				if o.Network != "unix" || o.Addr != "/var/run/redis.sock" {
					t.Errorf("network %s addr %s", o.Network, o.Addr)
				}
			},
		},
		{
			name: "unix socket explicit",
			opts: Options{URL: "/tmp/r.sock", SocketType: "UNIX"},
			check: func(t *testing.T, c goredis.UniversalClient) {
				if o := c.(*goredis.Client).Options(); o.Network != "unix" {
					t.Errorf("network %s", o.Network)
				}
			},
		},
		{
			name: "sentinel: master name and sentinels, separate sentinel auth",
			opts: Options{Type: "Sentinel", URL: "mymaster,10.0.0.1:26379,10.0.0.2:26379", Auth: "pw", SentinelAuth: "sen:tinel"},
			check: func(t *testing.T, c goredis.UniversalClient) {
				if _, ok := c.(*goredis.Client); !ok {
					t.Errorf("client %T, want a failover *redis.Client", c)
				}
			},
		},
		{
			name: "cluster seed list",
			opts: Options{Type: "cluster", URL: "10.0.0.1:7000, 10.0.0.2:7000,,"},
			check: func(t *testing.T, c goredis.UniversalClient) {
				o := c.(*goredis.ClusterClient).Options()
				if strings.Join(o.Addrs, " ") != "10.0.0.1:7000 10.0.0.2:7000" || o.MaxRetries > 0 {
					t.Errorf("options %+v", o)
				}
			},
		},
		{name: "unknown type", opts: Options{Type: "ring", URL: "a:1"}, wantErr: "want single, sentinel or cluster"},
		{name: "empty URL", opts: Options{}, wantErr: "URL is empty"},
		{name: "bad host:port", opts: Options{URL: "localhost"}, wantErr: "missing port"},
		{name: "prefix with a brace", opts: Options{URL: "a:1", KeyPrefix: "x{"}, wantErr: "hash tag"},
		{name: "sentinel without sentinels", opts: Options{Type: "sentinel", URL: "mymaster"}, wantErr: "master,host:port"},
		{name: "cluster with a bad seed", opts: Options{Type: "cluster", URL: "a:1,b"}, wantErr: "missing port"},
		{name: "unix socket with cluster", opts: Options{Type: "cluster", URL: "a:1", SocketType: "unix"}, wantErr: "only with type single"},
		{name: "socket type tcp but a path", opts: Options{URL: "/tmp/r.sock", SocketType: "tcp"}, wantErr: "is a unix socket"},
		{
			name: "socket type unix takes the URL as the path, as the reference does",
			opts: Options{URL: "run/redis.sock", SocketType: "unix"},
			check: func(t *testing.T, c goredis.UniversalClient) {
				if o := c.(*goredis.Client).Options(); o.Network != "unix" || o.Addr != "run/redis.sock" {
					t.Errorf("network %s addr %s", o.Network, o.Addr)
				}
			},
		},
		{name: "bad socket type", opts: Options{URL: "a:1", SocketType: "udp"}, wantErr: "want tcp or unix"},
		{name: "negative timeout", opts: Options{URL: "a:1", Timeout: -time.Second}, wantErr: "negative"},
		{name: "negative pipeline window", opts: Options{URL: "a:1", PipelineWindow: -time.Microsecond}, wantErr: "window -1µs is negative"},
		{name: "negative pipeline limit", opts: Options{URL: "a:1", PipelineLimit: -1}, wantErr: "limit -1 is negative"},
		{name: "client cert without key", opts: Options{URL: "a:1", TLS: true, TLSClientCert: "c.pem"}, wantErr: "together"},
		{name: "missing CA file", opts: Options{URL: "a:1", TLS: true, TLSCACert: "/nonexistent/ca.pem"}, wantErr: "read redis TLS CA"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o, err := tt.opts.normalize()
			var c goredis.UniversalClient
			if err == nil {
				c, err = newClient(o)
			}
			if !testenv.WantErr(t, err, tt.wantErr) {
				return
			}
			defer c.Close()
			tt.check(t, c)
		})
	}
}

func TestOptionsDefaults(t *testing.T) {
	o, err := Options{URL: "a:1"}.normalize()
	if err != nil {
		t.Fatal(err)
	}
	if o.Type != TypeSingle || o.Timeout != DefaultTimeout || o.Breaker.Failures != DefaultBreakerFailures ||
		o.Breaker.OpenFor != DefaultBreakerOpenFor || o.Logger == nil || o.Clock == nil ||
		o.DisableCoalescing || o.PipelineWindow != 0 || o.PipelineLimit != DefaultPipelineLimit || o.pipelineLanes != defaultPipelineLanes {
		t.Fatalf("defaults not filled: %+v", o)
	}
	fixed := time.Date(2031, 1, 2, 3, 4, 5, 0, time.UTC)
	o, err = Options{URL: "a:1", FakeRedisClock: func() time.Time { return fixed }}.normalize()
	if err != nil {
		t.Fatal(err)
	}
	if !o.Clock().Equal(fixed) {
		t.Fatalf("Clock defaults to FakeRedisClock when it is set; got %v", o.Clock())
	}
}

// TestValidate: Validate refuses what New refuses, with the same error,
// without connecting, and accepts what New accepts.
func TestValidate(t *testing.T) {
	tests := []struct {
		name string
		opts Options
		want string // in the error; "" for none
	}{
		{"single", Options{URL: "127.0.0.1:1"}, ""},
		{"cluster", Options{Type: "cluster", URL: "127.0.0.1:1,127.0.0.1:2"}, ""},
		{"no URL", Options{}, "redis URL is empty"},
		{"bad type", Options{Type: "ring", URL: "a:1"}, `redis type "ring"`},
		{"sentinel without sentinels", Options{Type: "sentinel", URL: "master"}, "redis sentinel URL"},
		{"cluster address without port", Options{Type: "cluster", URL: "host"}, `redis address "host"`},
		{"missing CA file", Options{URL: "a:1", TLS: true, TLSCACert: "/nonexistent/ca.pem"}, "read redis TLS CA"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.opts.Validate()
			if tt.want == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Validate: %v, want an error holding %q", err, tt.want)
			}
			if _, nerr := New(context.Background(), tt.opts); nerr == nil || !strings.Contains(nerr.Error(), tt.want) {
				t.Errorf("New: %v, want the same refusal", nerr)
			}
		})
	}
}

// TestURLQueryKept: the connection settings a redis:// URL's query carries
// reach the client, beside the backend's own (timeouts, no retries).
func TestURLQueryKept(t *testing.T) {
	o, err := Options{URL: "redis://127.0.0.1:1/2?client_name=edge&protocol=2&min_idle_conns=3&max_idle_conns=7&conn_max_lifetime=1m&pool_fifo=true", Timeout: time.Second}.normalize()
	if err != nil {
		t.Fatal(err)
	}
	c, err := newClient(o)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	got := c.(*goredis.Client).Options()
	if got.DB != 2 || got.ClientName != "edge" || got.Protocol != 2 || got.MinIdleConns != 3 || got.MaxIdleConns != 7 ||
		got.ConnMaxLifetime != time.Minute || !got.PoolFIFO || got.ReadTimeout != time.Second || got.MaxRetries != 0 { // -1 (no retries) reads back as 0
		t.Errorf("client options %+v", got)
	}
}
