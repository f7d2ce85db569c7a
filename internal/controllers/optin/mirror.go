// Package optin mirrors a namespace's opt-in annotation into a label,
// because webhook namespaceSelectors can only see labels. Whether
// trainguard acts on a namespace or an object is policy.Scope's to decide.
package optin

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	"github.com/trainguard/trainguard/internal/foundations/contract"
)

// Mirror reconciles the trainguard.io/inject label from the namespace
// annotation. The namespace mutating webhook does the same at admission;
// this catches namespaces annotated while trainguard was down, and ones
// that existed before trainguard was installed.
type Mirror struct {
	Client client.Client
}

// SetupMirror registers the mirror with the manager (leader-elected).
func SetupMirror(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named("namespace-optin-mirror").
		For(&corev1.Namespace{}, builder.WithPredicates(wakeWhenOutOfStep())).
		Complete(&Mirror{Client: mgr.GetClient()})
}

// Reconcile patches one namespace's label to match its annotation.
func (m *Mirror) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var ns corev1.Namespace
	if err := m.Client.Get(ctx, req.NamespacedName, &ns); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	before := ns.DeepCopy()
	if !contract.MirrorInjectLabel(&ns.ObjectMeta) {
		return ctrl.Result{}, nil
	}
	if err := m.Client.Patch(ctx, &ns, client.MergeFrom(before)); err != nil {
		if apierrors.IsNotFound(err) {
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, fmt.Errorf("mirroring %s label on namespace %s: %w", contract.LabelInjectEnabled, ns.Name, err)
	}
	ctrl.LoggerFrom(ctx).Info("mirrored opt-in annotation into label", "namespace", ns.Name, "label", ns.Labels[contract.LabelInjectEnabled])
	return ctrl.Result{}, nil
}

// wakeWhenOutOfStep only wakes the mirror when the label is out of step.
func wakeWhenOutOfStep() predicate.Predicate {
	return predicate.Funcs{
		CreateFunc: func(e event.CreateEvent) bool { return outOfStep(e.Object) },
		UpdateFunc: func(e event.UpdateEvent) bool { return outOfStep(e.ObjectNew) },
		DeleteFunc: func(event.DeleteEvent) bool { return false },
	}
}

func outOfStep(obj client.Object) bool {
	want, ok := contract.DesiredInjectLabel(obj.GetAnnotations())
	have, has := obj.GetLabels()[contract.LabelInjectEnabled]
	return ok != has || want != have
}
