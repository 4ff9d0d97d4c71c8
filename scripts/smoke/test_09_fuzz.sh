#!/usr/bin/env bash
# The parsers of untrusted input under libFuzzer (Sources/ThumbdFuzz): the kept corpus
# replayed by the ordinary build, then a bounded fuzzing run (SMOKE_FUZZ_SECONDS, 60 s).
source "$(dirname "$0")/lib.sh"
"$(dirname "$SMOKE_THUMBD")/ThumbdFuzz" "$ROOT/Tests/Fuzz/corpus" | sed 's/^/   /' || fail "the kept corpus does not replay cleanly"
"$ROOT/scripts/fuzz" "${SMOKE_FUZZ_SECONDS:-60}" || fail "fuzzing found a crash (the input is in artifacts/)"
