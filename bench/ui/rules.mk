# bench/ui: the experiment page of the web UI with 1,000 trials of 1,000 points each in
# headless Chromium: time to first render, to interactive, bytes transferred; against the
# first slice's way (two requests per trial).
$(eval $(call kd_bench,ui,bench/ui/run.sh,$(O)/bin/kdet-controller $(O)/bin/kdet-local $(O)/bin/kdet-launch $(O)/ui/app.js))
