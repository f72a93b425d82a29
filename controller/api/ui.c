/*
 * The web UI on the API's listener: GET / is the page, GET /ui/NAME its
 * script and style sheet, all from the assets built into the binary
 * (api/ui.h). They are public, like /healthz: they hold no data, and every
 * figure the page shows comes from the API with the user's token. Each
 * answer carries a strong ETag and `Cache-Control: no-cache` (the names are
 * fixed, so a browser revalidates and gets 304 until the controller is
 * upgraded), the gzip form when the client takes it, and headers that keep
 * the page from being framed or running scripts from anywhere else.
 */
#include "api/ui.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "api/api_int.h"

/* Only the bundle's own script and styles; uPlot sets inline styles, hence 'unsafe-inline'. */
#define UI_CSP                                                                                     \
    "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' "     \
    "data:; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

const struct api_ui_asset *api_ui_find(const char *name)
{
    if (name == NULL || name[0] == '\0')
        name = "index.html";
    for (size_t i = 0; i < api_ui_nassets; i++)
        if (strcmp(api_ui_assets[i].name, name) == 0)
            return &api_ui_assets[i];
    return NULL;
}

int api_ui_etag_matches(const char *inm, const char *etag)
{
    char tok[128];
    while (inm != NULL && kd_http_next_item(&inm, tok, sizeof(tok))) {
        const char *t = strncmp(tok, "W/", 2) == 0 ? tok + 2 : tok;
        if (strcmp(t, "*") == 0 || strcmp(t, etag) == 0)
            return 1;
    }
    return 0;
}

/* GET / and GET /ui/NAME. */
void api_ui_serve(struct api_rq *q)
{
    const char *name = q->nseg >= 2 ? q->seg[1] : "index.html";
    const struct api_ui_asset *a = api_ui_find(name);
    if (a == NULL) {
        api_error(q, 404, NULL, "no such file of the web UI: /ui/%s", name);
        return;
    }
    bool gz = a->gz_len < a->len && kd_http_accepts_gzip(kd_http_header(q->r, "Accept-Encoding"));
    const char *etag = gz ? a->etag_gz : a->etag;
    kd_http_add_header(q->r, "ETag", etag);
    kd_http_add_header(q->r, "Cache-Control", "no-cache");
    kd_http_add_header(q->r, "Vary", "Accept-Encoding");
    kd_http_add_header(q->r, "X-Content-Type-Options", "nosniff");
    if (strcmp(a->name, "index.html") == 0) {
        kd_http_add_header(q->r, "Content-Security-Policy", UI_CSP);
        kd_http_add_header(q->r, "X-Frame-Options", "DENY");
        kd_http_add_header(q->r, "Referrer-Policy", "no-referrer");
    }
    if (api_ui_etag_matches(kd_http_header(q->r, "If-None-Match"), etag)) {
        q->status = 304;
        kd_http_respond(q->r, 304, NULL, "", 0);
        return;
    }
    if (gz)
        kd_http_add_header(q->r, "Content-Encoding", "gzip");
    q->status = 200;
    kd_http_respond(q->r, 200, a->content_type, gz ? a->gz : a->data, gz ? a->gz_len : a->len);
}
