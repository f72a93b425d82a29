# ui/: the web UI (docs/ui.md). JavaScript in ui/src bundled by esbuild, with uPlot for the
# charts, from the npm packages pinned by ui/package.json + ui/package-lock.json (npm ci into
# ui/node_modules, git-ignored: by `make deps`, or by the first build when npm is there).
# The bundle goes to $(O)/ui and, as C arrays (ui/embed.sh), into kdet-controller, which
# serves it (controller/api/ui.c): no file or download at run time.
# chromium + puppeteer-core (from the same package.json) drive the browser test (tests/ui).
DEB_PACKAGES += nodejs xxd gzip chromium
UI_STAMP := ui/node_modules/.package-lock.json
UI_SRCS := $(wildcard ui/src/*.js ui/src/*.css) ui/index.html
UI_OUT := $(O)/ui
UI_ASSETS := $(UI_OUT)/index.html $(UI_OUT)/app.js $(UI_OUT)/app.css
DEPS_EXTRA += ui-npm-install

.PHONY: ui-npm-install
ui-npm-install:
	@command -v npm > /dev/null || mk/deps.sh npm || exit 1
	@$(MAKE) --no-print-directory $(UI_STAMP)

$(UI_STAMP): ui/package.json ui/package-lock.json
	@command -v npm > /dev/null || { \
	  echo "ui: npm is not installed: the web UI is bundled by esbuild from npm (ui/package.json)." >&2; \
	  echo "ui: run 'make deps' (Debian's nodejs and npm, then npm ci into ui/node_modules)." >&2; \
	  exit 1; }
	@echo "ui: npm ci into ui/node_modules"
	$(Q)cd ui && npm ci --no-audit --no-fund --loglevel=error
	@touch $@

# One esbuild run writes app.js and app.css (the CSS the script imports, uPlot's included).
$(UI_OUT)/app.js: $(UI_SRCS) $(UI_STAMP)
	@mkdir -p $(@D)
	@$(if $(Q),echo "  ESBUILD $@")
	$(Q)ui/node_modules/.bin/esbuild ui/src/main.js --bundle --minify --format=iife \
	  --target=es2020 --legal-comments=none --log-level=warning --outfile=$@
$(UI_OUT)/app.css: $(UI_OUT)/app.js
	@test -f $@
$(UI_OUT)/index.html: ui/index.html
	@mkdir -p $(@D)
	$(Q)cp $< $@

$(O)/gen/ui/assets.c: $(UI_ASSETS) ui/embed.sh
	@mkdir -p $(@D)
	@$(if $(Q),echo "  EMBED   $@")
	$(Q)ui/embed.sh $@ $(UI_ASSETS)
$(O)/obj/$(O)/gen/ui/%.o: KD_CFLAGS += -iquote controller

ui: $(UI_ASSETS)
.PHONY: ui
