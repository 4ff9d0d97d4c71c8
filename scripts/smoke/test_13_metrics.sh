#!/usr/bin/env bash
# /metrics as Prometheus reads it: parsed by prometheus_client's text parser (the official
# Python client's), every family with its HELP, the request and resize histograms, the
# process_* set, build info and the cache's capacity; an origin's 404 counted as an
# upstream error only, a client's typo as a client error.
source "$(dirname "$0")/lib.sh"
start_origin
THUMBD_UPSTREAM_ALLOW_PRIVATE_NETWORKS=true start_thumbd --db "$WORK/cache.sqlite"
curl -s -o /dev/null "$THUMBD/thumb?url=$(urlencode "$ORIGIN/img/m1.jpg")&w=32"
curl -s -o /dev/null "$THUMBD/thumb?url=$(urlencode "$ORIGIN/status/404")"
curl -s -o /dev/null "$THUMBD/thumb?url=$(urlencode "$ORIGIN/img/m1.jpg")&width=32"
curl -s "$THUMBD/metrics" > "$WORK/metrics"
python3 - "$WORK/metrics" <<'PY' || fail "$(cat "$WORK/metrics" | head -50)"
import sys
from prometheus_client.parser import text_string_to_metric_families
families = {f.name: f for f in text_string_to_metric_families(open(sys.argv[1]).read())}
missing_help = [name for name, f in families.items() if not f.documentation]
assert not missing_help, f"no HELP: {missing_help}"
def samples(name, **labels):
    return [s for f in families.values() for s in f.samples
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())]
def value(name, **labels):
    found = samples(name, **labels)
    assert found, f"no sample {name} {labels}"
    return sum(s.value for s in found)
for family, kind in [("thumbd_http_request_duration_seconds", "histogram"), ("thumbd_resize_duration_seconds", "histogram"),
                     ("process_cpu_seconds", "counter"), ("process_start_time_seconds", "gauge"), ("process_max_fds", "gauge"),
                     ("process_open_fds", "gauge"), ("process_resident_memory_bytes", "gauge"), ("thumbd_build_info", "gauge"),
                     ("thumbd_store_capacity_bytes", "gauge")]:
    assert family in families and families[family].type == kind, f"{family}: {families.get(family)}"
assert value("thumbd_http_request_duration_seconds_count", route="/thumb") == 3
assert value("thumbd_resize_duration_seconds_count") == 1
assert value("thumbd_build_info") == 1 and samples("thumbd_build_info")[0].labels.get("libvips", "").startswith("8.")
assert value("thumbd_store_capacity_bytes") > 0 and value("process_max_fds") > 0 and value("process_cpu_seconds_total") > 0
assert value("thumbd_upstream_errors_total", code="upstream_not_found") == 1
assert not samples("thumbd_client_errors_total", code="upstream_not_found"), "an origin's 404 counted as a client error"
assert value("thumbd_client_errors_total", code="unknown_parameter") == 1
PY
