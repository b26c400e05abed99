package admin

import (
	"fmt"
	"html/template"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-rl/sluice/internal/hitters"
	"github.com/sluice-rl/sluice/internal/rlqs"
)

// Chart geometry, in SVG user units.
const (
	chartW, chartH = 600.0, 120.0
	chartPad       = 4.0
	// plotH is the plot's height; the strip below holds the time labels.
	plotH = 100.0
)

// pageData is what the page template renders.
type pageData struct {
	Status
	Now       time.Time
	Charts    []chart
	TopDenied []topRow
	TopHits   []topRow
	// Estimated is true when some row's count is a range.
	Estimated  bool
	RefreshSec int
	// Fleet is every instance found; nil when there is no fleet to show.
	Fleet *Fleet
	// HTTP is the address of the service's HTTP listener (/metrics), if
	// known.
	HTTP string
	// Quotas are the Rate Limit Quota Service's buckets (QuotasOn: the
	// service is on); QuotasMore counts those not listed.
	Quotas     []rlqs.BucketView
	QuotasOn   bool
	QuotasMore int
}

// chart is one domain's decisions/s and denials/s as SVG polylines.
type chart struct {
	Domain                     string
	Decisions, Denials, Shadow string // polyline points
	Max                        string // the y axis' top, formatted
	LastDec, LastDenial        string
	LastShadow                 string
	W, H                       float64
}

// topRow is one heavy hitter, formatted.
type topRow struct {
	hitters.Entry
	// Counted is the count, or, when it is an estimate, the range the
	// true count lies in ("12–40").
	Counted string
	ResetIn string
}

// newTopRow formats e.
func newTopRow(e hitters.Entry) topRow {
	r := topRow{Entry: e, Counted: strconv.FormatUint(e.Count, 10)}
	if e.Error > 0 {
		r.Counted = strconv.FormatUint(e.Count-e.Error, 10) + "–" + r.Counted
	}
	return r
}

