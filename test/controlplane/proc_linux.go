package controlplane

import "syscall"

// childProcAttr puts the child in its own process group (a terminal's
// Ctrl-C reaches only the parent, which then stops it in order) and has the
// kernel kill it if the parent itself dies without cleaning up.
func childProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
