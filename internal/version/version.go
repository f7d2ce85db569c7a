// Package version carries the build's version, stamped by the Makefile.
package version

// Version is set with -ldflags -X at build time.
var Version = "dev"
