# The web UI (ui/, docs/ui.md): its assets served by the real controller over HTTP, and the
# pages in headless Chromium against a real stack (PostgreSQL, kdet-local, kdet-controller).
$(eval $(call kd_test_script,test_ui_serve,tests/ui/serve.sh,120,,$(O)/bin/kdet-controller $(O)/bin/kdet-local))
$(eval $(call kd_test_script,test_ui_browser,tests/ui/browser.sh,300,noasan,$(O)/bin/kdet-controller $(O)/bin/kdet-local $(O)/bin/kdet-launch $(O)/bin/det $(O)/bin/dtrain $(O)/ui/app.js))
