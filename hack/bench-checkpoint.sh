#!/usr/bin/env bash
# Figures for docs/checkpoint-protocol.md and docs/performance.md: in one
# run, on the same disk, raw torch.save + fsync of the trainer's state against
# trainguard's preStop -> acknowledgement for the same state (100 MB and
# 1 GB), their ratio, and the stripped trainguard-agent size. All come from
# BenchmarkCheckpointVsRawSave in test/checkpoint (medians of TRAINGUARD_BENCH_RUNS runs, default 5).
set -euo pipefail
cd "$(dirname "$0")/.."
go test ./test/checkpoint -run '^$' -bench CheckpointVsRawSave -benchtime 1x -count 1 -timeout 60m -v |
	awk '
	/^BenchmarkCheckpointVsRawSave\// && /ratio/ {
		split($1, name, "/"); sub(/-[0-9]+$/, "", name[2])
		for (i = 3; i < NF; i++) {
			if ($(i+1) == "raw-save-ms") raw = $i
			if ($(i+1) == "prestop-ack-ms") pre = $i
			if ($(i+1) == "ratio") ratio = $i
			if ($(i+1) == "agent-bytes") agent = $i
		}
		printf "%-7s raw torch.save+fsync %8.1f ms   preStop -> ack %8.1f ms   ratio %.2fx\n", name[2], raw, pre, ratio
	}
	/bench_test.go:[0-9]+: / { sub(/^ +/, ""); print "  " $0 }
	/^(FAIL|ok|PASS)/ { print }
	END { if (agent) printf "trainguard-agent (CGO off, -s -w): %d bytes (%.2f MiB)\n", agent, agent / 1048576 }'
