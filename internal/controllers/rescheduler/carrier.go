package rescheduler

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	toolscache "k8s.io/client-go/tools/cache"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/trainguard/trainguard/internal/foundations/contract"
	"github.com/trainguard/trainguard/internal/policy"
)

// The carriers the zone and cluster brakes count: the nodes managed pods
// of opted-in namespaces ran on, read from an index of the pod informer.

// carrierNodes is the set of nodes a pod trainguard manages runs on:
// labelled managed, not opted out, in a namespace that opted in. The label
// alone is anyone's to set: counted as it was, pods of namespaces that
// never opted in, on healthy nodes, diluted the zone's unhealthy fraction
// and kept the brake off during a partition.
func (b *brakes) carrierNodes(ctx context.Context) (map[string]bool, error) {
	keys, err := b.carrierKeys(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing the nodes that carry managed pods: %w", err)
	}
	nodes := map[string]bool{}
	namespaces := map[string]bool{} // the namespace's verdict, asked once a count
	for _, key := range keys {
		ns, node, ok := strings.Cut(key, "/")
		if !ok || nodes[node] {
			continue
		}
		in, asked := namespaces[ns]
		if !asked {
			_, why, err := b.scope.Object(ctx, ns, nil)
			if err != nil {
				return nil, err
			}
			in = why == ""
			namespaces[ns] = in
		}
		if in {
			nodes[node] = true
		}
	}
	return nodes, nil
}

// IndexCarrier indexes the cached managed pods by "namespace/node", for a
// pod on a node that did not opt out: its values are the distinct pairs
// the brakes count carriers from, read without copying a pod.
const IndexCarrier = "trainguard.io/carrier"

// carrierKey is a pod's IndexCarrier value: none for a pod on no node, one
// that opted out or one that never ran on its node (the namespace's opt-in
// is judged at count time: it can change without the pod changing).
func carrierKey(obj any) ([]string, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok || pod.Spec.NodeName == "" || !ranOnNode(pod) || policy.OptOut(pod.Annotations) != "" || pod.Labels[contract.LabelManaged] != "true" {
		return nil, nil
	}
	return []string{pod.Namespace + "/" + pod.Spec.NodeName}, nil
}

// ranOnNode: the node's kubelet took the pod up (it set a start time or a
// phase past Pending). spec.nodeName alone is the pod's creator's to write:
// a tenant's Pending pods pinned to nodes under repair would otherwise count
// those nodes as lost carriers and engage a zone brake that holds every
// other tenant's recoveries. Only the kubelet (or trainguard, marking a
// lost pod Failed) writes the status.
func ranOnNode(pod *corev1.Pod) bool {
	return pod.Status.StartTime != nil || (pod.Status.Phase != "" && pod.Status.Phase != corev1.PodPending)
}

// indexedCarrierKeys lists IndexCarrier's values from the pod informer's
// own index: strings only, no pod copied.
func indexedCarrierKeys(idx toolscache.Indexer) func(context.Context) ([]string, error) {
	return func(context.Context) ([]string, error) { return idx.ListIndexFuncValues(IndexCarrier), nil }
}

// carrierIndex adds IndexCarrier to the pod informer and returns its
// reader. The informer's own indexer, not a field index of the cache: the
// cache's List copies every pod it returns, and the brakes need only the
// distinct (namespace, node) pairs.
func carrierIndex(mgr ctrl.Manager) (func(context.Context) ([]string, error), error) {
	inf, err := mgr.GetCache().GetInformer(context.Background(), &corev1.Pod{})
	if err != nil {
		return nil, fmt.Errorf("getting the pod informer: %w", err)
	}
	if err := inf.AddIndexers(toolscache.Indexers{IndexCarrier: carrierKey}); err != nil {
		return nil, fmt.Errorf("indexing pods by namespace and node: %w", err)
	}
	idx, ok := inf.(interface{ GetIndexer() toolscache.Indexer })
	if !ok {
		return nil, fmt.Errorf("the pod informer (%T) has no indexer to read the carrier index from", inf)
	}
	return indexedCarrierKeys(idx.GetIndexer()), nil
}
