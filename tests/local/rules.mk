# Tests for kdet-local and lib/http.
$(eval $(call kd_test_script,test_local_conformance,tests/local/conformance.sh,300,,$(O)/bin/kdet-local))
