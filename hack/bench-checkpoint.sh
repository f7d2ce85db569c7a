#!/usr/bin/env bash
# Figures for the README: preStop-to-acknowledgement time with ~100 MB of
# trainer state on local disk, and the stripped trainguard-agent size.
# Both come from BenchmarkPrestopToAck100MB in test/checkpoint.
set -euo pipefail
cd "$(dirname "$0")/.."
go test ./test/checkpoint -run '^$' -bench PrestopToAck100MB -benchtime "${BENCHTIME:-5x}" -count 1 |
	awk '/^BenchmarkPrestopToAck100MB/ {
		printf "prestop -> ack, 100 MB state, local disk: %.0f ms/op\n", $3 / 1e6
		printf "trainguard-agent (CGO off, -s -w):        %d bytes (%.2f MiB)\n", $5, $5 / 1048576
	} /^(FAIL|ok|PASS)/ { print }'
