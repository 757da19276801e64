#!/usr/bin/env bash
# Open-ended fuzzing of the recipe importers, outside the suite: the property tests of
# tests/importers/test_import_fuzz.py with random (not derandomized) examples, round after round, until the time
# budget (seconds, default 600) is spent. A failure prints hypothesis's falsifying script: add it to the test as an
# explicit @example before fixing it, so the suite keeps it.
set -euo pipefail
cd "$(dirname "$0")/.."
budget=${1:-600}
end=$((SECONDS + budget))
round=0
while [ "$SECONDS" -lt "$end" ]; do
  round=$((round + 1))
  left=$((end - SECONDS))
  echo "fuzz round $round (${left} s left)"
  HYPOTHESIS_PROFILE=fuzz RLHF_FUZZ_EXAMPLES=200 timeout "$left" .venv/bin/pytest -q -n 0 -p no:cacheprovider \
    -m "" tests/importers/test_import_fuzz.py -k never_crashes || { rc=$?; [ "$rc" = 124 ] && break; exit "$rc"; }
done
echo "fuzz: no failure in $round round(s) of ${budget} s"
