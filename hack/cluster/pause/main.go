// Command pause is the sandbox ("pause") container of `make cluster`'s nodes:
// it holds the pod's namespaces and exits on SIGTERM/SIGINT. The upstream
// image is C and would come from a registry; this is the same behaviour built
// from this repository.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGTERM, syscall.SIGINT)
	// As PID 1 of the sandbox it also reaps nothing: pods share no PID namespace here.
	<-ch
}
