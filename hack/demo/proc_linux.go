package main

import "syscall"

// childProcAttr puts the child in its own process group (a terminal's
// Ctrl-C reaches only the demo, which then stops it in order) and has the
// kernel kill it if the demo itself dies without cleaning up.
func childProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
