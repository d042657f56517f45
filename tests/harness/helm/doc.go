// Package helm pins the helm release the harness builds (see go.mod's tool line); built from its own
// module because its k8s.io pins differ from the control plane's.
package helm
