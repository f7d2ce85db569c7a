package main

// exitCoder is an error that carries the process exit code the CLI contract
// requires (validate: 1 invalid, 2 unreadable input or bad usage).
type exitCoder interface {
	error
	ExitCode() int
}

type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }
func (e *exitError) ExitCode() int { return e.code }

// exitWith returns an error that makes main exit with code, printing msg (if any).
func exitWith(code int, msg string) error { return &exitError{code: code, msg: msg} }
