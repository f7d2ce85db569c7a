//go:build !linux

package controlplane

import "syscall"

// childProcAttr puts the child in its own process group, so a terminal's
// Ctrl-C reaches only the parent, which then stops it in order.
func childProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
