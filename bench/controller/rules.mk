# bench/controller: kdet-controller with 1,000 trials (time, API calls and writes per trial, CPU,
# RSS) and its RSS with 10,000 trials cached, against the goals and kubectl create.
$(eval $(call kd_bench,controller,bench/controller/run.sh,$(O)/bin/kdet-controller $(O)/bin/kdet-local $(O)/bin/kdet-launch))
