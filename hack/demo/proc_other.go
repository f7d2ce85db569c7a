//go:build !linux

package main

import "syscall"

// childProcAttr puts the child in its own process group, so a terminal's
// Ctrl-C reaches only the demo, which then stops it in order.
func childProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