// handlePage renders the live page: server-side HTML with inline SVG, no
// script and no external asset, refreshed by the browser every 10 s.
func (s *Server) handlePage(w http.ResponseWriter, r *http.Request) {
	st := s.status(r.Context())
	now := s.opts.Now()
	d := pageData{Status: st, Now: now.UTC(), RefreshSec: 10, HTTP: st.Instance.Listeners["http"], QuotasOn: s.opts.Quotas != nil}
	if s.fleetOn() {
		f := s.fleet(r.Context(), st)
		d.Fleet = &f
	}
	d.Quotas, d.QuotasMore = s.quotaRows()
	for _, rt := range st.Rates {
		d.Charts = append(d.Charts, newChart(rt))
	}
	if s.opts.Top != nil {
		for _, e := range s.opts.Top.Top(hitters.Denials, hitters.Minute, "", "", 15) {
			row := newTopRow(e)
			if left := e.ResetAt.Sub(now); left > 0 {
				row.ResetIn = "in " + left.Round(100*time.Millisecond).String()
			} else {
				row.ResetIn = "admitting now"
			}
			d.TopDenied = append(d.TopDenied, row)
		}
		for _, e := range s.opts.Top.Top(hitters.Hits, hitters.Minute, "", "", 10) {
			d.TopHits = append(d.TopHits, newTopRow(e))
		}
		for _, r := range append(d.TopDenied, d.TopHits...) {
			d.Estimated = d.Estimated || r.Error > 0
		}
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; img-src data:")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("X-Frame-Options", "DENY")
	if err := pageTemplate.Execute(w, d); err != nil {
		s.log.WithError(err).Warn("admin: render page")
	}
}

// newChart scales one domain's series into the chart box; both lines
// share one y axis from 0 to the highest decision rate.
func newChart(r Rate) chart {
	top := 0.0
	for _, v := range r.Decisions {
		top = math.Max(top, v)
	}
	top = niceCeil(top)
	c := chart{Domain: r.Domain, Max: formatRate(top), W: chartW, H: chartH}
	c.Decisions = points(r.Decisions, top)
	c.Denials = points(r.Denials, top)
	c.Shadow = points(r.Shadow, top)
	if n := len(r.Decisions); n > 0 {
		c.LastDec, c.LastDenial = formatRate(r.Decisions[n-1]), formatRate(r.Denials[n-1])
		if len(r.Shadow) == n {
			c.LastShadow = formatRate(r.Shadow[n-1])
		}
	}
	return c
}

func points(vs []float64, top float64) string {
	var b strings.Builder
	n := len(vs)
	for i, v := range vs {
		x := chartPad
		if n > 1 {
			x += float64(i) * (chartW - 2*chartPad) / float64(n-1)
		}
		y := plotH - v/top*(plotH-chartPad)
		fmt.Fprintf(&b, "%.1f,%.1f ", x, y)
	}
	return strings.TrimSpace(b.String())
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten (at least 1).
func niceCeil(v float64) float64 {
	if v <= 1 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if v <= m*p {
			return m * p
		}
	}
	return 10 * p
}

func formatRate(v float64) string {
	if v >= 100 || v == math.Trunc(v) {
		return fmt.Sprintf("%.0f/s", v)
	}
	return fmt.Sprintf("%.1f/s", v)
}

var pageTemplate = template.Must(template.New("page").Funcs(template.FuncMap{
	"since": func(t time.Time) string {
		if t.IsZero() {
			return "never"
		}
		return t.UTC().Format(time.RFC3339)
	},
	"rate": formatRate,
}).Parse(`<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="refresh" content="{{.RefreshSec}}">
<title>sluice admin · {{.Instance.Hostname}}</title>
<style>
body{font:14px/1.4 system-ui,sans-serif;margin:0;background:#f6f7f9;color:#1b1f24}
header{background:#1b3a5c;color:#fff;padding:10px 20px;display:flex;gap:24px;align-items:baseline;flex-wrap:wrap}
header h1{font-size:20px;margin:0}
main{padding:16px 20px;display:grid;gap:16px;grid-template-columns:repeat(auto-fit,minmax(420px,1fr))}
section{background:#fff;border:1px solid #d8dde3;border-radius:6px;padding:12px 16px}
h2{font-size:15px;margin:0 0 8px}
table{border-collapse:collapse;width:100%}
th,td{text-align:left;padding:3px 6px;border-bottom:1px solid #eceff2;vertical-align:top}
td.n{text-align:right;font-variant-numeric:tabular-nums}
.note{color:#59636e;font-size:12px;margin:6px 0 0}
code{font:12px ui-monospace,monospace;word-break:break-all}
.ok{color:#17803d;font-weight:600}.bad{color:#c0262d;font-weight:600}
.err{background:#fdecec;border:1px solid #f3b5b5;padding:6px 8px;border-radius:4px}
.legend span{margin-right:14px}.dec{color:#2563eb}.den{color:#dc2626}
svg{background:#fbfcfd;border:1px solid #eceff2}
nav{background:#e8edf3;padding:6px 20px;font-size:13px}nav a{margin-right:16px;color:#1b3a5c}
.sh{color:#d97706}.wide{grid-column:1/-1}tr.down td{background:#fdecec}.warn{color:#b45309;font-weight:600}
</style></head><body>
<header><h1>sluice</h1>
<span>{{.Instance.Hostname}}</span><span>version {{.Instance.Version}}</span>
<span>up {{.Uptime}}</span><span>config <code>{{.Config.Version}}</code></span>
<span>{{.Now.Format "15:04:05"}} UTC</span></header>
<nav id="links" aria-label="admin endpoints"><a href="/">live page</a><a href="/rlconfig">/rlconfig</a><a href="/api/v1/status">/api/v1/status</a><a href="/api/v1/fleet">/api/v1/fleet</a><a href="/api/v1/top?by=denials&amp;window=1m">/api/v1/top</a><a href="/api/v1/counters">/api/v1/counters</a> <span title="POST, with domain and entries">(POST /api/v1/counters/reset)</span> <a href="/debug/pprof/">/debug/pprof/</a><span title="on this listener, over HTTP/2">gRPC reflection</span>{{with .HTTP}} · <a href="http://{{.}}/metrics">/metrics</a> <a href="http://{{.}}/healthcheck">/healthcheck</a> (HTTP port){{end}}</nav>
<main>
<section id="rates"><h2>Decisions and denials per second, last 15 minutes</h2>
<div class="legend"><span class="dec">━ decisions/s</span><span class="den">━ denials/s</span><span class="sh">━ shadow-mode denials/s (answered OK)</span></div>
{{range .Charts}}<h3 style="font-size:14px;margin:10px 0 4px">{{.Domain}} <small>now {{.LastDec}} decided, {{.LastDenial}} denied, {{.LastShadow}} shadow-mode</small></h3>
<svg viewBox="0 0 {{.W}} {{.H}}" width="100%" height="{{.H}}" role="img" aria-label="rates of {{.Domain}}">
<line x1="4" y1="4" x2="596" y2="4" stroke="#e3e7eb"/><line x1="4" y1="52" x2="596" y2="52" stroke="#e3e7eb"/><line x1="4" y1="100" x2="596" y2="100" stroke="#c9ced4"/>
<text x="8" y="16" font-size="11" fill="#6b7280">{{.Max}}</text>
<text x="4" y="114" font-size="11" fill="#6b7280">−15 min</text><text x="575" y="114" font-size="11" fill="#6b7280">now</text>
<polyline class="decisions" fill="none" stroke="#2563eb" stroke-width="2" points="{{.Decisions}}"/>
<polyline class="denials" fill="none" stroke="#dc2626" stroke-width="2" points="{{.Denials}}"/>
<polyline class="shadow" fill="none" stroke="#d97706" stroke-width="2" stroke-dasharray="6 3" points="{{.Shadow}}"/>
</svg>{{else}}<p>No decisions yet.</p>{{end}}
</section>
<section id="denied"><h2>Top denied descriptors, last minute</h2>
{{if .TopDenied}}<table><tr><th>domain</th><th>rule</th><th>descriptor</th><th>denials</th><th>reset</th></tr>
{{range .TopDenied}}<tr><td>{{.Domain}}</td><td>{{.Rule}}</td><td><code>{{.Descriptor}}</code></td><td class="n">{{.Counted}}</td><td>{{.ResetIn}}</td></tr>
{{end}}</table>{{else}}<p>Nobody is being denied.</p>{{end}}
</section>
<section id="hits"><h2>Top descriptors by hits, last minute</h2>
{{if .TopHits}}<table><tr><th>domain</th><th>rule</th><th>descriptor</th><th>hits</th></tr>
{{range .TopHits}}<tr><td>{{.Domain}}</td><td>{{.Rule}}</td><td><code>{{.Descriptor}}</code></td><td class="n">{{.Counted}}</td></tr>
{{end}}</table>{{else}}<p>No hits yet.</p>{{end}}
{{if .Estimated}}<p class="note">A range is an estimate from fixed memory (many distinct descriptors): the true count lies within it.</p>{{end}}
</section>
<section id="problems"><h2>Errors and refused calls</h2>
{{if .Problems}}<table><tr><th>reason</th><th>now</th><th>last 15 min</th><th>last error</th></tr>
{{range .Problems}}<tr><td>{{.Reason}}<br><small class="note">{{.Meaning}}</small></td><td class="n">{{rate .PerSecond}}</td><td class="n">{{.Last15m}}</td><td>{{if .LastError}}<code>{{.LastError}}</code><br><small class="note">{{since .LastAt}}</small>{{end}}</td></tr>
{{end}}</table>{{else}}<p class="ok">No call failed or was refused.</p>{{end}}
<p class="note">"now" is the last full 10 s. Calls refused for their size before they are read (SLUICE_MAX_REQUEST_BYTES) are counted only in sluice_requests_refused_total.</p>
</section>
{{if .QuotasOn}}<section id="rlqs"><h2>Rate Limit Quota Service buckets</h2>
{{if .Quotas}}<table><tr><th>domain</th><th>bucket</th><th>descriptor</th><th>demand</th><th>shares</th><th>assignment</th></tr>
{{range .Quotas}}<tr><td>{{.Domain}}</td><td><code>{{.Bucket}}</code></td><td><code>{{.Descriptor}}</code></td><td class="n">{{printf "%.2f" .Rate}}/s</td>
<td>{{range .Rules}}{{.Rule}}: {{.Share}} of {{.Limit}} ({{.Members}} Envoys{{if .Used}}, {{.Used}} used{{end}})<br>{{end}}</td><td>{{.Assignment}}</td></tr>
{{end}}</table>{{if .QuotasMore}}<p class="note">and {{.QuotasMore}} more: GET /api/v1/rlqs or <code>sluice counters rlqs</code> lists them all.</p>{{end}}{{else}}<p>No Envoy reports a bucket.</p>{{end}}
</section>{{end}}
<section id="backend"><h2>Backend</h2>
{{with .Backend}}{{if eq .State "in process"}}<p>{{.Kind}}: <span class="ok">in process</span>: limits are kept in this instance's memory, nothing to reach.</p>
{{else if .Healthy}}<p>{{.Kind}}: <span class="ok">answering</span>: a PING was answered in {{printf "%.2f" .LatencyMS}} ms.</p>
{{else if .Kind}}<p>{{.Kind}}: <span class="bad">not answering</span>: a PING failed after {{printf "%.2f" .LatencyMS}} ms. Descriptors are answered by their domain's failure_mode meanwhile.</p>
{{else}}<p>No backend to ask.</p>{{end}}
{{with .Error}}<p class="err">{{.}}</p>{{end}}{{end}}
</section>
<section id="config"><h2>Configuration</h2>
<p>version <code>{{.Config.Version}}</code>, domains: {{range $i, $d := .Config.Domains}}{{if $i}}, {{end}}{{$d}}{{else}}none{{end}}</p>
<p>{{.Config.Reloads}} loads, {{.Config.Failures}} failed; last loaded {{since .Config.LastSuccess}}</p>
{{with .Config.LastError}}<p class="err">last reload failed ({{since $.Config.LastFailure}}), the previous config stays in use: <code>{{.}}</code></p>{{else}}<p class="ok">last reload succeeded</p>{{end}}
</section>
<section id="instance"><h2>Instance</h2>
<table><tr><td>host</td><td>{{.Instance.Hostname}} (pid {{.Instance.PID}})</td></tr>
<tr><td>started</td><td>{{since .Instance.Started}}</td></tr>
{{range $k, $v := .Instance.Listeners}}<tr><td>{{$k}}</td><td><code>{{$v}}</code></td></tr>{{end}}
</table></section>
{{with .Fleet}}<section id="fleet" class="wide"><h2>Fleet: {{.Answered}} of {{len .Members}} instances answering</h2>
<table><tr><th>instance</th><th>found by</th><th>version</th><th>up</th><th>config</th><th>backend</th><th>decisions/s</th><th>denials/s</th><th>shadow/s</th><th>errors+refused/s</th></tr>
{{range .Members}}{{if .Status}}<tr><td>{{.Status.Instance.Hostname}}{{if .Self}} (this one){{end}}<br><code>{{.Addr}}</code></td><td>{{.From}}</td><td>{{.Status.Instance.Version}}</td><td>{{.Status.Uptime}}</td>
<td><code>{{.Status.Config.Version}}</code>{{if .ConfigDiffers}} <span class="warn">differs</span>{{end}}</td>
<td>{{if .Status.Backend.Healthy}}<span class="ok">{{.Status.Backend.State}}</span>{{else}}<span class="bad">{{.Status.Backend.State}}</span>{{end}}</td>
<td class="n">{{rate .Status.Now.DecisionsPerSecond}}</td><td class="n">{{rate .Status.Now.DenialsPerSecond}}</td><td class="n">{{rate .Status.Now.ShadowPerSecond}}</td><td class="n">{{rate .Status.Now.ProblemsPerSecond}}</td></tr>
{{else}}<tr class="down"><td><code>{{.Addr}}</code></td><td>{{.From}}</td><td colspan="8"><span class="bad">not answering</span>: {{.Error}}</td></tr>{{end}}
{{end}}<tr><th colspan="6">all {{.Answered}} answering</th><th class="n">{{rate .Total.DecisionsPerSecond}}</th><th class="n">{{rate .Total.DenialsPerSecond}}</th><th class="n">{{rate .Total.ShadowPerSecond}}</th><th class="n">{{rate .Total.ProblemsPerSecond}}</th></tr>
</table>
{{with .DiscoveryError}}<p class="err">the instances announced in Redis could not be read: {{.}}</p>{{end}}
<p class="note">Rates are each instance's last full 10 s. Instances are the configured SLUICE_ADMIN_PEERS and those announced in the shared Redis (SLUICE_ADMIN_ADVERTISE).</p>
</section>{{end}}
</main></body></html>
`))
