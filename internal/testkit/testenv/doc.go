// Package testenv holds the small helpers the tests of several sluice
// packages share, as Go's own internal/testenv does: a settable clock
// (Clock), waiting for a condition brought about by another goroutine or
// process (Until), a log buffer safe across goroutines (SyncBuffer), whole
// file replacement (ReplaceFile, SharedLinks), one HTTP round trip
// (HTTPDo, HTTPGet, HTTPPost), finding an external tool (FindTool), the
// wanted-error check of a table case (WantErr), the descriptor inputs the
// fuzz tests share (FuzzDescriptor, EveryNodeYAML), and the testing of a
// test helper itself (RunHelper). It is test support: no product package
// imports it.
package testenv
