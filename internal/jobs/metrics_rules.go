package jobs

import (
	"fmt"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Metrics of an elastic policy become an HorizontalPodAutoscaler; a
// malformed one is refused by the API server only when the operator
// creates the HPA, long after the job was accepted. These are the
// autoscaling/v2 rules that matter: a known type, its source set, a named
// metric or resource, and a target whose value matches its type.

func metricTypes() []string {
	return []string{"ContainerResource", "External", "Object", "Pods", "Resource"}
}

func validateMetrics(metrics []autoscalingv2.MetricSpec, mPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	for i := range metrics {
		errs = append(errs, validateMetric(&metrics[i], mPath.Index(i))...)
	}
	return errs
}

func validateMetric(m *autoscalingv2.MetricSpec, p *field.Path) field.ErrorList {
	t := string(m.Type)
	if !contains(metricTypes(), t) {
		return field.ErrorList{field.NotSupported(p.Child("type"), t, metricTypes())}
	}
	source := map[string]bool{"Object": m.Object != nil, "Pods": m.Pods != nil, "Resource": m.Resource != nil,
		"ContainerResource": m.ContainerResource != nil, "External": m.External != nil}
	member := map[string]string{"Object": "object", "Pods": "pods", "Resource": "resource", "ContainerResource": "containerResource", "External": "external"}
	if !source[t] {
		return field.ErrorList{field.Required(p.Child(member[t]), fmt.Sprintf("must be specified for a metric of type %s", t))}
	}
	var errs field.ErrorList
	for _, other := range metricTypes() { // sorted: errors in a stable order
		if source[other] && other != t {
			errs = append(errs, field.Forbidden(p.Child(member[other]), fmt.Sprintf("must not be set for a metric of type %s", t)))
		}
	}
	return append(errs, validateMetricSource(m, p.Child(member[t]))...)
}

func validateMetricSource(m *autoscalingv2.MetricSpec, p *field.Path) field.ErrorList {
	switch m.Type {
	case autoscalingv2.ResourceMetricSourceType:
		return append(requiredName(string(m.Resource.Name), p.Child("name")), validateTarget(m.Resource.Target, true, p.Child("target"))...)
	case autoscalingv2.ContainerResourceMetricSourceType:
		errs := requiredName(string(m.ContainerResource.Name), p.Child("name"))
		errs = append(errs, requiredName(m.ContainerResource.Container, p.Child("container"))...)
		return append(errs, validateTarget(m.ContainerResource.Target, true, p.Child("target"))...)
	case autoscalingv2.PodsMetricSourceType:
		return append(requiredName(m.Pods.Metric.Name, p.Child("metric", "name")), validateTarget(m.Pods.Target, false, p.Child("target"))...)
	case autoscalingv2.ObjectMetricSourceType:
		errs := requiredName(m.Object.Metric.Name, p.Child("metric", "name"))
		errs = append(errs, requiredName(m.Object.DescribedObject.Kind, p.Child("describedObject", "kind"))...)
		errs = append(errs, requiredName(m.Object.DescribedObject.Name, p.Child("describedObject", "name"))...)
		return append(errs, validateTarget(m.Object.Target, false, p.Child("target"))...)
	case autoscalingv2.ExternalMetricSourceType:
		return append(requiredName(m.External.Metric.Name, p.Child("metric", "name")), validateTarget(m.External.Target, false, p.Child("target"))...)
	}
	return nil
}

func requiredName(v string, p *field.Path) field.ErrorList {
	if v == "" {
		return field.ErrorList{field.Required(p, "must be specified")}
	}
	return nil
}

// validateTarget: Utilization (resources only) needs averageUtilization > 0,
// Value needs value, AverageValue needs averageValue.
func validateTarget(t autoscalingv2.MetricTarget, resource bool, p *field.Path) field.ErrorList {
	types := []string{"AverageValue", "Value"}
	if resource {
		types = []string{"AverageValue", "Utilization", "Value"}
	}
	switch {
	case !contains(types, string(t.Type)):
		return field.ErrorList{field.NotSupported(p.Child("type"), string(t.Type), types)}
	case t.Type == autoscalingv2.UtilizationMetricType && (t.AverageUtilization == nil || *t.AverageUtilization < 1):
		return field.ErrorList{field.Required(p.Child("averageUtilization"), "must be a positive percentage for a Utilization target, e.g. 80")}
	case t.Type == autoscalingv2.ValueMetricType && t.Value == nil:
		return field.ErrorList{field.Required(p.Child("value"), "must be specified for a Value target")}
	case t.Type == autoscalingv2.AverageValueMetricType && t.AverageValue == nil:
		return field.ErrorList{field.Required(p.Child("averageValue"), "must be specified for an AverageValue target")}
	}
	return nil
}
