// Package e2e runs trainguard's end-to-end scenarios on a real local cluster
// (`make cluster`: kube-apiserver, scheduler, controller-manager, three
// kubelets with their own containerd, CoreDNS, cert-manager and the kubeflow
// training-operator). The tests carry the `e2e` build tag and run with
// `make e2e`; see docs/e2e.md.
package e2e
