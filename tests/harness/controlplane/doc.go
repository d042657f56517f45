// Package controlplane pins the Kubernetes release whose kube-apiserver, kube-controller-manager,
// kube-scheduler and kubectl the end-to-end harness builds (see go.mod's tool block).
package controlplane
