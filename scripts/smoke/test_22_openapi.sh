#!/usr/bin/env bash
# GET /openapi.json is the repository's document (Sources/ThumbdCore/Routing/openapi.json)
# with this build's version, a valid OpenAPI 3.1 document (openapi-spec-validator), and the
# running daemon answers as it says: Schemathesis generates a bounded number of requests
# per operation from it, and every answer must be no 5xx, a documented status, a documented
# content type, and (an error) the documented JSON. The daemon allows one origin host that
# does not resolve, so that no generated URL reaches the network (they are refused, 403),
# and takes requests of up to 256 KiB: a longer request line is refused by libmicrohttpd
# itself, with its own page and no Content-Type (the README's error table says so), which
# no OpenAPI document can describe; every generated request reaches thumbd instead.
source "$(dirname "$0")/lib.sh"
THUMBD_UPSTREAM_ALLOW_HOSTS=fuzz-origin.invalid THUMBD_SERVER_MAX_REQUEST_BYTES=262144 \
  start_thumbd --db "$WORK/cache.sqlite"
curl -sf "$THUMBD/openapi.json" > "$WORK/openapi.json" || fail "no /openapi.json"
python3 - "$WORK/openapi.json" "$ROOT/Sources/ThumbdCore/Routing/openapi.json" "$("$SMOKE_THUMBD" --version | head -1)" <<'PY' || exit 1
import json, sys
served, kept, version = json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), sys.argv[3].split()[-1]
assert served["info"]["version"] == version, f"version {served['info']['version']}, the build is {version}"
kept["info"]["version"] = version
assert served == kept, "the served document is not the repository's"
PY
openapi-spec-validator "$WORK/openapi.json" > "$WORK/validator.out" 2>&1 || fail "$(cat "$WORK/validator.out")"
EXAMPLES="${THUMBD_SCHEMATHESIS_EXAMPLES:-30}"
if ! schemathesis run "$THUMBD/openapi.json" --url "$THUMBD" --max-examples "$EXAMPLES" --seed 1 \
    --checks not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance \
    --request-timeout 10 --report junit --report-junit-path "$WORK/junit.xml" > "$WORK/schemathesis.out" 2>&1; then
  cut -c1-300 "$WORK/schemathesis.out" | grep -v "^\s*$" | tail -80 >&2
  fail "schemathesis found answers the document does not allow"
fi
kill -0 "$THUMBD_PID" || fail "the daemon did not survive"
cases="$(grep -A1 '^Test cases:' "$WORK/schemathesis.out" | tail -1 | xargs)"
operations="$(grep -E '^\s+Tested:' "$WORK/schemathesis.out" | awk '{print $2}')"
echo "   openapi-spec-validator: valid; schemathesis (--max-examples $EXAMPLES, seed 1): $operations operations, test cases: $cases"
echo "   ok"
