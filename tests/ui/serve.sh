#!/usr/bin/env bash
# The web UI served by kdet-controller on the API's listener (controller/api/ui.c), over
# real HTTP: GET / and /ui/NAME answer the bundle that `make` built into the binary, byte
# for byte, with their Content-Type, a strong ETag (304 on If-None-Match), Cache-Control,
# the gzip form when asked for, the page's security headers; no token is needed for them,
# while the API still answers 401 without one; unknown assets are 404, other methods 405.
. "${KD_SRC:?}/e2e/controller/lib.sh"
need_pg || exit 77
trap 'stop_pg; finish; exit $?' EXIT
start_pg || exit 1
start_local 0 || exit 1
start_ctrl_api
echo "# controller url: $URL"
UI=$KD_BUILD/ui

# fetch NAME PATH [CURL ARGS...]: headers to $T/NAME.h, body to $T/NAME.b, status printed.
fetch() {
    local name=$1 path=$2
    shift 2
    curl -s -o "$T/$name.b" -D "$T/$name.h" -w '%{http_code}' "$@" "$URL$path"
}
hdr() { sed -n "s/^$2: *//Ip" "$T/$1.h" | tr -d '\r' | head -1; }

check "GET / answers 200 without a token" test "$(fetch root /)" = 200
check "GET / is the page, as built" cmp -s "$T/root.b" "$UI/index.html"
check "GET /: text/html; charset=utf-8" test "$(hdr root Content-Type)" = "text/html; charset=utf-8"
check "GET /: Cache-Control no-cache" test "$(hdr root Cache-Control)" = "no-cache"
etag=$(hdr root ETag)
check "GET /: a strong ETag ($etag)" grep -qE '^"[0-9a-f]{20}"$' <<<"$etag"
check "GET /: a Content-Security-Policy that allows only the page's own scripts" \
    grep -q "script-src 'self';" <<<"$(hdr root Content-Security-Policy)"
check "GET /: X-Frame-Options DENY" test "$(hdr root X-Frame-Options)" = DENY
check "GET /: nosniff" test "$(hdr root X-Content-Type-Options)" = nosniff
check "the page loads ui/app.js and ui/app.css" eval 'grep -q "src=\"ui/app.js\"" "$T/root.b" && grep -q "href=\"ui/app.css\"" "$T/root.b"'

check "GET /ui/app.js answers 200" test "$(fetch js /ui/app.js)" = 200
check "GET /ui/app.js is the bundle, byte for byte" cmp -s "$T/js.b" "$UI/app.js"
check "GET /ui/app.js: text/javascript" test "$(hdr js Content-Type)" = "text/javascript; charset=utf-8"
check "GET /ui/app.css answers 200" test "$(fetch css /ui/app.css)" = 200
check "GET /ui/app.css is the style sheet" cmp -s "$T/css.b" "$UI/app.css"
check "GET /ui/app.css: text/css" test "$(hdr css Content-Type)" = "text/css; charset=utf-8"
check "GET /ui/index.html is the page too" eval '[ "$(fetch idx /ui/index.html)" = 200 ] && cmp -s "$T/idx.b" "$UI/index.html"'

# gzip when asked for, identity otherwise; a q=0 refusal is honoured.
check "Accept-Encoding: gzip gets 200" test "$(fetch jsgz /ui/app.js -H 'Accept-Encoding: gzip')" = 200
check "... Content-Encoding: gzip" test "$(hdr jsgz Content-Encoding)" = gzip
check "... Vary: Accept-Encoding" test "$(hdr jsgz Vary)" = Accept-Encoding
check "... which unzips to the bundle" eval 'gzip -dc "$T/jsgz.b" | cmp -s - "$UI/app.js"'
check "... and is smaller ($(wc -c <"$T/jsgz.b") of $(wc -c <"$UI/app.js") bytes)" \
    test "$(wc -c <"$T/jsgz.b")" -lt "$(wc -c <"$UI/app.js")"
check "... with its own ETag" test "$(hdr jsgz ETag)" != "$(hdr js ETag)"
fetch jsq0 /ui/app.js -H 'Accept-Encoding: gzip;q=0, deflate' >/dev/null
check "gzip;q=0: not gzipped" eval '[ -z "$(hdr jsq0 Content-Encoding)" ] && cmp -s "$T/jsq0.b" "$UI/app.js"'
check "curl --compressed gets the bundle" eval '[ "$(fetch jsc /ui/app.js --compressed)" = 200 ] && cmp -s "$T/jsc.b" "$UI/app.js"'

# Revalidation.
check "If-None-Match with the ETag: 304" test "$(fetch r304 / -H "If-None-Match: $etag")" = 304
check "... with no body" test ! -s "$T/r304.b"
check "... and the ETag again" test "$(hdr r304 ETag)" = "$etag"
check "If-None-Match with another ETag: 200" test "$(fetch r200 / -H 'If-None-Match: "0000"')" = 200
jsetag=$(hdr js ETag)
check "If-None-Match W/ and a list: 304" test "$(fetch rw /ui/app.js -H "If-None-Match: \"x\", W/$jsetag")" = 304

check "HEAD / answers 200 with no body" eval '[ "$(fetch head / -I)" = 200 ] && [ "$(hdr head Content-Type)" = "text/html; charset=utf-8" ]'
check "GET /ui/nope.js: 404" test "$(fetch nope /ui/nope.js)" = 404
check "... a JSON error naming the file" grep -q '"error":"no such file of the web UI: /ui/nope.js"' "$T/nope.b"
check "GET /ui/a/b: 404" test "$(fetch deep /ui/a/b)" = 404
check "GET /ui/..%2Fkubeconfig: 404" test "$(fetch dots /ui/..%2Fkubeconfig)" = 404
check "POST /: 405, Allow: GET" eval '[ "$(fetch post / -X POST)" = 405 ] && [ "$(hdr post Allow)" = GET ]'
check "the API still needs a token: GET /api/v1/me without one is 401" test "$(fetch me /api/v1/me)" = 401
check "... and answers with one" test "$(fetch me2 /api/v1/me -H "Authorization: Bearer $KDET_API_TOKEN")" = 200
check "the access log names the route" grep -q 'msg="http request" method=GET path=/ui/app.js status=200' "$T/ctrl.log"
check "the request counter labels the page's route /" eval \
    'curl -s "$URL/metrics" | grep -q "kdet_api_requests_total{method=\"GET\",route=\"/\",code=\"200\"}"'
