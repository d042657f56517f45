// Package nhc pins the NodeHealthCheck operator release the end-to-end harness builds (see go.mod's
// tool line). `go install …@v0.12.0` cannot be used: it asks the module proxy for the module's version
// list to look for deprecations, and the proxy refuses that list (403) while serving v0.12.0 itself.
package nhc
