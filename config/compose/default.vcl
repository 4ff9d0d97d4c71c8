# The parent cache of config/compose/compose.yaml (Varnish 7.1, its shipped settings
# otherwise): thumbd asks a proxy in absolute form (GET http://host/path), one object per URL
# whichever thumbd asks.
vcl 4.1;
backend origin { .host = "origin"; .port = "80"; }
sub vcl_recv {
    if (req.url ~ "^https?://") {
        set req.http.host = regsub(req.url, "^https?://([^/]+).*$", "\1");
        set req.url = regsub(req.url, "^https?://[^/]+", "");
    }
}
