// Package reload watches configuration paths and reloads the configuration
// when they change.
//
// It polls: every interval it computes a fingerprint of the paths (names,
// sizes, modification times and a hash of each file's content,
// following symlinks and skipping dot-entries) and, when the fingerprint
// differs from the last one, loads the configuration again. A valid
// configuration replaces the one in use; an invalid one is logged and
// counted, and the last good configuration stays in use. Polling needs no
// inotify and sees every way a directory can change, including the
// Kubernetes ConfigMap update that swaps the `..data` symlink to a new
// directory (docs/decisions/0007-polling-reload.md).
//
// It owns when to reload and what to log about it. It does not know how a
// configuration is parsed (the caller passes the load function) nor who
// uses it (the caller passes the apply function), and it knows nothing of
// gRPC, HTTP or backends. Where a reload swaps the config: `sluice serve`
// passes descriptor.Load as the load function and, as the apply function,
// internal/service's Service.SetConfig (an atomic pointer swap), in
// cmd/sluice/serve.go's loadFiles.
package reload
