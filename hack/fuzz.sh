#!/usr/bin/env bash
# Run every Go fuzz target in the repository for DURATION each.
#
#   bash hack/fuzz.sh [DURATION]        # DURATION is a go test -fuzztime value, default 60s
#   FUZZ_PARALLEL=1 bash hack/fuzz.sh   # limit fuzzing workers on a shared machine
#
# Targets are discovered with `go test -list '^Fuzz' ./...`, so a new Fuzz
# function is picked up without editing this script. Go can fuzz only one
# target per invocation, hence one `go test -fuzz` per target. A failing
# target does not stop the others; the script exits non-zero at the end and
# the failing input is left in the package's testdata/fuzz/<target>/.
set -euo pipefail

duration="${1:-60s}"
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# `go test -list` prints the matching names of a package, then its
# "ok <package> <time>" line. A package that does not compile is reported
# and fails the run, but does not keep the other packages from fuzzing.
list_failed=0
listing="$(go test -list '^Fuzz' ./... 2>&1)" || list_failed=1
if [ "$list_failed" -ne 0 ]; then
	echo "fuzz.sh: listing fuzz targets failed in some packages:" >&2
	grep -v -e '^Fuzz' -e '^ok' -e '^?' <<<"$listing" >&2 || true
fi
targets=()
pending=()
while IFS= read -r line; do
	case "$line" in
	Fuzz*) pending+=("$line") ;;
	ok*)
		pkg="$(awk '{print $2}' <<<"$line")"
		for name in ${pending[@]+"${pending[@]}"}; do
			targets+=("$pkg $name")
		done
		pending=()
		;;
	*) pending=() ;;
	esac
done <<<"$listing"

if [ "${#targets[@]}" -eq 0 ]; then
	echo "fuzz.sh: no Fuzz targets found" >&2
	exit 1
fi

parallel=()
if [ -n "${FUZZ_PARALLEL:-}" ]; then
	parallel=(-parallel "$FUZZ_PARALLEL")
fi

failed=()
for target in "${targets[@]}"; do
	read -r pkg name <<<"$target"
	echo "==> $pkg $name ($duration)"
	if ! go test "$pkg" -run '^$' -fuzz "^${name}\$" -fuzztime "$duration" ${parallel[@]+"${parallel[@]}"}; then
		failed+=("$pkg $name")
	fi
done

if [ "${#failed[@]}" -gt 0 ]; then
	echo "fuzz.sh: failing targets:" >&2
	printf '  %s\n' "${failed[@]}" >&2
	exit 1
fi
if [ "$list_failed" -ne 0 ]; then
	echo "fuzz.sh: some packages could not be listed (see above)" >&2
	exit 1
fi
echo "fuzz.sh: ${#targets[@]} targets ran for $duration each without failure"
