package integration

import "k8s.io/apimachinery/pkg/runtime"

func runtimeConvert(m map[string]any, into any) error {
	return runtime.DefaultUnstructuredConverter.FromUnstructured(m, into)
}
