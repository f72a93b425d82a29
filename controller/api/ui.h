/*
 * The web UI's assets as built into kdet-controller: the bundle that `make`
 * produces in $(O)/ui (ui/rules.mk) is turned into C arrays by ui/embed.sh,
 * each file with its gzip form and a strong ETag, so the controller serves
 * the UI from its own binary with no file or download at run time.
 */
#ifndef KD_CONTROLLER_API_UI_H
#define KD_CONTROLLER_API_UI_H

#include <stddef.h>

struct api_ui_asset {
    const char *name;         /* "index.html", "app.js", "app.css" */
    const char *content_type; /* with its charset */
    const unsigned char *data;
    size_t len;
    const unsigned char *gz; /* the same bytes gzipped (gzip -9n) */
    size_t gz_len;
    const char *etag;    /* "\"<sha256 prefix>\"" of data */
    const char *etag_gz; /* "\"<sha256 prefix>-gz\"" */
};

/** The embedded assets (generated into $(O)/gen/ui/assets.c); read-only, any thread. */
extern const struct api_ui_asset api_ui_assets[];
extern const size_t api_ui_nassets;

/** The asset named `name` ("" or NULL: index.html), or NULL. */
const struct api_ui_asset *api_ui_find(const char *name);

/** Whether an If-None-Match header value names etag (or is "*"); weak forms match too. */
int api_ui_etag_matches(const char *if_none_match, const char *etag);

#endif
