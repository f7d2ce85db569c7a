package webhook

import (
	"bufio"
	"bytes"

	"k8s.io/apimachinery/pkg/util/intstr"
)

func bufioReader(b []byte) *bufio.Reader { return bufio.NewReader(bytes.NewReader(b)) }

func intOrStr(n int) intstr.IntOrString { return intstr.FromInt32(int32(n)) }
