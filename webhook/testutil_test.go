package webhook

import (
	"bufio"
	"bytes"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
)

func bufioReader(b []byte) *bufio.Reader { return bufio.NewReader(bytes.NewReader(b)) }

func gvkOf(h typeHeader) schema.GroupVersionKind {
	return schema.FromAPIVersionAndKind(h.APIVersion, h.Kind)
}

func intOrStr(n int) intstr.IntOrString { return intstr.FromInt32(int32(n)) }
